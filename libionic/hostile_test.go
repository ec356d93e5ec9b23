package libionic

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/testsupport"
)

const aarch64Lib = "/usr/aarch64-linux-gnu/lib/libgcc_s.so.1"

func needAarch64(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(aarch64Lib); err != nil {
		if os.Getenv("INFERA_REQUIRE_FIXTURES") == "1" {
			t.Fatalf("fixture %s missing (apt-get install libgcc-s1-arm64-cross)", aarch64Lib)
		}
		t.Skipf("fixture %s missing (apt-get install libgcc-s1-arm64-cross)", aarch64Lib)
	}
}

// Item: directories it does not own. A fallback directory made first by
// another uid (with a planted libc.so.6 in it) is not used, the warning
// names it and its owner, the next candidate is taken, and the worker
// gets no LD_LIBRARY_PATH entry at all.
func TestFallbackSkipsDirectoriesItDoesNotOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a directory owned by another uid")
	}
	root := fakeRoot(t, true)
	c, _, err := Discover(root, "mana")
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "host-libionic/libionic.so"))
	require.NoError(t, err)
	planted := filepath.Join(root, "tmp/infera-exec/rdma")
	require.NoError(t, os.MkdirAll(planted, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(planted, "libc.so.6"), []byte("planted"), 0o755))
	require.NoError(t, os.Chown(filepath.Join(root, "tmp/infera-exec"), 4242, 4242))
	require.NoError(t, os.Chown(planted, 4242, 4242))
	require.NoError(t, os.Chmod(filepath.Join(root, "tmp"), os.ModeSticky|0o777))
	link := filepath.Join(root, "run")
	require.NoError(t, os.Symlink(filepath.Join(root, "tmp/infera-exec"), link))

	o := opts(root)
	o.FallbackDirs = []string{"/run/infera-exec/rdma", "/tmp/infera-exec/rdma", "/dev/shm/infera-exec-rdma"}
	r := fallback(root, o, c, data, &Result{})
	require.Equal(t, Fallback, r.State, r.Summary)
	assert.Equal(t, map[string]string{"RDMAV_DRIVERS": "/dev/shm/infera-exec-rdma/libmana"}, r.Env)
	require.Len(t, r.Warnings, 2, "%v", r.Warnings)
	assert.Contains(t, r.Warnings[1], "tmp/infera-exec/rdma")
	assert.Contains(t, r.Warnings[1], "uid 4242")
	assert.NoFileExists(t, filepath.Join(planted, "libmana-rdmav34.so"), "nothing written into their directory")

	var logs bytes.Buffer
	out, err := Run(context.Background(), Input{Config: config.Config{HostLibionic: "/none"}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	assert.Equal(t, NotMounted, out.Swap.State)
	assert.Empty(t, out.Edits)
	// The edits of a fallback: RDMAV_DRIVERS only.
	require.Len(t, fallbackEdits(r), 1)
	for _, e := range fallbackEdits(r) {
		assert.NotEqual(t, "LD_LIBRARY_PATH", e.Name, "a provider loaded through RDMAV_DRIVERS needs no LD_LIBRARY_PATH entry")
	}
}

// Item: check-then-use on the host provider. While another process
// swaps the host file between a good build and an AArch64 one, no start
// may install anything but a build that passed the checks.
func TestHostSwappedDuringTheSwapNeverInstallsWhatWasNotChecked(t *testing.T) {
	needAarch64(t)
	root := fakeRoot(t, true)
	hostPath := filepath.Join(root, "host-libionic/libionic.so")
	good, err := os.ReadFile(hostPath)
	require.NoError(t, err)
	bad, err := os.ReadFile(aarch64Lib)
	require.NoError(t, err)
	real := filepath.Join(root, multiarch, "libmana.so.1.0.44.0")
	orig, err := os.ReadFile(real)
	require.NoError(t, err)
	goodTmp, badTmp := hostPath+".good", hostPath+".bad"

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			src, tmp := good, goodTmp
			if i%2 == 1 {
				src, tmp = bad, badTmp
			}
			if os.WriteFile(tmp, src, 0o644) == nil {
				os.Rename(tmp, hostPath)
			}
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	replaced := 0
	for i := 0; i < testsupport.Rounds(200, 25); i++ {
		require.NoError(t, os.WriteFile(real+".tmp", orig, 0o644))
		require.NoError(t, os.Rename(real+".tmp", real))
		r := Swap(context.Background(), opts(root))
		got, err := os.ReadFile(real)
		require.NoError(t, err)
		switch r.State {
		case "replaced", "unchanged":
			replaced++
			require.Equal(t, digest.Bytes(good), digest.Bytes(got), "start %d: %s logged %q but installed other bytes", i, r.State, r.Summary)
			require.Equal(t, digest.Bytes(good), r.HostSHA256)
		default:
			require.Equal(t, digest.Bytes(orig), digest.Bytes(got), "start %d: %s but the provider changed", i, r.State)
		}
	}
	t.Logf("%d of 200 starts swapped in the good build", replaced)
}

// Item: backups. A backup that is not byte-identical to the file about to
// be replaced is neither trusted nor overwritten: the original is kept
// under a name with its digest.
func TestSwapKeepsTheOriginalWhenABackupWithOtherContentExists(t *testing.T) {
	root := fakeRoot(t, true)
	real := filepath.Join(root, multiarch, "libmana.so.1.0.44.0")
	orig, err := os.ReadFile(real)
	require.NoError(t, err)
	stale := filepath.Join(root, multiarch, ".libmana.so.1.0.44.0.infera-orig")
	require.NoError(t, os.WriteFile(stale, []byte("something else"), 0o644))

	r := Swap(context.Background(), opts(root))
	require.Equal(t, Replaced, r.State, r.Summary)
	got, err := os.ReadFile(stale)
	require.NoError(t, err)
	assert.Equal(t, "something else", string(got), "a backup it did not make is not overwritten")
	sum := digest.Bytes(orig)
	keep := stale + "-" + sum[:16]
	require.Equal(t, []string{multiarch + "/.libmana.so.1.0.44.0.infera-orig-" + sum[:16]}, r.Backups)
	kept, err := os.ReadFile(keep)
	require.NoError(t, err)
	assert.Equal(t, sum, digest.Bytes(kept), "the original survives byte for byte")

	// A byte-identical backup is trusted and nothing new is made.
	root = fakeRoot(t, true)
	real = filepath.Join(root, multiarch, "libmana.so.1.0.44.0")
	orig, err = os.ReadFile(real)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, multiarch, ".libmana.so.1.0.44.0.infera-orig"), orig, 0o644))
	r = Swap(context.Background(), opts(root))
	require.Equal(t, Replaced, r.State, r.Summary)
	assert.Empty(t, r.Backups)
}

