// Package inheritfd answers which file descriptors infera-exec was given
// by whoever started it, and keeps them from every child but the worker.
//
// A container runtime or a supervisor may start infera-exec with open
// descriptors beyond 0-2 (a socket passed for activation, a log pipe);
// they are the worker's. Go opens its own files close-on-exec, so at
// start every descriptor without FD_CLOEXEC is such an inherited one.
// Hold marks them close-on-exec, so a helper child (the deadline helper,
// the interpreter probe) does not keep them open while it runs or hangs;
// Release clears the flag again just before the worker is started, which
// then gets them as it would have without infera-exec.
package inheritfd

import (
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

var (
	mu   sync.Mutex
	held []int
)

// Hold marks every inherited descriptor (3 and up, without FD_CLOEXEC)
// close-on-exec and remembers it. Call it once, first thing.
func Hold() []int {
	mu.Lock()
	defer mu.Unlock()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil // without /proc nothing can be listed; children inherit as before
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // closed meanwhile (the listing's own descriptor), or ours
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err == nil {
			held = append(held, fd)
		}
	}
	return append([]int(nil), held...)
}

// Release clears close-on-exec on the descriptors Hold marked, so that the
// worker started next inherits them.
func Release() {
	mu.Lock()
	defer mu.Unlock()
	for _, fd := range held {
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags&^unix.FD_CLOEXEC)
		}
	}
	held = nil
}
