package launch

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The relay catches the signals that the Go runtime does not hand to
// os/signal: SIGPROF (the runtime takes every SIGPROF for its profiler
// and drops it when no profile runs) and signals 32 and 34 (the runtime
// installs no handler for them, so one sent to the init would end it).
// Its handler, relayHandler, is a few instructions of assembly that the
// kernel calls on the thread's signal stack: it writes the signal's
// number, one byte, to a non-blocking pipe, and touches nothing of the
// runtime. A goroutine reads the pipe and queues the signals as
// os/signal's are queued.
const relayAvailable = true

var relayed = []syscall.Signal{syscall.SIGPROF, 32, 34}

// relayFD is the pipe's write end, read by relayHandler; -1 when off.
var relayFD atomic.Int32

func init() { relayFD.Store(-1) }

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

// startRelay installs relayHandler for the relayed signals, passing each
// one it catches to put, and returns what puts the previous handlers back.
func startRelay(put func(syscall.Signal), note func(string)) (stop func()) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		note(fmt.Sprintf("init: no relay for %v (%v): they are not forwarded", relayed, err))
		return func() {}
	}
	// A non-blocking descriptor: os.NewFile puts it on the runtime's
	// poller, so the read parks a goroutine, not a thread, and Close
	// wakes it.
	rd := os.NewFile(uintptr(fds[0]), "signal relay")
	relayFD.Store(int32(fds[1]))
	h, r := relayAddrs()
	act := sigactiont{handler: h, flags: saOnstack | saRestart | saRestorer, restorer: r, mask: ^uint64(0)}
	old := make([]sigactiont, len(relayed))
	var installed []int
	for i, sig := range relayed {
		if err := rtSigaction(sig, &act, &old[i]); err != nil {
			note(fmt.Sprintf("init: cannot catch %v (%v): it is not forwarded", sig, err))
			continue
		}
		installed = append(installed, i)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [64]byte
		for {
			n, err := rd.Read(b[:])
			for _, s := range b[:n] {
				put(syscall.Signal(s))
			}
			if err != nil {
				return
			}
		}
	}()
	return func() {
		for _, i := range installed {
			rtSigaction(relayed[i], &old[i], nil)
		}
		// The write end stays open: a handler already running on another
		// thread may still write to it, and its number must not be reused.
		relayFD.Store(-1)
		rd.Close()
		<-done
	}
}
