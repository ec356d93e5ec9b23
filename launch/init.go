// The init is what infera-exec does when it stays as the
// worker's init instead of exec'ing it (--init, INFERA_EXEC_INIT): a
// minimal PID 1, or a child subreaper when something else is PID 1, as
// tini and dumb-init are.
//
// Why: with infera-exec as a container's entrypoint, the worker becomes
// PID 1. The kernel gives PID 1 no default signal actions, so a Python
// worker without a SIGTERM handler ignores `docker stop` until the
// runtime's SIGKILL, and nobody reaps the zombies that orphaned
// grandchildren leave. The init starts the worker as its child, forwards
// the usual signals to it, reaps every child that dies, and exits with
// the worker's status (128+signal when a signal killed it).

package launch

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// Forwarded are the signals the init passes to the worker: those a
// runtime, a terminal or an operator sends to ask something of the
// worker. SIGCHLD is the init's own; SIGKILL and SIGSTOP cannot be caught.
var Forwarded = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT,
}

// InitSpec is the worker to start, as the pass composed it.
type InitSpec struct {
	Path string
	Argv []string
	Env  []string
	Dir  string
	// Group: forward signals to the worker's process group (every
	// process it started that stayed in it), not only to the worker.
	Group bool
}

// InitOutcome is how the worker ended.
type InitOutcome struct {
	PID    int            // the worker's process id
	Code   int            // the status the init exits with
	Signal syscall.Signal // the signal that killed the worker, 0 if none
	Reaped int            // other children reaped (orphans' zombies)
}

// Run starts the worker and stays its init until it ends. The worker runs
// in a process group of its own, and takes the terminal's foreground when
// standard input is one, so a terminal's Ctrl-C reaches it once, not once
// from the terminal and once forwarded. A start that fails returns an
// error and no outcome; from then on Run returns only when the worker has
// ended. note receives one line per event worth logging.
func Supervise(s InitSpec, note func(string)) (InitOutcome, error) {
	if os.Getpid() != 1 {
		// Orphans below us are reparented to us, not to the real PID 1,
		// so we can reap them.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			note(fmt.Sprintf("init: cannot become a child subreaper (%v): orphans of the worker are reaped by PID 1", err))
		}
	}
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, Forwarded...)...)
	defer signal.Stop(sigs)

	attr := &syscall.SysProcAttr{Setpgid: true}
	if isTerminal(0) {
		attr.Foreground, attr.Ctty = true, 0
		// Handing the terminal over from the background would stop us.
		signal.Ignore(syscall.SIGTTOU, syscall.SIGTTIN)
	}
	pid, err := syscall.ForkExec(s.Path, s.Argv, &syscall.ProcAttr{
		Dir: s.Dir, Env: s.Env, Files: []uintptr{0, 1, 2}, Sys: attr,
	})
	if err != nil {
		return InitOutcome{}, fmt.Errorf("start %s: %w", s.Path, err)
	}
	out := InitOutcome{PID: pid}
	target := pid
	if s.Group {
		target = -pid // the group the worker leads
	}
	for {
		// Reap first: a worker that died before Notify saw SIGCHLD, or
		// between two signals, is found here.
		if done := reap(&out); done {
			return out, nil
		}
		sig := (<-sigs).(syscall.Signal)
		if sig == syscall.SIGCHLD {
			continue
		}
		if err := syscall.Kill(target, sig); err != nil && err != syscall.ESRCH {
			note(fmt.Sprintf("init: forward %v to %d: %v", sig, target, err))
		}
	}
}

// reap collects every child that has ended, without blocking, and reports
// whether the worker is among them.
func reap(out *InitOutcome) bool {
	done := false
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if p <= 0 || err != nil {
			return done
		}
		if p != out.PID {
			out.Reaped++
			continue
		}
		if ws.Stopped() || ws.Continued() {
			continue
		}
		done = true
		switch {
		case ws.Exited():
			out.Code = ws.ExitStatus()
		case ws.Signaled():
			out.Signal = ws.Signal()
			out.Code = 128 + int(ws.Signal())
		}
	}
}

// isTerminal reports whether fd is a terminal.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}
