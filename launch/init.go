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
// every signal it can be sent to it, reaps every child that dies, and
// exits with the worker's status (128+signal when a signal killed it).
// docs/init.md has the signal table and the exit-status rules.

package launch

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// GroupGrace is how long the init waits, in group mode, for the rest of
// the worker's process group to end after the worker ended and the group
// was sent SIGTERM; what is still there then gets SIGKILL.
const GroupGrace = 5 * time.Second

// Forwarded are the signals the init passes to the worker (or its group):
// every signal from 1 to 64 but SIGKILL and SIGSTOP, which cannot be
// caught, SIGCHLD, which is the init's own, and signal 33, which the Go
// runtime keeps for itself. SIGTSTP, SIGTTIN and SIGTTOU are forwarded
// and then stop the init too. On amd64, SIGPROF and signals 32 and 34,
// which the Go runtime does not hand to os/signal, come in through the
// relay (sigrelay_amd64.go); elsewhere SIGPROF is swallowed by the runtime
// and 32 and 34 are ignored.
var Forwarded = forwardable()

// sigRuntime is the signal the Go runtime uses to run a system call on
// every thread (glibc's SIGSETXID); it never reaches os/signal.
const sigRuntime = syscall.Signal(33)

func forwardable() []syscall.Signal {
	var l []syscall.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		switch s {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, sigRuntime:
			continue
		case syscall.SIGPROF, 32, 34:
			if !relayAvailable {
				continue
			}
		}
		l = append(l, s)
	}
	return l
}

// notifiable are the forwarded signals os/signal delivers; the rest of
// Forwarded comes through the relay.
func notifiable() []os.Signal {
	var l []os.Signal
	for _, s := range Forwarded {
		if !isRelayed(s) {
			l = append(l, s)
		}
	}
	return l
}

func isRelayed(s syscall.Signal) bool {
	for _, r := range relayed {
		if r == s {
			return true
		}
	}
	return false
}

// InitSpec is the worker to start, as the pass composed it.
type InitSpec struct {
	Path string
	Argv []string
	Env  []string
	Dir  string // the worker's working directory; the init itself moves to /
	// Group: forward signals to the worker's process group (every
	// process it started that stayed in it), not only to the worker, and
	// end the rest of the group when the worker ends.
	Group bool
	// Grace replaces GroupGrace when not zero (tests).
	Grace time.Duration
	// OOM says why the worker died of SIGKILL when the kernel can tell
	// (Become).
	OOM OOMWatch
	// User, when set, is whom the worker runs as: the child takes the
	// credentials before its exec and the init, which stays root, reads
	// them back before it supervises (a mismatch: the worker is killed
	// and the start refused).
	User *Drop
}

// InitOutcome is how the worker ended.
type InitOutcome struct {
	PID    int            // the worker's process id
	Code   int            // the status the init exits with
	Signal syscall.Signal // the signal that killed the worker, 0 if none
	Reaped int            // other children reaped (orphans' zombies)
	// GroupSignal is the last signal the init sent to the rest of the
	// worker's process group after the worker ended (group mode): 0 when
	// nothing of the group was left, SIGTERM when that ended it, SIGKILL
	// when something outlived SIGTERM by the grace period.
	GroupSignal syscall.Signal
}

// Supervise starts the worker and stays its init until it ends. The
// worker runs in a process group of its own, and takes the terminal's
// foreground when standard input is one, so a terminal's Ctrl-C reaches
// it once, not once from the terminal and once forwarded. A start that
// fails returns an error and no outcome; from then on Supervise returns
// only when the worker has ended (in group mode: and the rest of its
// group, or the grace period is over). note receives one line per event
// worth a warning.
func Supervise(s InitSpec, note func(string)) (InitOutcome, error) {
	pid1 := os.Getpid() == 1
	if !pid1 {
		// Orphans below us are reparented to us, not to the real PID 1,
		// so we can reap them.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			note(fmt.Sprintf("init: cannot become a child subreaper (%v): orphans of the worker are reaped by PID 1", err))
		}
	}
	in := newInbox()
	defer in.close()
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	raw := make(chan os.Signal, 64)
	signal.Notify(raw, notifiable()...)
	defer signal.Stop(raw)
	go in.drain(raw)

	// The relay goes in before the start, so that a signal it carries
	// finds it in place as soon as the worker runs. A child forked with
	// it in place keeps it until its exec: a signal sent to the child in
	// that instant is written to the init's pipe and forwarded to the
	// worker, which is where it was going.
	stopRelay := startRelay(in.put, note)
	defer stopRelay()

	terminal := isTerminal(0)
	attr := &syscall.SysProcAttr{Setpgid: true}
	if s.User != nil {
		attr.Credential = s.User.credential()
	}
	if terminal {
		// The child hands the terminal to its group with every signal
		// blocked (syscall.forkAndExecInChild), so no SIGTTOU stops it,
		// and it starts with the dispositions of a fresh process.
		attr.Foreground, attr.Ctty = true, 0
	}
	// The init holds no directory for the worker's whole life, so that
	// the start directory's filesystem can be unmounted: it moves to /
	// before the start, and the worker is started in its own directory.
	dir := s.Dir
	start, _ := os.Getwd()
	if dir == "" {
		dir = start
	}
	if !filepath.IsAbs(dir) && start != "" {
		dir = filepath.Join(start, dir)
	}
	if err := os.Chdir("/"); err != nil {
		note(fmt.Sprintf("init: cannot leave the start directory for / (%v)", err))
	}
	pid, err := syscall.ForkExec(s.Path, s.Argv, &syscall.ProcAttr{
		Dir: dir, Env: s.Env, Files: []uintptr{0, 1, 2}, Sys: attr,
	})
	if err != nil {
		if start != "" {
			os.Chdir(start)
		}
		return InitOutcome{}, fmt.Errorf("start %s: %w", s.Path, err)
	}
	if s.User != nil {
		unverified, err := s.User.verifyChild(pid)
		if err != nil {
			syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, 0, nil)
			return InitOutcome{}, err
		}
		if unverified != "" {
			note("init: " + unverified)
		}
	}
	if terminal {
		// As tini does: the terminal is the worker's now, and a line the
		// init writes to it from the background (TOSTOP) must not stop
		// the init, nor be passed on as if sent to it.
		signal.Ignore(syscall.SIGTTIN, syscall.SIGTTOU)
	}
	sv := supervisor{spec: s, out: InitOutcome{PID: pid}, note: note, pid1: pid1, target: pid}
	if s.Group {
		sv.target = -pid // the group the worker leads
	}
	return sv.run(in, chld), nil
}

