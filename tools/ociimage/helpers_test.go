package ociimage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/tools/payloadindex"
)

// The repository root, from this package's directory.
const repo = "../.."

var scratch string // removed by TestMain

func TestMain(m *testing.M) {
	var err error
	if scratch, err = os.MkdirTemp("", "ociimage-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	removeAll(scratch)
	os.Exit(code)
}

// removeAll removes a tree that may hold read-only directories.
func removeAll(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	os.RemoveAll(dir)
}

// tempDir is t.TempDir that can also remove read-only directories.
func tempDir(t testing.TB) string {
	d := t.TempDir()
	t.Cleanup(func() { removeAll(d) })
	return d
}

var (
	shimOnce sync.Once
	shimPath string
	shimErr  error
)

// shim is the real static binary: the one `make build` made
// (INFERA_EXEC_BIN), or one built here the same way.
func shim(t testing.TB) string {
	shimOnce.Do(func() {
		if p := os.Getenv("INFERA_EXEC_BIN"); p != "" {
			shimPath = p
			return
		}
		shimPath = filepath.Join(scratch, "infera-exec")
		// As `make build` links it: the entry point that reads the start's
		// signal dispositions (the main module's internal/sigstart), on amd64.
		cmd := exec.Command("go", "build", "-trimpath", "-o", shimPath, "./cmd/infera-exec")
		if runtime.GOARCH == "amd64" {
			cmd.Args = []string{"go", "build", "-trimpath", "-ldflags=-E=github.com/infera/infera-exec/internal/sigstart.entry", "-o", shimPath, "./cmd/infera-exec"}
		}
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			shimErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, shimErr)
	return shimPath
}

var (
	payloadOnce sync.Once
	payloadDir  string
	payloadErr  error
)

// testPayload is a payload made by the project's own tool
// (payloadindex, `infera-payload index`) from trees with what a real payload has and what a
// naive copy gets wrong: relative symlinks to files and to a directory, a
// private file, an empty file and an empty directory, a read-only and a
// group-only directory, a path longer than a plain tar name field. The
// payload is shared: tests must not change it (see copyPayload).
func testPayload(t *testing.T) string {
	bin := shim(t)
	payloadOnce.Do(func() { payloadDir, payloadErr = makePayload(bin) })
	require.NoError(t, payloadErr)
	return payloadDir
}

func makePayload(bin string) (string, error) {
	src := filepath.Join(scratch, "trees")
	py, native := filepath.Join(src, "py312"), filepath.Join(src, "native")
	long := filepath.Join(py, "infera_demo", strings.Repeat("long_package_name_", 4), strings.Repeat("module_", 10)+".py")
	files := []struct {
		path string
		data string
		mode os.FileMode
	}{
		{filepath.Join(py, "infera_demo", "__init__.py"), "", 0o644},
		{filepath.Join(py, "infera_demo", "worker.py"), "import sys\nprint(sys.argv)\n", 0o644},
		{filepath.Join(py, "infera_demo", "secret.cfg"), "token = none\n", 0o600},
		{filepath.Join(py, "infera_demo", "readonly", "frozen.py"), "X = 1\n", 0o444},
		{long, "# a long name\n", 0o644},
		{filepath.Join(native, "CAPABILITIES"), "mooncake\n", 0o644},
		{filepath.Join(native, "lib", "libdemo.so.1.0.0"), "\x7fELF not really\n", 0o755},
		{filepath.Join(native, "bin", "ais-check"), "#!/bin/sh\necho ok\n", 0o755},
		// Larger than a few of the layer's compressed blocks (blockGzip):
		// umoci and skopeo read the blocks joined.
		{filepath.Join(native, "lib", "libbulk.so"), string(bulk(3*gzipBlockSize + 12345)), 0o755},
	}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(f.path, []byte(f.data), f.mode); err != nil {
			return "", err
		}
		if err := os.Chmod(f.path, f.mode); err != nil {
			return "", err
		}
	}
	for _, l := range [][2]string{
		{"libdemo.so.1.0.0", filepath.Join(native, "lib", "libdemo.so.1")},
		{"libdemo.so.1", filepath.Join(native, "lib", "libdemo.so")},
		{"../lib", filepath.Join(native, "bin", "lib")},
	} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(filepath.Join(py, "infera_demo", "empty"), 0o755); err != nil {
		return "", err
	}

	out := filepath.Join(scratch, "payload")
	if _, err := payloadindex.Build(payloadindex.Options{Out: out, Bin: bin,
		Trees: []string{py + ":py312", native + ":native/rocm7-py312"}}); err != nil {
		return "", fmt.Errorf("payload: %w", err)
	}
	// Directory modes the payload build does not carry over, then the index again.
	for p, m := range map[string]os.FileMode{
		"py312/infera_demo/readonly": 0o555,
		"py312/infera_demo/empty":    0o750,
	} {
		if err := os.Chmod(filepath.Join(out, p), m); err != nil {
			return "", err
		}
	}
	if _, err := overlay.WriteIndex(out); err != nil {
		return "", err
	}
	return out, nil
}

// bulk is n bytes of a fixed pseudo-random mix of random runs and
// repeated text: compressible as a library is, the same every run.
func bulk(n int) []byte {
	rng := rand.NewChaCha8([32]byte{7})
	out := make([]byte, 0, n+64)
	for len(out) < n {
		run := make([]byte, 8+rng.Uint64()%56)
		rng.Read(run)
		out = append(out, run...)
		out = append(out, "kv_cache chunk send layer block "[:8+rng.Uint64()%24]...)
	}
	return out[:n]
}

// copyPayload copies a payload (modes, symlinks) for a test to change.
func copyPayload(t *testing.T, src string) string {
	dst := filepath.Join(tempDir(t), "payload")
	var dirs []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, rel)
			return os.MkdirAll(target, 0o755)
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, data, 0o600); err != nil {
			return err
		}
		return os.Chmod(target, fi.Mode().Perm())
	})
	require.NoError(t, err)
	for i := len(dirs) - 1; i >= 0; i-- {
		fi, err := os.Stat(filepath.Join(src, dirs[i]))
		require.NoError(t, err)
		require.NoError(t, os.Chmod(filepath.Join(dst, dirs[i]), fi.Mode().Perm()))
	}
	return dst
}