// Item: .driver files. An absolute driver line is that file and nothing
// else: the swap replaces the file libibverbs will open and reports it; a
// relative path with a directory, or two lines naming different files,
// cannot be known, so nothing is claimed.
func TestDriverLinesAreReadAsLibibverbsReadsThem(t *testing.T) {
	root := fakeRoot(t, true)
	vendor := filepath.Join(root, "opt/vendor")
	copyFile(t, realMana, filepath.Join(vendor, "libmana-rdmav34.so"), 1, 2)
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/libibverbs.d/mana.driver"), []byte("  # vendor build\n\tdriver\t/opt/vendor/libmana\n"), 0o644))
	c, _, err := Discover(root, "mana")
	require.NoError(t, err)
	assert.Equal(t, "/opt/vendor/libmana-rdmav34.so", c.ProviderLink)
	assert.Equal(t, "driver /opt/vendor/libmana", c.DriverLine)

	r := Swap(context.Background(), opts(root))
	require.Equal(t, Replaced, r.State, r.Summary)
	assert.Contains(t, r.Replaced, "/opt/vendor/libmana-rdmav34.so", "the file the loader opens is the one replaced")
	host, err := os.ReadFile(filepath.Join(root, "host-libionic/libionic.so"))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(vendor, "libmana-rdmav34.so"))
	require.NoError(t, err)
	assert.Equal(t, digest.Bytes(host), digest.Bytes(got))

	for name, content := range map[string]string{
		"relative": "driver ../vendor/libmana\n",
		"two":      "driver mana\n",
	} {
		t.Run(name, func(t *testing.T) {
			root := fakeRoot(t, true)
			if name == "two" {
				require.NoError(t, os.WriteFile(filepath.Join(root, "etc/libibverbs.d/vendor.conf"), []byte("driver /opt/vendor/libmana\n"), 0o644))
			}
			require.NoError(t, os.WriteFile(filepath.Join(root, "etc/libibverbs.d/mana.driver"), []byte(content), 0o644))
			before, err := os.ReadFile(filepath.Join(root, multiarch, "libmana.so.1.0.44.0"))
			require.NoError(t, err)
			r := Swap(context.Background(), opts(root))
			assert.Equal(t, Refused, r.State)
			assert.Contains(t, r.Summary, "cannot tell")
			assert.Empty(t, r.Replaced)
			after, err := os.ReadFile(filepath.Join(root, multiarch, "libmana.so.1.0.44.0"))
			require.NoError(t, err)
			assert.Equal(t, before, after)
		})
	}
}

func TestDriverNames(t *testing.T) {
	for content, want := range map[string][]string{
		"driver mana\n":                     {"mana"},
		"  driver\tmana extra\n":            {"mana"},
		"# driver mana\n":                   nil,
		"driver":                            nil,
		"driver mana":                       {"mana"},
		"drivers mana\n":                    nil,
		"\n\ndriver /x/libmana\ndriver a\n": {"/x/libmana", "a"},
		"driver\n":                          {""},
	} {
		assert.Equal(t, want, DriverNames(content), "%q", content)
	}
}

func FuzzDriverNames(f *testing.F) {
	for _, s := range []string{"driver mana\n", " \tdriver\t/abs/libx\n#c\n", "driver", "driver ../a/b\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, n := range DriverNames(s) {
			if bytes.ContainsAny([]byte(n), " \t\n") {
				t.Fatalf("name %q holds a separator", n)
			}
		}
	})
}
