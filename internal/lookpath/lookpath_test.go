package lookpath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func mkfile(t *testing.T, path string, mode os.FileMode) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o600))
	require.NoError(t, os.Chmod(path, mode)) // not subject to umask
	return path
}

func lookupErr(t *testing.T, err error) *Error {
	t.Helper()
	require.Error(t, err)
	var le *Error
	require.True(t, errors.As(err, &le), "error is *launch.Error, got %T: %v", err, err)
	return le
}

func TestAccessAsRootOnNonExecutable(t *testing.T) {
	// The 126 tests rely on access(X_OK) failing for a 0644 file even for
	// root (Linux grants root X_OK only when some execute bit is set).
	p := mkfile(t, filepath.Join(t.TempDir(), "f"), 0o644)
	assert.Error(t, unix.Access(p, unix.X_OK))
	q := mkfile(t, filepath.Join(t.TempDir(), "g"), 0o100)
	assert.NoError(t, unix.Access(q, unix.X_OK), "owner-execute only is enough for the owner (or root)")
}

func TestCommandFoundOnPath(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	require.NoError(t, os.MkdirAll(a, 0o755))
	want := mkfile(t, filepath.Join(b, "tool"), 0o755)
	mkfile(t, filepath.Join(b, "other"), 0o755)

	got, err := Command("tool", a+":"+b, "/")
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestCommandFirstMatchWins(t *testing.T) {
	root := t.TempDir()
	first := mkfile(t, filepath.Join(root, "a", "tool"), 0o755)
	mkfile(t, filepath.Join(root, "b", "tool"), 0o755)

	got, err := Command("tool", filepath.Join(root, "a")+":"+filepath.Join(root, "b"), "/")
	require.NoError(t, err)
	assert.Equal(t, first, got)
}

func TestCommandNotFound(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "a") + ":" + filepath.Join(root, "missing")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "a"), 0o755))

	got, err := Command("nosuch", path, root)
	assert.Equal(t, "", got)
	le := lookupErr(t, err)
	assert.Equal(t, CodeNotFound, le.Code)
	assert.Equal(t, 127, le.Code)
	assert.Equal(t, "nosuch", le.Name)
	assert.Equal(t, "not found in PATH="+path, le.Reason)
	assert.Equal(t, "nosuch: not found in PATH="+path, le.Error())
}

func TestCommandEmptyName(t *testing.T) {
	got, err := Command("", "/usr/bin:/bin", "/")
	assert.Equal(t, "", got)
	le := lookupErr(t, err)
	assert.Equal(t, 127, le.Code)
	assert.Contains(t, le.Error(), "empty command name")
}

func TestCommandNotExecutable(t *testing.T) {
	dir := t.TempDir()
	p := mkfile(t, filepath.Join(dir, "tool"), 0o644)

	got, err := Command("tool", dir, "/")
	assert.Equal(t, "", got)
	le := lookupErr(t, err)
	assert.Equal(t, CodeNotExecutable, le.Code)
	assert.Equal(t, 126, le.Code)
	assert.Equal(t, "tool", le.Name)
	assert.Contains(t, le.Reason, p+" is not executable (mode -rw-r--r--)")
	assert.True(t, errors.Is(unix.Access(p, unix.X_OK), unix.EACCES))
}

func TestCommandDirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tool"), 0o755))

	_, err := Command("tool", dir, "/")
	le := lookupErr(t, err)
	assert.Equal(t, 126, le.Code)
	assert.Contains(t, le.Reason, filepath.Join(dir, "tool")+" is a directory")
}

func TestCommandNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "tool")
	require.NoError(t, unix.Mkfifo(fifo, 0o755))

	_, err := Command("tool", dir, "/")
	le := lookupErr(t, err)
	assert.Equal(t, 126, le.Code)
	assert.Contains(t, le.Reason, "is not a regular file")
}

func TestCommandSkipsNonExecutableForLaterExecutable(t *testing.T) {
	root := t.TempDir()
	mkfile(t, filepath.Join(root, "a", "tool"), 0o644)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "b", "tool"), 0o755)) // a directory
	want := mkfile(t, filepath.Join(root, "c", "tool"), 0o755)

	path := strings.Join([]string{filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")}, ":")
	got, err := Command("tool", path, "/")
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestCommandNonExecutableReportedOverNotFound(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "a"), 0o755))
	p := mkfile(t, filepath.Join(root, "b", "tool"), 0o644)

	_, err := Command("tool", filepath.Join(root, "a")+":"+filepath.Join(root, "b")+":"+filepath.Join(root, "nope"), "/")
	le := lookupErr(t, err)
	assert.Equal(t, 126, le.Code, "a match that cannot be run is reported as 126 even when other dirs lack it")
	assert.Contains(t, le.Reason, p)
}

func TestCommandFirstNonExecutableIsReported(t *testing.T) {
	root := t.TempDir()
	first := mkfile(t, filepath.Join(root, "a", "tool"), 0o644)
	second := mkfile(t, filepath.Join(root, "b", "tool"), 0o600)

	_, err := Command("tool", filepath.Join(root, "a")+":"+filepath.Join(root, "b"), "/")
	le := lookupErr(t, err)
	assert.Equal(t, 126, le.Code)
	assert.Contains(t, le.Reason, first)
	assert.NotContains(t, le.Reason, second)
}

