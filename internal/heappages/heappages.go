// Package heappages asks the kernel to back the Go heap of a start with
// transparent huge pages, so that the memory a start touches for the first
// time costs one fault per 2 MB instead of one per 4 KB.
//
// A start lives for milliseconds and touches a few megabytes of heap it
// never had before. On a virtual machine a fresh 4 KB page can cost more
// than 10 µs, and a start touches hundreds of them (docs/performance.md,
// "Huge pages under the heap"). Everything here is a hint: a kernel
// without transparent huge pages, THP set to "never", a heap laid out
// otherwise than today's runtime lays it out, all change only the time.
//
// The runtime maps its heap in 4 MB chunks, each a mapping of its own,
// and begins it at a random place in the first one. The chunk is found
// from the address of a fresh heap object.
package heappages

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	huge  = 2 << 20 // a PMD-sized transparent huge page over 4 KB base pages
	chunk = 4 << 20 // the runtime's unit of heap mapping (pallocChunkBytes)
)

// Outcome says what was asked of the kernel. Errors are the kernel's
// answers to hints, reported for --verbose, never a reason to stop.
type Outcome struct {
	Skipped  string  // why nothing was asked ("" when something was)
	Region   uintptr // the 2 MB the heap began in, collapsed into one page
	Chunk    uintptr // the 4 MB heap chunk holding Region, hinted whole
	Collapse error   // MADV_COLLAPSE's answer
	Hint     error   // MADV_HUGEPAGE's answer
}

func (o Outcome) String() string {
	if o.Skipped != "" {
		return "not asked: " + o.Skipped
	}
	return fmt.Sprintf("chunk %#x hinted (%s), region %#x collapsed (%s)", o.Chunk, answer(o.Hint), o.Region, answer(o.Collapse))
}

func answer(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// probe is a fresh heap object whose address says where the heap is.
var probe *[64]byte

// Back marks the 4 MB heap chunk the runtime allocates from for huge
// pages on first touch (MADV_HUGEPAGE), and backs the 2 MB of it the heap
// began in with one huge page now (MADV_COLLAPSE copies the pages already
// touched into it, about 0.3 ms). Every later first touch in those 4 MB is
// then free. The cost is resident memory: at most 4 MB, less what the
// start would have touched anyway. godebug is the GODEBUG the process was
// started with: disablethp=1 there keeps huge pages off the heap, as the
// runtime itself does with it.
func Back(godebug string) Outcome {
	if os.Getpagesize() != 4<<10 {
		return Outcome{Skipped: fmt.Sprintf("base pages of %d bytes (huge pages are not 2 MB)", os.Getpagesize())}
	}
	for _, kv := range strings.Split(godebug, ",") {
		if strings.TrimSpace(kv) == "disablethp=1" {
			return Outcome{Skipped: "GODEBUG=disablethp=1"}
		}
	}
	probe = new([64]byte)
	p := uintptr(unsafe.Pointer(probe))
	o := Outcome{Region: p &^ (huge - 1), Chunk: p &^ (chunk - 1)}
	o.Hint = advise(o.Chunk, chunk, unix.MADV_HUGEPAGE)
	// EAGAIN: a page of the region had a user the collapse did not expect
	// (one another thread was faulting in, held in a CPU's batch), which
	// passes; the kernel asks to try again, and once more is enough in
	// practice (docs/performance.md).
	for try := 0; try < 2; try++ {
		if o.Collapse = advise(o.Region, huge, unix.MADV_COLLAPSE); !errors.Is(o.Collapse, unix.EAGAIN) {
			break
		}
	}
	return o
}

// Fresh marks the heap chunks under b for huge pages on first touch. A
// buffer of fresh heap about to be written whole (a file read into
// memory) calls it: a large buffer gets pages of its own, often in a
// chunk mapped after Back ran.
func Fresh(b []byte) {
	if len(b) == 0 {
		return
	}
	lo := uintptr(unsafe.Pointer(&b[0]))
	hi := lo + uintptr(len(b))
	lo &^= chunk - 1
	advise(lo, (hi-lo+chunk-1)&^(chunk-1), unix.MADV_HUGEPAGE)
}

// advise is madvise(2) over the runtime's own memory, which no Go slice
// describes: the range is given as addresses.
func advise(addr, n uintptr, advice int) error {
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, addr, n, uintptr(advice)); e != 0 {
		return fmt.Errorf("madvise %#x+%d %d: %w", addr, n, advice, e)
	}
	return nil
}
