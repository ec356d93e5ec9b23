//go:build !amd64

package launch

import (
	"fmt"
	"syscall"
	"unsafe"
)

// Without the relay (it exists for amd64 only), SIGPROF stays the Go
// runtime's, which drops it, and signals 32 and 34, for which the runtime
// installs no handler, are set to be ignored, so that one sent to the
// init does not end it (signal.Ignore cannot do that for them).
const relayAvailable = false

var relayed []syscall.Signal

func startRelay(put func(syscall.Signal), note func(string)) (stop func()) {
	if !sigactionHandlerFirst {
		return func() {}
	}
	for _, sig := range []syscall.Signal{32, 34} {
		// The kernel's struct sigaction with the handler first (SIG_IGN is
		// 1) and no flags; 4 words cover the flags, restorer and mask.
		act := [4]uintptr{1}
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e != 0 {
			note(fmt.Sprintf("init: cannot ignore %v (%v): one sent to the init ends it", sig, e))
		}
	}
	return func() {}
}
