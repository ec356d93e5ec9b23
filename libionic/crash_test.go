package libionic

import (
	"context"
	"encoding/json"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/testsupport"
)

// The test binary doubles as a swapping process for the kill -9 test:
// INFERA_SWAP_CHILD names the container root.
func TestMain(m *testing.M) {
	if root := os.Getenv("INFERA_SWAP_CHILD"); root != "" {
		json.NewEncoder(os.Stdout).Encode(Swap(context.Background(), opts(root)))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// kill -9 during the provider swap, in a loop, with the host build
// changing between runs: after every kill both names libibverbs uses lead
// to a whole file that is the original or one of the host builds (never
// torn), and the backup is the original byte for byte.
func TestSwapKilledMidWayLeavesWholeFiles(t *testing.T) {
	root := fakeRoot(t, true)
	real := filepath.Join(root, multiarch, "libmana.so.1.0.44.0")
	orig, err := os.ReadFile(real)
	require.NoError(t, err)
	host := filepath.Join(root, "host-libionic/libionic.so")
	h1, err := os.ReadFile(host)
	require.NoError(t, err)
	h2 := append(append([]byte(nil), h1...), 7)
	allowed := map[string]bool{digest.Bytes(orig): true, digest.Bytes(h1): true, digest.Bytes(h2): true}
	iterations := testsupport.Rounds(100, 20)
	// The kill lands anywhere in a whole run: from exec to exit, as long
	// as one uninterrupted run takes here.
	span := timeChild(t, "INFERA_SWAP_CHILD="+root)
	killed := 0
	for i := 0; i < iterations; i++ {
		next := h1
		if i%2 == 1 {
			next = h2
		}
		require.NoError(t, os.WriteFile(host+".tmp", next, 0o644))
		require.NoError(t, os.Rename(host+".tmp", host))
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "INFERA_SWAP_CHILD="+root)
		require.NoError(t, cmd.Start())
		time.Sleep(time.Duration(rand.Int63n(int64(span))))
		cmd.Process.Signal(syscall.SIGKILL)
		if cmd.Wait() != nil {
			killed++
		}
		for _, name := range []string{"libmana.so.1", "libibverbs/libmana-rdmav34.so"} {
			got, err := os.ReadFile(filepath.Join(root, multiarch, name))
			require.NoError(t, err, "iteration %d: %s", i, name)
			require.True(t, allowed[digest.Bytes(got)], "iteration %d: %s leads to a torn or foreign file", i, name)
		}
		if b, err := os.ReadFile(filepath.Join(root, multiarch, ".libmana.so.1.0.44.0.infera-orig")); err == nil {
			require.Equal(t, digest.Bytes(orig), digest.Bytes(b), "iteration %d: the backup is the original", i)
		}
	}
	t.Logf("%d of %d swaps killed before they finished", killed, iterations)
}

// timeChild runs the child once to the end and returns how long it took
// (at least 1ms).
func timeChild(t *testing.T, env string) time.Duration {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return max(time.Since(start), time.Millisecond)
}
