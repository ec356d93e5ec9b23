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
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/infera/infera-exec/internal/sigstart"
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
// and then stop the init too. On amd64 they all come in through the relay
// (sigrelay_amd64.go), which also tells who sent them; elsewhere through
// os/signal, SIGPROF is swallowed by the runtime and 32 and 34 are
// ignored.
var Forwarded = forwardable()

// sigRuntime is the signal the Go runtime uses to run a system call on
// every thread (glibc's SIGSETXID); it never reaches the init.
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
	// Given are the dispositions infera-exec was started with: the worker
	// starts with the same signals ignored and blocked (sigstart).
	Given sigstart.State
	// Self is this binary, which starts the worker when the worker needs
	// what a fork and exec from Go cannot give it (see needsStarter).
	Self string
	// ExitMap turns the worker's status into another (tini's -e: 143 to
	// 0); Rewrite turns a signal into another before it is forwarded
	// (dumb-init's --rewrite; 0: not forwarded); ParentDeath is the
	// signal the init gets when its parent ends (tini's -p; 0: none).
	ExitMap     map[int]int
	Rewrite     map[syscall.Signal]syscall.Signal
	ParentDeath syscall.Signal
}

// InitOutcome is how the worker ended.
type InitOutcome struct {
	PID    int            // the worker's process id
	Code   int            // the status the init exits with (after ExitMap)
	Status int            // the worker's own status (before ExitMap)
	Signal syscall.Signal // the signal that killed the worker, 0 if none
	Reaped int            // other children reaped (orphans' zombies)
	// GroupSignal is the last signal the init sent to the rest of the
	// worker's process group after the worker ended (group mode): 0 when
	// nothing of the group was left, SIGTERM when that ended it, SIGKILL
	// when something outlived SIGTERM by the grace period.
	GroupSignal syscall.Signal
	// GroupCont: the rest of the group also got SIGCONT after the
	// SIGTERM, because a member of it was stopped.
	GroupCont bool
	// Starter: the worker was started through the starter (a re-exec of
	// infera-exec that sets LISTEN_PID and the given dispositions).
	Starter bool
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
	if s.ParentDeath != 0 {
		parent := os.Getppid()
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(s.ParentDeath), 0, 0, 0); err != nil {
			note(fmt.Sprintf("init: cannot ask for %v when the parent ends (%v)", s.ParentDeath, err))
		} else if os.Getppid() != parent {
			// The parent ended before the request: the kernel sends
			// nothing then.
			syscall.Kill(os.Getpid(), s.ParentDeath)
		}
	}
	// The relay goes in before the start, so that a signal sent from
	// then on waits in its pipe until the worker runs.
	rl, err := startRelay(append(append([]syscall.Signal(nil), Forwarded...), syscall.SIGCHLD), note)
	if err != nil {
		return InitOutcome{}, err
	}
	defer rl.stop()

	terminal := isTerminal(0)
	attr := &syscall.SysProcAttr{Setpgid: true}
	if s.User != nil {
		attr.Credential = s.User.credential()
	}
	if terminal {
		// The child hands the terminal to its group with every signal
		// blocked (syscall.forkAndExecInChild), so no SIGTTOU stops it.
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
	pid, starter, err := startWorker(s, dir, attr)
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
		// init writes to it from the background (TOSTOP), or its handing
		// the terminal back to the worker after a stop, must not stop the
		// init, nor be passed on as if sent to it.
		rl.ignore(syscall.SIGTTIN)
		rl.ignore(syscall.SIGTTOU)
	}
	lighten()
	sv := supervisor{spec: s, out: InitOutcome{PID: pid, Starter: starter}, note: note, pid1: pid1, target: pid, terminal: terminal}
	if s.Group {
		sv.target = -pid // the group the worker leads
	}
	return sv.run(rl), nil
}

// supervisor is the init's state once the worker runs.
type supervisor struct {
	spec     InitSpec
	out      InitOutcome
	note     func(string)
	pid1     bool
	terminal bool
	target   int // the worker, or its process group (negative)

	workerDone bool
	graceEnd   time.Time // when the rest of the group gets SIGKILL
	stopSent   bool      // a stop was forwarded and no SIGCONT since
}

func (sv *supervisor) run(rl *relay) InitOutcome {
	var b [256]byte
	for {
		n, err := rl.rd.Read(b[:])
		// Signals first, then reaping: a signal that came before the
		// worker's end still reaches the rest of its group.
		for _, c := range b[:n] {
			if sig := syscall.Signal(c); sig != syscall.SIGCHLD {
				sv.forward(sig)
			}
		}
		if sv.reap() {
			sv.out.Code = sv.exitCode()
			return sv.out
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			sv.out.GroupSignal = syscall.SIGKILL
			if err := syscall.Kill(-sv.out.PID, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
				sv.note(fmt.Sprintf("init: SIGKILL to the worker's process group %d: %v", sv.out.PID, err))
			}
			sv.reapAll()
			sv.out.Code = sv.exitCode()
			return sv.out
		case err != nil && n == 0:
			// The relay's pipe cannot be read: without it the init could
			// neither forward nor reap, so it waits for the worker.
			sv.note(fmt.Sprintf("init: the signal relay failed (%v); waiting for the worker without forwarding", err))
			for !sv.reap() {
				var ws syscall.WaitStatus
				syscall.Wait4(sv.out.PID, &ws, 0, nil)
				sv.record(ws)
			}
			sv.out.Code = sv.exitCode()
			return sv.out
		}
		if !sv.graceEnd.IsZero() {
			rl.rd.SetReadDeadline(sv.graceEnd)
		}
	}
}

// exitCode is the worker's status through the exit-code map.
func (sv *supervisor) exitCode() int {
	if c, ok := sv.spec.ExitMap[sv.out.Status]; ok {
		return c
	}
	return sv.out.Status
}

// forward passes sig, rewritten as asked, to the worker (or its group);
// a job-control stop then stops the init too, after the group, as a
// shell's job would stop, and the SIGCONT that resumes the init is
// forwarded in turn. With a terminal, a SIGCONT that finds the init in
// the terminal's foreground (a shell's fg) hands the terminal back to
// the worker's group first.
func (sv *supervisor) forward(sig syscall.Signal) {
	to := sig
	if r, ok := sv.spec.Rewrite[sig]; ok {
		to = r
	}
	if to == syscall.SIGCONT && sv.terminal {
		if fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err == nil && fg == syscall.Getpgrp() {
			unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, sv.out.PID)
		}
	}
	if to != 0 {
		target := sv.target
		if to == syscall.SIGCONT && sv.terminal {
			target = -sv.out.PID // a terminal's stop stopped the whole group
		}
		if err := syscall.Kill(target, to); err != nil && err != syscall.ESRCH {
			sv.note(fmt.Sprintf("init: forward %v to %d: %v", to, target, err))
		}
	}
	switch to {
	case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGSTOP:
		sv.stopSent = true
	case syscall.SIGCONT:
		sv.stopSent = false
	}
	switch sig {
	case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		sv.stopSelf()
	}
}

// stopSelf stops the init; the kernel does not let PID 1 stop itself.
func (sv *supervisor) stopSelf() {
	if !sv.pid1 {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
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
		// SIGCONT to a group of which a member is stopped, so that it
		// acts on the SIGTERM; SIGKILL after the grace period.
		if err := syscall.Kill(-sv.out.PID, syscall.SIGTERM); err == syscall.ESRCH {
			return true // nothing left
		} else if err != nil {
			sv.note(fmt.Sprintf("init: SIGTERM to the worker's process group %d: %v", sv.out.PID, err))
		}
		sv.out.GroupSignal = syscall.SIGTERM
		if groupStopped(sv.out.PID, sv.stopSent) {
			sv.out.GroupCont = true
			syscall.Kill(-sv.out.PID, syscall.SIGCONT)
		}
		grace := sv.spec.Grace
		if grace <= 0 {
			grace = GroupGrace
		}
		sv.graceEnd = time.Now().Add(grace)
	}
	if !sv.workerDone {
		return false
	}
	// Members that are our children (orphans once the worker ended) are
	// reaped above; a member whose parent is elsewhere counts until that
	// parent reaps it.
	return errors.Is(syscall.Kill(-sv.out.PID, 0), syscall.ESRCH)
}

// reapAll collects every child that has ended, without blocking, and
// reports whether the worker is among them. A stop of the worker that a
// terminal caused (Ctrl-Z: the kernel stops the foreground group, the
// worker's, and tells the init) stops the init too, so that the shell
// that started it sees its job stopped.
func (sv *supervisor) reapAll() bool {
	done := false
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG|syscall.WUNTRACED, nil)
		if err == syscall.EINTR {
			continue
		}
		if p <= 0 || err != nil {
			return done
		}
		if p != sv.out.PID {
			if !ws.Stopped() {
				sv.out.Reaped++
			}
			continue
		}
		if ws.Stopped() {
			if sv.terminal && !sv.workerDone && stillStopped(p) {
				sv.stopSelf()
			}
			continue
		}
		done = true
		sv.record(ws)
	}
}

// record keeps the worker's end.
func (sv *supervisor) record(ws syscall.WaitStatus) {
	switch {
	case ws.Exited():
		sv.out.Status = ws.ExitStatus()
	case ws.Signaled():
		sv.out.Signal = ws.Signal()
		sv.out.Status = 128 + int(ws.Signal())
	}
}

// stillStopped reports whether pid is stopped now (a stop report read
// after the SIGCONT that ended it is stale). Without /proc it trusts the
// report.
func stillStopped(pid int) bool {
	st, ok := procState(pid)
	return !ok || st == 'T' || st == 't'
}

// procState is the state letter of /proc/PID/stat.
func procState(pid int) (byte, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}

// groupStopped reports whether a process of group pgid is stopped, read
// from /proc; without /proc, whether the init forwarded a stop since the
// last SIGCONT (fallback).
func groupStopped(pgid int, fallback bool) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return fallback
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		// ") S ppid pgrp ..."
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) || pid == os.Getpid() {
			continue
		}
		if f[0] == "T" || f[0] == "t" {
			return true
		}
	}
	return false
}

// isTerminal reports whether fd is a terminal.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}
