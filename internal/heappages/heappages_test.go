package heappages

import (
	"bufio"
	"bytes"
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

// hugeKB is the AnonHugePages of the mapping that holds addr, from
// /proc/self/smaps.
func hugeKB(t *testing.T, addr uintptr) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
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
			require.NoError(t, err)
			return kb
		}
	}
	t.Fatalf("no mapping holds %#x in /proc/self/smaps", addr)
	return 0
}

// inFreshProcess runs test name alone in a new process of this test
// binary, and passes on its result.
func inFreshProcess(t *testing.T, name string) {
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), "HEAPPAGES_FRESH_PROCESS=1")
	out, err := cmd.CombinedOutput()
	if i := bytes.Index(out, []byte("--- SKIP")); i >= 0 {
		t.Skip(string(out[i:]))
	}
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS")
}

// TestBackPutsTheHeapStartOnAHugePage runs in a process of its own, as a
// start does: nothing has asked for huge pages there before Back.
func TestBackPutsTheHeapStartOnAHugePage(t *testing.T) {
	if os.Getenv("HEAPPAGES_FRESH_PROCESS") == "" {
		inFreshProcess(t, "TestBackPutsTheHeapStartOnAHugePage")
		return
	}
	switch thpMode(t) {
	case "", "never":
		t.Skip("needs transparent huge pages: /sys/kernel/mm/transparent_hugepage/enabled set to madvise or always")
	case "always":
		// The heap may be on huge pages already; only the end state is checked.
	case "madvise":
		// Nothing in this process asked for huge pages before Back.
		probe = new([64]byte)
		require.Zero(t, hugeKB(t, uintptr(unsafe.Pointer(probe))), "huge pages before any hint")
	}
	o := Back("")
	require.Empty(t, o.Skipped)
	require.NoError(t, o.Hint)
	for i := 0; i < 20 && errors.Is(o.Collapse, unix.EAGAIN); i++ {
		o.Collapse = advise(o.Region, huge, unix.MADV_COLLAPSE) // a page busy for a moment: the kernel's answer, not Back's
	}
	if errors.Is(o.Collapse, unix.EINVAL) {
		t.Skipf("needs MADV_COLLAPSE (Linux 6.1 or later): %v", o.Collapse)
	}
	require.NoError(t, o.Collapse)
	require.Zero(t, o.Region%huge)
	require.Zero(t, o.Chunk%chunk)
	require.True(t, o.Region >= o.Chunk && o.Region < o.Chunk+chunk, "region %#x outside chunk %#x", o.Region, o.Chunk)
	require.GreaterOrEqual(t, hugeKB(t, o.Region), huge>>10, "the 2 MB the heap began in is one huge page")
	require.Contains(t, o.String(), "collapsed (ok)")
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
	if os.Getenv("HEAPPAGES_FRESH_PROCESS") == "" {
		inFreshProcess(t, "TestFreshPutsALargeBufferOnHugePages")
		return
	}
	if thpMode(t) != "madvise" {
		t.Skip("needs /sys/kernel/mm/transparent_hugepage/enabled set to madvise (huge pages only where asked for)")
	}
	b := make([]byte, 5<<20) // holds at least one whole aligned 2 MB region
	at := uintptr(unsafe.Pointer(&b[0]))
	require.Zero(t, hugeKB(t, at), "huge pages before any hint")
	Fresh(b)
	for i := range b {
		b[i] = 1
	}
	require.GreaterOrEqual(t, hugeKB(t, at)+hugeKB(t, at+uintptr(len(b))-1), huge>>10, "no huge page under the buffer")
}
