package overlay

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport"
)

// The test binary doubles as an installing process for the kill -9 test:
// INFERA_INSTALL_CHILD is "SRC\nDEST".
func TestMain(m *testing.M) {
	if v := os.Getenv("INFERA_INSTALL_CHILD"); v != "" {
		src, dest, _ := strings.Cut(v, "\n")
		if _, err := Install(src, dest); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func bigPayload(t *testing.T, tag string, withLink bool) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "payload")
	for i := 0; i < 12; i++ {
		put(t, filepath.Join(src, fmt.Sprintf("py312/m%02d/data.bin", i)), strings.Repeat(tag, 64<<10), 0o644)
	}
	put(t, filepath.Join(src, "bin/infera-exec"), "#!"+tag, 0o755)
	if withLink {
		put(t, filepath.Join(src, "lib64/libx.so"), tag, 0o644)
		require.NoError(t, os.Symlink("lib64", filepath.Join(src, "lib")))
	} else {
		put(t, filepath.Join(src, "lib/libx.so"), tag, 0o644)
	}
	_, err := WriteIndex(src)
	require.NoError(t, err)
	return src
}

// kill -9 during --install, in a loop, alternating between two payloads
// (one where a directory became a link): after every kill DEST is either
// marked as unfinished (a worker refuses to start from it) or is exactly
// one of the payloads, and a file beside DEST is never touched. A final
// run completes.
func TestInstallKilledMidWayNeverLeavesAHalfPayloadUnmarked(t *testing.T) {
	a, b := bigPayload(t, "a", false), bigPayload(t, "b", true)
	base := t.TempDir()
	dest := filepath.Join(base, "dest")
	beside := filepath.Join(base, "beside")
	require.NoError(t, os.WriteFile(beside, []byte("keep"), 0o644))
	iterations := testsupport.Rounds(100, 20)
	// The kill lands anywhere in a whole run: from exec to exit, as long
	// as one uninterrupted run takes here.
	span := timeChild(t, "INFERA_INSTALL_CHILD="+a+"\n"+dest)
	killed := 0 // runs that had not finished when the signal came
	for i := 0; i < iterations; i++ {
		src := a
		if i%2 == 1 {
			src = b
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "INFERA_INSTALL_CHILD="+src+"\n"+dest)
		require.NoError(t, cmd.Start())
		time.Sleep(time.Duration(rand.Int63n(int64(span))))
		cmd.Process.Signal(syscall.SIGKILL)
		if err := cmd.Wait(); err != nil {
			killed++
		}
		if !Interrupted(dest) {
			if _, err := os.Stat(filepath.Join(dest, installedName)); err == nil {
				ia, _ := BuildIndex(a)
				ib, _ := BuildIndex(b)
				id, err := BuildIndex(dest)
				require.NoError(t, err)
				var got []Entry
				for _, e := range id.Entries {
					if e.Path != installedName && e.Path != recordName {
						got = append(got, e)
					}
				}
				if !entriesEqual(got, ia.Entries) && !entriesEqual(got, ib.Entries) {
					ents, _ := os.ReadDir(dest)
					var names []string
					for _, e := range ents {
						names = append(names, e.Name())
					}
					t.Fatalf("iteration %d: DEST is not marked unfinished and is neither payload: top level %v; a=%v\ngot=%v", i, names, ia.Entries, got)
				}
			}
		}
		data, err := os.ReadFile(beside)
		require.NoError(t, err)
		require.Equal(t, "keep", string(data))
	}
	t.Logf("%d of %d installs killed", killed, iterations)
	_, err := Install(b, dest)
	require.NoError(t, err)
	sameTree(t, b, dest)
}

func entriesEqual(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
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
