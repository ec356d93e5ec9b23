package launch

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The relay is how every signal reaches the init on amd64: its handler,
// relayHandler, a few instructions of assembly that the kernel calls on
// the thread's signal stack, replaces the Go runtime's for every
// forwarded signal and SIGCHLD. It reads who sent the signal (si_code,
// si_pid, which os/signal does not show) and writes the number of one
// that another process or the kernel sent, one byte, to a non-blocking
// pipe that the init reads; what the init or its runtime raised itself
// (the runtime's SIGURG preemption, a SIGPIPE it raises for a closed
// stdout) goes on to the runtime or nowhere, never to the worker. A fault
// the init caused goes on to the runtime's handler, which crashes as it
// would without the relay. It also catches what os/signal cannot:
// SIGPROF, which the runtime keeps for its profiler, and signals 32 and
// 34, for which it installs no handler.
const relayAvailable = true

// relayFD is the pipe's write end, read by relayHandler; -1 when off.
var relayFD atomic.Int32

// relaySelf is the init's pid, which relayHandler compares si_pid with.
//
//lint:ignore U1000 read by sigrelay_amd64.s
var relaySelf int32

// relayChain are the runtime's handlers the relay goes on to (SIGURG and
// the faults); relayFault marks the faults: a signal whose si_code says
// the kernel raised it for an instruction of the init.
var (
	relayChain [65]uintptr
	relayFault [65]byte
)

func init() {
	relayFD.Store(-1)
	for _, s := range []syscall.Signal{syscall.SIGILL, syscall.SIGTRAP, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGSYS} {
		relayFault[s] = 1
	}
}

// Implemented in sigrelay_amd64.s; the first two are called by the
// kernel only, their addresses taken by relayAddrs in assembly.
//
//lint:ignore U1000 referenced from sigrelay_amd64.s
func relayHandler()

//lint:ignore U1000 referenced from sigrelay_amd64.s
func relayRestorer()
func relayAddrs() (handler, restorer uintptr)

// sigactiont is the kernel's struct sigaction on amd64.
type sigactiont struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const (
	saSiginfo  = 0x4
	saRestorer = 0x04000000
	saOnstack  = 0x08000000
	saRestart  = 0x10000000
)

func rtSigaction(sig syscall.Signal, act, old *sigactiont) error {
	_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// relay is the installed relay: the pipe's read end and the handlers it
// replaced.
type relay struct {
	rd        *os.File
	sigs      []syscall.Signal
	old       []sigactiont
	installed []int
}

// startRelay installs relayHandler for sigs and returns the relay, whose
// read end gives the numbers of the signals caught.
func startRelay(sigs []syscall.Signal, note func(string)) (*relay, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("signal relay pipe: %w", err)
	}
	// A non-blocking descriptor: os.NewFile puts it on the runtime's
	// poller, so the read parks the init's goroutine, not a thread.
	r := &relay{rd: os.NewFile(uintptr(fds[0]), "signal relay"), sigs: sigs, old: make([]sigactiont, len(sigs))}
	relaySelf = int32(os.Getpid())
	relayFD.Store(int32(fds[1]))
	h, rs := relayAddrs()
	act := sigactiont{handler: h, flags: saSiginfo | saOnstack | saRestart | saRestorer, restorer: rs, mask: ^uint64(0)}
	for i, sig := range sigs {
		// The handler it goes on to is in place before the relay is.
		var cur sigactiont
		if rtSigaction(sig, nil, &cur) == nil {
			relayChain[sig] = cur.handler
		}
		if err := rtSigaction(sig, &act, &r.old[i]); err != nil {
			note(fmt.Sprintf("init: cannot catch %v (%v): it is not forwarded", sig, err))
			continue
		}
		r.installed = append(r.installed, i)
	}
	return r, nil
}

// ignore sets sig to SIG_IGN (the terminal's SIGTTIN and SIGTTOU, once
// the worker has the terminal).
func (r *relay) ignore(sig syscall.Signal) {
	act := sigactiont{handler: 1}
	rtSigaction(sig, &act, nil)
}

// stop puts the previous handlers back and closes the read end.
func (r *relay) stop() {
	for _, i := range r.installed {
		rtSigaction(r.sigs[i], &r.old[i], nil)
	}
	// The write end stays open: a handler already running on another
	// thread may still write to it, and its number must not be reused.
	relayFD.Store(-1)
	r.rd.Close()
}
