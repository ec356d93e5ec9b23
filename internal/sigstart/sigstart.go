// Package sigstart answers which signals this process was started with
// ignored (SIG_IGN) and which blocked, so that the worker gets them as
// they were given (nohup, a shell's `trap ” HUP INT`, a background job
// of a non-interactive shell), and puts them back before an exec.
//
// The Go runtime replaces every inherited SIG_IGN but SIGHUP's and
// SIGINT's with its own handler before any Go code runs (runtime.initsig),
// and keeps the original only in a variable of its own: an exec after
// that gives the worker the default action instead of the ignore it was
// given. On amd64 the binary's entry point (entry, in sigstart_amd64.s,
// linked with -ldflags=-E=<EntrySymbol>) reads the dispositions and the
// mask with rt_sigaction and rt_sigprocmask and then jumps to the Go
// runtime's own entry. A binary linked without it knows only what the
// runtime keeps: SIGHUP and SIGINT ignored, and the mask.
package sigstart

import (
	"os/signal"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// EntrySymbol is the linker's name of the entry point that reads the
// start state; the build passes -ldflags=-E=EntrySymbol.
const EntrySymbol = "github.com/infera/infera-exec/internal/sigstart.entry"

// Set is a set of signals 1-64, bit N-1 for signal N (the kernel's
// sigset_t word, as /proc/PID/status shows SigIgn and SigBlk).
type Set uint64

// Has reports whether s holds sig.
func (s Set) Has(sig syscall.Signal) bool { return sig >= 1 && sig <= 64 && s&(1<<(sig-1)) != 0 }

// With is s with sig added.
func (s Set) With(sig syscall.Signal) Set {
	if sig < 1 || sig > 64 {
		return s
	}
	return s | 1<<(sig-1)
}

// Signals lists s in increasing order.
func (s Set) Signals() []syscall.Signal {
	var l []syscall.Signal
	for sig := syscall.Signal(1); sig <= 64; sig++ {
		if s.Has(sig) {
			l = append(l, sig)
		}
	}
	return l
}

// State is what the process was started with.
type State struct {
	Ignored Set
	Blocked Set
	// Read: the entry point read both (false: Ignored holds only what the
	// runtime keeps, SIGHUP and SIGINT).
	Read bool
}

// Written by entry before the Go runtime starts; read-only afterwards.
var (
	entryRead    uint64
	entryIgnored uint64
	entryBlocked uint64
)

// unkept are the signals whose inherited SIG_IGN the Go runtime keeps
// (it installs no handler of its own for them then).
var unkept = Set(0).With(syscall.SIGHUP).With(syscall.SIGINT)

// Start is the state this process was started with.
func Start() State {
	if entryRead != 0 {
		return State{Ignored: Set(entryIgnored), Blocked: Set(entryBlocked), Read: true}
	}
	st := State{Blocked: startMask()}
	for _, sig := range unkept.Signals() {
		if signal.Ignored(sig) {
			st.Ignored = st.Ignored.With(sig)
		}
	}
	return st
}

const sigIgn = 1

// sigaction is the kernel's struct sigaction on Linux for the
// architectures whose layout has the handler first (amd64, arm64, ...).
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// startMask is the mask of this thread as the runtime leaves it for a
// thread with nothing to hide: the runtime keeps the start mask in every
// thread's, unblocking only the signals it needs (see Restore).
func startMask() Set {
	var old uint64
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_BLOCK, 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	return Set(old)
}

// Restore puts st back on the calling process just before an execve:
// every signal of st.Ignored set to SIG_IGN (an exec keeps an ignore, and
// resets a handler to the default), and the calling thread's mask set to
// st.Blocked (an exec keeps the mask). It locks the goroutine to its
// thread, so the exec that follows runs on the thread whose mask it set;
// after a failed exec the caller ends the process. Signals that cannot
// be caught are left alone.
func Restore(st State) error {
	runtime.LockOSThread()
	for _, sig := range st.Ignored.Signals() {
		if sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
			continue
		}
		act := sigaction{handler: sigIgn}
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e != 0 {
			return &Error{Op: "rt_sigaction(SIG_IGN)", Sig: sig, Err: e}
		}
	}
	mask := uint64(st.Blocked)
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&mask)), 0, 8, 0, 0); e != 0 {
		return &Error{Op: "rt_sigprocmask", Err: e}
	}
	return nil
}

// Error is a disposition that could not be put back.
type Error struct {
	Op  string
	Sig syscall.Signal
	Err error
}

func (e *Error) Error() string {
	if e.Sig != 0 {
		return e.Op + " " + unix.SignalName(e.Sig) + ": " + e.Err.Error()
	}
	return e.Op + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }
