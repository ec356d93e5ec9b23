package heappages

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// thpMode is the bracketed word of the kernel's THP setting ("" without THP).
func thpMode(t *testing.T) string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		t.Fatalf("unexpected THP setting %q", s)
	}
	return s[i+1 : j]
}

// hugeKBOf is the AnonHugePages of the mapping that holds addr, from
// /proc/self/smaps (-1: no mapping holds it).
func hugeKBOf(addr uintptr) int {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return -1
	}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's line: "lo-hi perms offset dev inode [path]"
			lo, hi, _ := strings.Cut(f[0], "-")
			a, err1 := strconv.ParseUint(lo, 16, 64)
			z, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= a && uint64(addr) < z
			continue
		}
		if in && f[0] == "AnonHugePages:" {
			kb, err := strconv.Atoi(f[1])
			if err != nil {
				return -1
			}
			return kb
		}
	}
	return -1
}

// TestMain runs a scenario in a process of its own when asked to, as a
// start does: before anything but the test binary's own start, with
// nothing in the process having asked for huge pages.
func TestMain(m *testing.M) {
	switch os.Getenv("HEAPPAGES_SCENARIO") {
	case "":
		os.Exit(m.Run())
	case "back":
		json.NewEncoder(os.Stdout).Encode(afterBack())
	case "fresh":
		asked = true // as Back leaves it, without Back's own hints
		json.NewEncoder(os.Stdout).Encode(afterFresh())
	case "fresh-unasked":
		json.NewEncoder(os.Stdout).Encode(afterFresh())
	}
	os.Exit(0)
}

// seen is what a scenario found.
type seen struct {
	Before   int // AnonHugePages under a fresh object before any hint, KB
	Outcome  Outcome
	Hint     string // the kernel's answers, as Outcome.String gives them
	Collapse string
	Buffer   uintptr // Fresh's buffer
	BufferKB int     // AnonHugePages under its first and last byte after it was written, KB
	RegionKB int     // AnonHugePages under Outcome.Region, KB
	ChunkKB  int     // AnonHugePages under Outcome.Chunk after the allocations, KB
}

func afterBack() (s seen) {
	s.Before = hugeKBOf(uintptr(unsafe.Pointer(new([64]byte))))
	s.Outcome = Back("")
	for i := 0; i < 20 && errors.Is(s.Outcome.Collapse, unix.EAGAIN); i++ {
		s.Outcome.Collapse = advise(s.Outcome.Region, huge, unix.MADV_COLLAPSE) // a page busy for a moment: the kernel's answer, not Back's
	}
	s.Hint, s.Collapse = answer(s.Outcome.Hint), answer(s.Outcome.Collapse)
	s.Outcome.Hint, s.Outcome.Collapse = nil, nil // errors do not encode
	if s.Outcome.Region != 0 {
		s.RegionKB = hugeKBOf(s.Outcome.Region)
	}
	// What the start allocates next: 3 MB of small objects, written.
	for i := 0; i < 768; i++ {
		b := new([4096]byte)
		b[0] = 1
		keep = append(keep, b)
	}
	s.ChunkKB = hugeKBOf(s.Outcome.Chunk)
	return s
}

func afterFresh() (s seen) {
	b := make([]byte, 5<<20) // holds at least one whole aligned 2 MB region
	s.Buffer = uintptr(unsafe.Pointer(&b[0]))
	s.Before = hugeKBOf(s.Buffer)
	Fresh(b)
	for i := range b {
		b[i] = 1
	}
	s.BufferKB = hugeKBOf(s.Buffer) + hugeKBOf(s.Buffer+uintptr(len(b))-1)
	return s
}

// keep holds what a scenario allocated, as a start holds its heap.
var keep []*[4096]byte

// scenario runs one in a new process of this test binary.
func scenario(t *testing.T, name string) seen {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "HEAPPAGES_SCENARIO="+name)
	out, err := cmd.Output()
	require.NoError(t, err)
	var s seen
	require.NoError(t, json.Unmarshal(out, &s), "%s", out)
	return s
}

// needsTHP skips where the kernel gives no huge pages on request, and
// says whether it gives them only on request.
func needsTHP(t *testing.T) (onRequestOnly bool) {
	switch m := thpMode(t); m {
	case "", "never":
		t.Skip("needs transparent huge pages: /sys/kernel/mm/transparent_hugepage/enabled set to madvise or always")
	default:
		return m == "madvise"
	}
	return false
}

// TestTheHeapAfterBackIsOnHugePages runs starts of its own until each of
// Back's two ways has been taken (the runtime begins the heap at a random
// place: each is taken about every other time).
func TestTheHeapAfterBackIsOnHugePages(t *testing.T) {
	onRequestOnly := needsTHP(t)
	ways := map[string]int{}
	for i := 0; i < 64 && (ways["reserved"] == 0 || ways["collapsed"] == 0); i++ {
		s := scenario(t, "back")
		o := s.Outcome
		if onRequestOnly {
			require.Zero(t, s.Before, "huge pages before any hint")
		}
		require.Empty(t, o.Skipped)
		require.Equal(t, "ok", s.Hint)
		require.Zero(t, o.Chunk%chunk)
		if o.Reserved != 0 {
			// The next chunk, mapped for the reservation and marked
			// untouched, is where the heap goes on: on huge pages.
			ways["reserved"]++
			require.Less(t, o.Reserved, uintptr(huge), "reserved only when less than 2 MB of the chunk is ahead")
			require.Zero(t, o.Region)
			require.GreaterOrEqual(t, s.ChunkKB, huge>>10, "no huge page in the chunk the heap went on in (%v)", o)
			continue
		}
		if o.Region == 0 {
			// The 2 MB the heap goes on in had nothing yet: marked, its
			// first touch was a huge page.
			ways["hinted"]++
			require.GreaterOrEqual(t, s.ChunkKB, huge>>10)
			continue
		}
		ways["collapsed"]++
		if strings.HasSuffix(s.Collapse, "invalid argument") {
			t.Skipf("needs MADV_COLLAPSE (Linux 6.1 or later): %s", s.Collapse)
		}
		require.Equal(t, "ok", s.Collapse)
		require.Zero(t, o.Region%huge)
		require.True(t, o.Region >= o.Chunk && o.Region < o.Chunk+chunk, "region %#x outside chunk %#x", o.Region, o.Chunk)
		require.GreaterOrEqual(t, s.RegionKB, huge>>10, "the 2 MB the heap began in is one huge page")
		require.GreaterOrEqual(t, s.ChunkKB, huge>>10)
	}
	require.True(t, ways["reserved"] > 0 && ways["collapsed"] > 0, "both ways taken in 64 starts: %v", ways)
}

func TestBackAsksNothingWhenTheRuntimeIsToldNotTo(t *testing.T) {
	o := Back("madvdontneed=1, disablethp=1")
	require.Equal(t, "GODEBUG=disablethp=1", o.Skipped)
	require.Zero(t, o.Region)
	require.Equal(t, "not asked: GODEBUG=disablethp=1", o.String())
	require.Empty(t, Back("disablethp=0").Skipped)
}

// TestFreshPutsALargeBufferOnHugePages runs in a process of its own: the
// buffer's pages are fresh from the kernel, as in a start.
func TestFreshPutsALargeBufferOnHugePages(t *testing.T) {
	onRequestOnly := needsTHP(t)
	s := scenario(t, "fresh")
	if onRequestOnly {
		require.Zero(t, s.Before, "huge pages before any hint")
	}
	require.GreaterOrEqual(t, s.BufferKB, huge>>10, "no huge page under the buffer")
}

// TestFreshAsksNothingWhereBackDidNot: an init that stays for the
// worker's life, or a process told GODEBUG=disablethp=1, gets no huge
// pages under the files it reads.
func TestFreshAsksNothingWhereBackDidNot(t *testing.T) {
	if !needsTHP(t) {
		t.Skip("needs transparent huge pages on request only (madvise): with always, every buffer may get them unasked")
	}
	s := scenario(t, "fresh-unasked")
	require.Zero(t, s.BufferKB, "huge pages under a buffer Fresh was not to hint")
}
