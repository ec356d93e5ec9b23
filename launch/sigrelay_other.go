//go:build !amd64

package launch

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// Without the relay's handler (it exists for amd64 only), os/signal
// delivers the signals and a goroutine writes their numbers to the same
// kind of pipe: the sender is not known, so a SIGURG of the runtime's own
// preemption may reach the worker. SIGPROF stays the Go runtime's, which
// drops it, and signals 32 and 34, for which the runtime installs no
// handler, are set to be ignored, so that one sent to the init does not
// end it (signal.Ignore cannot do that for them).
const relayAvailable = false

type relay struct {
	rd   *os.File
	wr   *os.File
	c    chan os.Signal
	done chan struct{}
}

func startRelay(sigs []syscall.Signal, note func(string)) (*relay, error) {
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("signal relay pipe: %w", err)
	}
	r := &relay{rd: rd, wr: wr, c: make(chan os.Signal, 64), done: make(chan struct{})}
	var l []os.Signal
	for _, s := range sigs {
		l = append(l, s)
	}
	signal.Notify(r.c, l...)
	go func() {
		for {
			select {
			case s := <-r.c:
				wr.Write([]byte{byte(s.(syscall.Signal))})
			case <-r.done:
				return
			}
		}
	}()
	if sigactionHandlerFirst {
		for _, sig := range []syscall.Signal{32, 34} {
			// The kernel's struct sigaction with the handler first (SIG_IGN is
			// 1) and no flags; 4 words cover the flags, restorer and mask.
			act := [4]uintptr{1}
			if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e != 0 {
				note(fmt.Sprintf("init: cannot ignore %v (%v): one sent to the init ends it", sig, e))
			}
		}
	}
	return r, nil
}

func (r *relay) ignore(sig syscall.Signal) { signal.Ignore(sig) }

func (r *relay) stop() {
	signal.Stop(r.c)
	close(r.done)
	r.rd.Close()
}