// snapshot describes every entry under root: type, permission bits and
// content hash or link target. Names in ignore (relative) are left out,
// directories with all they hold.
func snapshot(t *testing.T, root string, ignore ...string) map[string]string {
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		for _, ig := range ignore {
			if rel == ig && d.IsDir() {
				return filepath.SkipDir // and all under it
			}
			if rel == ig {
				return nil
			}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case rel == ".":
			return nil
		case fi.IsDir():
			m[rel] = fmt.Sprintf("dir %04o", fi.Mode().Perm())
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m[rel] = "symlink -> " + l
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			m[rel] = fmt.Sprintf("file %04o %d %s", fi.Mode().Perm(), len(data), hex.EncodeToString(sum[:]))
		default:
			m[rel] = "other " + fi.Mode().Type().String()
		}
		return nil
	})
	require.NoError(t, err)
	return m
}

// buildTo builds the image of payload into dir (layout dir/oci, archive
// dir/overlay.tar) with the defaults of the command line.
func buildTo(t *testing.T, payload, dir string) (*Result, Options) {
	o := Options{
		Payload: payload, OCI: filepath.Join(dir, "oci"), Archive: filepath.Join(dir, "overlay.tar"),
		Tag: "latest", Name: "infera/overlay:test", Version: "test", Revision: "0123456789ab",
		Arch: runtime.GOARCH, OS: "linux", Created: time.Unix(0, 0).UTC(),
		Busybox: shim(t), BusyboxCopyright: testCopyright(t),
	}
	r, err := Build(o)
	require.NoError(t, err)
	return r, o
}

// testCopyright is a copyright file for -busybox-copyright. The tests
// give the static shim as -busybox: what the builder checks of it (a
// static executable for the image's architecture) holds for both; the
// runtime tests (deploy/containers) run Debian's busybox-static.
func testCopyright(t testing.TB) string {
	p := filepath.Join(tempDir(t), "copyright")
	require.NoError(t, os.WriteFile(p, []byte("busybox test copyright: GPL-2\n"), 0o644))
	return p
}

// tool finds a command-line tool the test needs. Missing, it skips the
// test, or fails it when INFERA_REQUIRE_FIXTURES=1 (CI, whose .ci/run
// installs it from Debian).
func tool(t *testing.T, name, pkg string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("INFERA_REQUIRE_FIXTURES") == "1" {
			t.Fatalf("INFERA_REQUIRE_FIXTURES=1 but %s is not installed (apt-get install %s)", name, pkg)
		}
		t.Skipf("%s is not installed (apt-get install %s)", name, pkg)
	}
	return p
}