func TestCommandEmptyPathElementIsCwd(t *testing.T) {
	tests := []struct {
		name, path string
	}{
		{"leading", ":/nonexistent-dir"},
		{"trailing", "/nonexistent-dir:"},
		{"middle", "/nonexistent-dir::/also-nonexistent"},
		{"whole PATH empty", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cwd := t.TempDir()
			want := mkfile(t, filepath.Join(cwd, "tool"), 0o755)
			got, err := Command("tool", tt.path, cwd)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
	t.Run("not searched without an empty element", func(t *testing.T) {
		cwd := t.TempDir()
		mkfile(t, filepath.Join(cwd, "tool"), 0o755)
		_, err := Command("tool", "/nonexistent-dir", cwd)
		assert.Equal(t, 127, lookupErr(t, err).Code)
	})
}

func TestCommandRelativePathElement(t *testing.T) {
	cwd := t.TempDir()
	want := mkfile(t, filepath.Join(cwd, "bin", "tool"), 0o755)
	got, err := Command("tool", "/nonexistent-dir:bin", cwd)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestCommandWithSlash(t *testing.T) {
	cwd := t.TempDir()
	exe := mkfile(t, filepath.Join(cwd, "sub", "tool"), 0o755)
	mkfile(t, filepath.Join(cwd, "sub", "data"), 0o644)
	// A same-named executable on PATH must not be used for a name with a slash.
	elsewhere := t.TempDir()
	mkfile(t, filepath.Join(elsewhere, "tool"), 0o755)

	t.Run("relative to cwd", func(t *testing.T) {
		got, err := Command("sub/tool", elsewhere, cwd)
		require.NoError(t, err)
		assert.Equal(t, exe, got)
	})
	t.Run("dot slash", func(t *testing.T) {
		got, err := Command("./sub/tool", elsewhere, cwd)
		require.NoError(t, err)
		assert.Equal(t, exe, got)
	})
	t.Run("dot dot", func(t *testing.T) {
		got, err := Command("../sub/tool", elsewhere, filepath.Join(cwd, "sub"))
		require.NoError(t, err)
		assert.Equal(t, exe, got)
	})
	t.Run("absolute ignores cwd and PATH", func(t *testing.T) {
		got, err := Command(exe, elsewhere, "/")
		require.NoError(t, err)
		assert.Equal(t, exe, got)
	})
	t.Run("relative not found", func(t *testing.T) {
		_, err := Command("./tool", elsewhere, cwd)
		le := lookupErr(t, err)
		assert.Equal(t, 127, le.Code)
		assert.Equal(t, "./tool", le.Name)
		assert.Contains(t, le.Reason, filepath.Join(cwd, "tool"))
	})
	t.Run("not executable", func(t *testing.T) {
		_, err := Command("sub/data", elsewhere, cwd)
		le := lookupErr(t, err)
		assert.Equal(t, 126, le.Code)
		assert.Equal(t, "sub/data", le.Name)
	})
	t.Run("under a file", func(t *testing.T) {
		// As a shell does for an explicit path: ENOTDIR is not ENOENT.
		_, err := Command("sub/tool/x", elsewhere, cwd)
		le := lookupErr(t, err)
		assert.Equal(t, 126, le.Code)
		assert.Contains(t, le.Reason, "not a directory")
	})
	t.Run("directory", func(t *testing.T) {
		_, err := Command("./sub", elsewhere, cwd)
		le := lookupErr(t, err)
		assert.Equal(t, 126, le.Code)
		assert.Contains(t, le.Reason, "is a directory")
	})
}

func TestCommandFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	target := mkfile(t, filepath.Join(dir, "real", "python3.12"), 0o755)
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "python3")))

	got, err := Command("python3", dir, "/")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "python3"), got, "the name found on PATH is returned, not the link target")

	require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling")))
	_, err = Command("dangling", dir, "/")
	assert.Equal(t, 127, lookupErr(t, err).Code, "a dangling link is not found, as execvp says ENOENT")
}

func TestCommandPathElementIsAFile(t *testing.T) {
	// A PATH element that is a regular file cannot hold commands: execvp
	// and shells skip it (ENOTDIR) and go on, so the result is "not found",
	// not "not executable".
	root := t.TempDir()
	file := mkfile(t, filepath.Join(root, "notadir"), 0o755)

	_, err := Command("tool", file+":"+filepath.Join(root, "missing"), "/")
	le := lookupErr(t, err)
	assert.Equal(t, 127, le.Code, "%v", err)

	want := mkfile(t, filepath.Join(root, "bin", "tool"), 0o755)
	got, err := Command("tool", file+":"+filepath.Join(root, "bin"), "/")
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestDefaultPath(t *testing.T) {
	assert.Equal(t, []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}, strings.Split(DefaultPath, ":"))
}

func TestAbsDirs(t *testing.T) {
	assert.Equal(t, []string{"/a", "/b"}, AbsDirs("/a::rel:/b:/a:."))
	assert.Empty(t, AbsDirs(""))
}
