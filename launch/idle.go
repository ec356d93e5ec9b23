package launch

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// lighten makes the init that waits for the worker as small as the Go
// runtime lets it (docs/performance.md, The --init process): one
// processor (no thread is started for parallel work any more), the
// threads the start left idle ended (shedThreads), the heap
// the start used given back to the kernel, and the clean pages of the binary's code and read-only
// data it touched unmapped (they stay in the page cache and fault back in
// when the init runs that code again, as they would after the kernel
// reclaimed them under memory pressure). The data and bss of the binary
// are never touched.
func lighten() {
	runtime.GOMAXPROCS(1)
	shedThreads()
	debug.FreeOSMemory()
	dropCleanText()
}

// shedThreads ends the threads the start left idle. The runtime keeps
// every thread it ever started (for the start's blocking system calls and
// its second processor) parked for the process's life, but ends the
// thread of a goroutine that returns while locked to it. With one
// processor the goroutines run one after another, each on a thread the
// runtime takes from its idle ones, so each ends one of them; the last
// few the runtime needs (the one that waits in the poller, sysmon) it
// starts again as needed. The calling goroutine must not be locked to
// its thread.
func shedThreads() {
	for n := threadCount(); n > 0; n-- {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(done)
		}()
		<-done
	}
}

// threadCount is Threads of /proc/self/status (0 when it cannot be read).
func threadCount() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// dropCleanText unmaps the resident pages of the binary's read-only
// mappings (code, read-only data): MADV_DONTNEED on a private file
// mapping that was never written drops only the page table entries.
func dropCleanText() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	type span struct{ start, end uintptr }
	var spans []span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-00652000 r-xp 00000000 fd:01 1234 /path
		fl := strings.Fields(sc.Text())
		if len(fl) < 6 || fl[5] != exe || strings.Contains(fl[1], "w") {
			continue
		}
		a, b, ok := strings.Cut(fl[0], "-")
		s, err1 := strconv.ParseUint(a, 16, 64)
		e, err2 := strconv.ParseUint(b, 16, 64)
		if ok && err1 == nil && err2 == nil {
			spans = append(spans, span{uintptr(s), uintptr(e)})
		}
	}
	for _, sp := range spans {
		syscall.Syscall(syscall.SYS_MADVISE, sp.start, sp.end-sp.start, unix.MADV_DONTNEED)
	}
}
