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
// The runtime maps its heap in 4 MB chunks, each a mapping of its own
// (a mark made on one is not carried to the next), and begins it at a
// random page of the first one, so that a start finds between 0 and 4 MB
// of that chunk ahead of it. Where the heap goes on from is the address
// of a fresh allocation of pages of its own, never touched.
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
	Chunk    uintptr // the 4 MB heap chunk the start goes on in, hinted whole
	Hint     error   // MADV_HUGEPAGE's answer
	Region   uintptr // the 2 MB the heap goes on in, collapsed into one page (0: none, or none touched yet)
	Collapse error   // MADV_COLLAPSE's answer
	Reserved uintptr // bytes of the first chunk taken by an untouched allocation (0: none)
}

func (o Outcome) String() string {
	switch {
	case o.Skipped != "":
		return "not asked: " + o.Skipped
	case o.Reserved != 0:
		return fmt.Sprintf("the first chunk's last %d KB reserved, chunk %#x hinted (%s)", o.Reserved>>10, o.Chunk, answer(o.Hint))
	case o.Region == 0:
		return fmt.Sprintf("chunk %#x hinted (%s)", o.Chunk, answer(o.Hint))
	}
	return fmt.Sprintf("chunk %#x hinted (%s), region %#x collapsed (%s)", o.Chunk, answer(o.Hint), o.Region, answer(o.Collapse))
}

func answer(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// probe is an allocation of pages of its own (larger than the largest
// size class), never touched: the runtime gives it the lowest free pages
// that fit, which in a start's heap (nothing freed yet) are where the heap
// goes on from.
var probe []byte

// reserve holds the rest of a chunk too short to go on in: never touched,
// it costs address space only.
var reserve []byte

// asked is set by a Back that asked the kernel: Fresh hints only in such
// a process (a start that execs its worker), never in one Back was not
// called for or declined (an init that stays, GODEBUG=disablethp=1).
var asked bool

// Back gives the heap a start allocates from here on huge pages. By
// where in its first chunk the runtime began the heap:
//
//   - 2 MB or more of the chunk ahead: the chunk is marked for huge pages
//     on first touch (MADV_HUGEPAGE), and the 2 MB the heap goes on in,
//     if partly touched already, is made one huge page now (MADV_COLLAPSE
//     copies those pages into it, about 0.3 ms);
//   - less: the rest of the chunk is taken by an allocation that is never
//     touched, so that the runtime maps the next chunk now, and that chunk,
//     untouched, is marked (the start then has most of 4 MB of it ahead).
//
// Every first touch in the marked memory after that is free. The cost is
// resident memory: up to 4 MB of huge pages, less what the start would
// have touched anyway. godebug is the GODEBUG the process was started
// with: disablethp=1 there keeps huge pages off the heap, as the runtime
// itself does with it.
func Back(godebug string) Outcome {
	if os.Getpagesize() != 4<<10 {
		return Outcome{Skipped: fmt.Sprintf("base pages of %d bytes (huge pages are not 2 MB)", os.Getpagesize())}
	}
	for _, kv := range strings.Split(godebug, ",") {
		if strings.TrimSpace(kv) == "disablethp=1" {
			return Outcome{Skipped: "GODEBUG=disablethp=1"}
		}
	}
	asked = true
	probe = make([]byte, 64<<10)
	p := uintptr(unsafe.Pointer(&probe[0]))
	o := Outcome{Chunk: p &^ (chunk - 1)}
	if rest := o.Chunk + chunk - p; rest < huge {
		// 64 KB over the rest, so that the allocation cannot fit in it.
		reserve = make([]byte, rest+64<<10)
		o.Reserved = rest
		o.Chunk = (uintptr(unsafe.Pointer(&reserve[0])) + uintptr(len(reserve))) &^ (chunk - 1)
	}
	o.Hint = advise(o.Chunk, chunk, unix.MADV_HUGEPAGE)
	if r := p &^ (huge - 1); o.Reserved == 0 && touched(r) {
		o.Region = r
		// EAGAIN: a page of the region had a user the collapse did not
		// expect (one another thread was faulting in, held in a CPU's
		// batch), which passes; the kernel asks to try again, and once
		// more is enough in practice (docs/performance.md).
		for try := 0; try < 2; try++ {
			if o.Collapse = advise(o.Region, huge, unix.MADV_COLLAPSE); !errors.Is(o.Collapse, unix.EAGAIN) {
				break
			}
		}
	}
	return o
}

// Fresh marks the heap chunks under b for huge pages on first touch, in a
// process where Back asked the kernel for them (and nowhere else). A
// buffer of fresh heap about to be written whole (a file read into
// memory) calls it: a large buffer gets pages of its own, often in a
// chunk mapped after Back ran.
func Fresh(b []byte) {
	if !asked || len(b) == 0 {
		return
	}
	lo := uintptr(unsafe.Pointer(&b[0]))
	hi := lo + uintptr(len(b))
	lo &^= chunk - 1
	advise(lo, (hi-lo+chunk-1)&^(chunk-1), unix.MADV_HUGEPAGE)
}

// touched says whether any page of the 2 MB at addr is resident
// (mincore(2)): a region without one has nothing to collapse.
func touched(addr uintptr) bool {
	var vec [huge >> 12]byte
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, addr, huge, uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return true // unknown: let the collapse answer
	}
	for _, v := range vec {
		if v&1 != 0 {
			return true
		}
	}
	return false
}

// advise is madvise(2) over the runtime's own memory, which no Go slice
// describes: the range is given as addresses.
func advise(addr, n uintptr, advice int) error {
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, addr, n, uintptr(advice)); e != 0 {
		return fmt.Errorf("madvise %#x+%d %d: %w", addr, n, advice, e)
	}
	return nil
}