// supervisor is the init's state once the worker runs.
type supervisor struct {
	spec   InitSpec
	out    InitOutcome
	note   func(string)
	pid1   bool
	target int // the worker, or its process group (negative)

	workerDone bool
	grace      *time.Timer
}

func (sv *supervisor) run(in *inbox, chld <-chan os.Signal) InitOutcome {
	var graceC <-chan time.Time
	for {
		// Signals first, then reaping: a signal that came before the
		// worker's end still reaches the rest of its group.
		for _, sig := range in.take() {
			sv.forward(sig)
		}
		if sv.reap() {
			return sv.out
		}
		if sv.grace != nil && graceC == nil {
			graceC = sv.grace.C
		}
		select {
		case <-in.wake:
		case <-chld:
		case <-graceC:
			sv.out.GroupSignal = syscall.SIGKILL
			if err := syscall.Kill(-sv.out.PID, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
				sv.note(fmt.Sprintf("init: SIGKILL to the worker's process group %d: %v", sv.out.PID, err))
			}
			sv.reapAll()
			return sv.out
		}
	}
}

// forward passes sig to the worker (or its group); a job-control stop
// then stops the init too, after the group, as a shell's job would stop,
// and the SIGCONT that resumes the init is forwarded in turn.
func (sv *supervisor) forward(sig syscall.Signal) {
	if err := syscall.Kill(sv.target, sig); err != nil && err != syscall.ESRCH {
		sv.note(fmt.Sprintf("init: forward %v to %d: %v", sig, sv.target, err))
	}
	switch sig {
	case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		// The kernel does not let PID 1 stop itself; the group stops.
		if !sv.pid1 {
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
	}
}

// reap collects every child that has ended and reports whether the init
// is done: the worker ended and, in group mode, nothing of its group is
// left.
func (sv *supervisor) reap() bool {
	if sv.reapAll() && !sv.workerDone {
		sv.workerDone = true
		if !sv.spec.Group {
			return true
		}
		// The rest of the group goes with the worker: SIGTERM, and
		// SIGCONT so that a stopped member acts on it; SIGKILL after the
		// grace period.
		if err := syscall.Kill(-sv.out.PID, syscall.SIGTERM); err == syscall.ESRCH {
			return true // nothing left
		} else if err != nil {
			sv.note(fmt.Sprintf("init: SIGTERM to the worker's process group %d: %v", sv.out.PID, err))
		}
		sv.out.GroupSignal = syscall.SIGTERM
		syscall.Kill(-sv.out.PID, syscall.SIGCONT)
		grace := sv.spec.Grace
		if grace <= 0 {
			grace = GroupGrace
		}
		sv.grace = time.NewTimer(grace)
	}
	if !sv.workerDone {
		return false
	}
	// Members that are our children (orphans once the worker ended) are
	// reaped above; a member whose parent is elsewhere counts until that
	// parent reaps it.
	if err := syscall.Kill(-sv.out.PID, 0); errors.Is(err, syscall.ESRCH) {
		sv.grace.Stop()
		return true
	}
	return false
}

// reapAll collects every child that has ended, without blocking, and
// reports whether the worker is among them.
func (sv *supervisor) reapAll() bool {
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
		if p != sv.out.PID {
			sv.out.Reaped++
			continue
		}
		done = true
		switch {
		case ws.Exited():
			sv.out.Code = ws.ExitStatus()
		case ws.Signaled():
			sv.out.Signal = ws.Signal()
			sv.out.Code = 128 + int(ws.Signal())
		}
	}
}

// inbox holds the signals received and not yet forwarded, in the order
// they came. os/signal drops a signal when its channel is full; drain
// empties that channel as fast as signals come, so a burst of one signal
// never pushes out another.
type inbox struct {
	mu   sync.Mutex
	q    []syscall.Signal
	wake chan struct{} // a token when q became non-empty
	done chan struct{}
}

func newInbox() *inbox {
	return &inbox{wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (b *inbox) put(s syscall.Signal) {
	b.mu.Lock()
	b.q = append(b.q, s)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []syscall.Signal {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.q
	b.q = nil
	return q
}

func (b *inbox) drain(c <-chan os.Signal) {
	for {
		select {
		case s := <-c:
			b.put(s.(syscall.Signal))
		case <-b.done:
			return
		}
	}
}

func (b *inbox) close() { close(b.done) }

// isTerminal reports whether fd is a terminal.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}
