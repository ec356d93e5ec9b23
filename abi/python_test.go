package abi_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/internal/environ"
)

// pyDir is a fresh directory with its symlinks resolved.
func pyDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return d
}

// fakePython writes an executable /bin/sh script at path.
func fakePython(t *testing.T, path, body string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	return path
}

func pySymlink(t *testing.T, target, link string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	require.NoError(t, os.Symlink(target, link))
	return link
}

// falseBin is an executable that fails when run: a decision that needed
// to run it would fail.
func falseBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("false")
	require.NoError(t, err)
	return p
}

// pathEnv is an environment whose PATH is only dirs.
func pathEnv(dirs ...string) *environ.Env {
	return environ.New([]string{"PATH=" + strings.Join(dirs, ":")})
}

func TestDetectPythonFromInterpreterName(t *testing.T) {
	d := pyDir(t)
	f := falseBin(t)
	link := pySymlink(t, f, filepath.Join(d, "python3.12"))

	p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: link})
	require.NoError(t, err)
	assert.False(t, p.Asked, "the name decides; the interpreter is not run")
	assert.Empty(t, p.AskTime)
	assert.Equal(t, 3, p.Major)
	assert.Equal(t, 12, p.Minor)
	assert.Equal(t, "py312", p.Tree())
	assert.Equal(t, "3.12", p.Version())
	assert.Equal(t, link, p.Interpreter)
	assert.Equal(t, link, p.Path)
	assert.Equal(t, "interpreter name "+link, p.DecidedBy)
	assert.Equal(t, []string{link, f}, p.Chain)
}

func TestDetectPythonFromSymlinkChain(t *testing.T) {
	d := pyDir(t)
	f := falseBin(t)
	real := pySymlink(t, f, filepath.Join(d, "python3.12"))
	link := pySymlink(t, "python3.12", filepath.Join(d, "python3"))

	t.Run("by path", func(t *testing.T) {
		p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: link})
		require.NoError(t, err)
		assert.False(t, p.Asked)
		assert.Equal(t, 3, p.Major)
		assert.Equal(t, 12, p.Minor)
		assert.Equal(t, []string{link, real, f}, p.Chain)
		assert.Contains(t, p.DecidedBy, "symlink chain")
		assert.Contains(t, p.DecidedBy, link+" -> "+real)
	})
	t.Run("default name on the probe's PATH", func(t *testing.T) {
		p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Env: pathEnv(filepath.Join(d, "empty"), d)})
		require.NoError(t, err)
		assert.Equal(t, "python3", p.Interpreter)
		assert.Equal(t, link, p.Path)
		assert.False(t, p.Asked)
		assert.Equal(t, "py312", p.Tree())
	})
}

func TestDetectPythonRealVenv(t *testing.T) {
	py, err := exec.LookPath("python3")
	require.NoError(t, err, "this test uses the machine's python3")
	out, err := exec.Command(py, "-c", "import sys;print(sys.version_info[1])").Output()
	require.NoError(t, err)
	minor, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)

	venv := filepath.Join(pyDir(t), "venv")
	if out, err := exec.Command(py, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, out)
	}
	exe := filepath.Join(venv, "bin", "python3")

	p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: exe})
	require.NoError(t, err)
	assert.False(t, p.Asked, "pyvenv.cfg (and the chain, when it names the version) decide: %s", p.DecidedBy)
	assert.Equal(t, 3, p.Major)
	assert.Equal(t, minor, p.Minor)
	assert.Equal(t, exe, p.Path)
	assert.Equal(t, "pyvenv.cfg "+filepath.Join(venv, "pyvenv.cfg"), p.DecidedBy)
	require.NotEmpty(t, p.Chain)
	assert.Equal(t, exe, p.Chain[0])
}

// pyvenv.cfg is read next to the executable or one directory up, in the
// formats of the stdlib venv, virtualenv and uv.
func TestDetectPythonVenvConfigFormats(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   string
		minor int
	}{
		{"stdlib venv", "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\nexecutable = /usr/bin/python3.12\n", 12},
		{"virtualenv", "home = /usr/bin\nimplementation = CPython\nversion_info = 3.11.9.final.0\nvirtualenv = 20.25.0\n", 11},
		{"uv", "home = /opt/py\nimplementation = CPython\nuv = 0.4.30\nversion_info = 3.13.0\n", 13},
		{"no spaces", "version=3.10.14\n", 10},
		{"major.minor only", "version = 3.9\n", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			venv := pyDir(t)
			require.NoError(t, os.WriteFile(filepath.Join(venv, "pyvenv.cfg"), []byte(tc.cfg), 0o644))
			exe := pySymlink(t, falseBin(t), filepath.Join(venv, "bin", "python3"))

			p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: exe})
			require.NoError(t, err)
			assert.False(t, p.Asked)
			assert.Equal(t, 3, p.Major)
			assert.Equal(t, tc.minor, p.Minor)
			assert.Equal(t, "pyvenv.cfg "+filepath.Join(venv, "pyvenv.cfg"), p.DecidedBy)
		})
	}
	t.Run("next to the executable", func(t *testing.T) {
		d := pyDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(d, "pyvenv.cfg"), []byte("version = 3.12.1\n"), 0o644))
		exe := pySymlink(t, falseBin(t), filepath.Join(d, "python3"))
		p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: exe})
		require.NoError(t, err)
		assert.Equal(t, 12, p.Minor)
		assert.False(t, p.Asked)
	})
	t.Run("no version in it", func(t *testing.T) {
		venv := pyDir(t)
		require.NoError(t, os.WriteFile(filepath.Join(venv, "pyvenv.cfg"), []byte("home = /usr/bin\nversion = unknown\n"), 0o644))
		exe := fakePython(t, filepath.Join(venv, "bin", "python3"), "echo 3.12.4")
		p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: exe})
		require.NoError(t, err)
		assert.True(t, p.Asked, "nothing claims a version, so the interpreter is asked")
		assert.Equal(t, 12, p.Minor)
		assert.NotContains(t, p.DecidedBy, "disagree")
	})
}

func TestDetectPythonClaimsAgree(t *testing.T) {
	d := pyDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(d, "pyvenv.cfg"), []byte("version = 3.12.9\n"), 0o644))
	link := pySymlink(t, falseBin(t), filepath.Join(d, "python3.12"))

	p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: link})
	require.NoError(t, err)
	assert.False(t, p.Asked)
	assert.Equal(t, 12, p.Minor)
	assert.Equal(t, "interpreter name "+link, p.DecidedBy)
}

func TestDetectPythonClaimsDisagree(t *testing.T) {
	d := pyDir(t)
	real := fakePython(t, filepath.Join(d, "libexec", "interp"), `echo 3.12.1`)
	link := pySymlink(t, real, filepath.Join(d, "bin", "python3.12"))
	cfg := filepath.Join(d, "bin", "pyvenv.cfg")
	require.NoError(t, os.WriteFile(cfg, []byte("home = /usr/bin\nversion = 3.10.4\n"), 0o644))

	p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: link})
	require.NoError(t, err)
	assert.True(t, p.Asked)
	assert.NotEmpty(t, p.AskTime)
	assert.Equal(t, 3, p.Major)
	assert.Equal(t, 12, p.Minor)
	assert.Contains(t, p.DecidedBy, "the interpreter's own answer")
	assert.Contains(t, p.DecidedBy, "disagree")
	assert.Contains(t, p.DecidedBy, "pyvenv.cfg "+cfg+" says 3.10")
	assert.Contains(t, p.DecidedBy, "interpreter name "+link+" says 3.12")
}

func TestDetectPythonAsks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  string
		major   int
		minor   int
		wantErr []string
	}{
		{name: "answers", script: `echo 3.13.0`, major: 3, minor: 13},
		{name: "answers without newline", script: `printf 3.9.18`, major: 3, minor: 9},
		{name: "run with -I -S -c", script: `[ "$1 $2 $3" = "-I -S -c" ] && echo 3.11.2 || echo "args: $*"`, major: 3, minor: 11},
		{name: "garbage", script: `echo "hello garbage"`,
			wantErr: []string{`"hello garbage"`, "not MAJOR.MINOR.MICRO"}},
		{name: "nothing", script: `true`,
			wantErr: []string{`answered ""`}},
		{name: "fails", script: `echo "Fatal Python error: init_fs_encoding" >&2; exit 1`,
			wantErr: []string{"Fatal Python error: init_fs_encoding", "exit status 1", "failed to report its version"}},
		{name: "python 2", script: `echo 2.7.18`, major: 2, minor: 7,
			wantErr: []string{"CPython 3 only", "Python 2.7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := pyDir(t)
			exe := fakePython(t, filepath.Join(d, "python3"), tc.script)

			p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: exe})
			assert.True(t, p.Asked)
			assert.Equal(t, exe, p.Path)
			if tc.wantErr != nil {
				require.Error(t, err)
				for _, w := range tc.wantErr {
					assert.Contains(t, err.Error(), w)
				}
				assert.Contains(t, err.Error(), exe, "the error names the interpreter")
			} else {
				require.NoError(t, err)
				assert.Contains(t, p.DecidedBy, "the interpreter's own answer")
				assert.NotContains(t, p.DecidedBy, "disagree")
			}
			assert.Equal(t, tc.major, p.Major)
			assert.Equal(t, tc.minor, p.Minor)
		})
	}
}

func TestDetectPythonTimeoutKillsProcessGroup(t *testing.T) {
	d := pyDir(t)
	scriptPID := filepath.Join(d, "script.pid")
	childPID := filepath.Join(d, "child.pid")
	exe := fakePython(t, filepath.Join(d, "python3"), fmt.Sprintf(
		"echo $$ > %s\nsleep 30 &\necho $! > %s\nwait\necho 3.12.0", scriptPID, childPID))

	p, err := abi.DetectPython(context.Background(), abi.PythonProbe{
		Interpreter: exe,
		Timeout:     300 * time.Millisecond,
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did not answer its version within 300ms")
	assert.Contains(t, err.Error(), exe)
	assert.True(t, p.Asked)
	assert.Zero(t, p.Major)

	for _, f := range []string{scriptPID, childPID} {
		pid := readPID(t, f)
		assert.Eventually(t, func() bool { return !alive(pid) }, 2*time.Second, 20*time.Millisecond,
			"process %d (%s) still runs after the timeout", pid, filepath.Base(f))
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err, "the fake interpreter did not get as far as writing %s", path)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.Positive(t, pid)
	return pid
}

// alive reports whether pid exists and is not a zombie (an orphan killed
// with its group waits for init to reap it; it runs no more).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...; comm may hold spaces and parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}

func TestDetectPythonParentContextCancelled(t *testing.T) {
	d := pyDir(t)
	exe := fakePython(t, filepath.Join(d, "python3"), "echo 3.12.0")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	p, err := abi.DetectPython(ctx, abi.PythonProbe{Interpreter: exe})
	require.Error(t, err)
	assert.Contains(t, err.Error(), exe)
	assert.True(t, p.Asked)
	assert.Zero(t, p.Major)
}

func TestDetectPythonNotFound(t *testing.T) {
	d := pyDir(t)
	t.Run("on PATH", func(t *testing.T) {
		p, err := abi.DetectPython(context.Background(), abi.PythonProbe{
			Interpreter: "python3-infera-nonexistent",
			Env:         pathEnv(d),
		})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "python3-infera-nonexistent")
		assert.Contains(t, err.Error(), "INFERA_PYTHON")
		assert.Contains(t, err.Error(), "PATH="+d)
		assert.False(t, p.Asked)
		assert.Empty(t, p.Path)
	})
	t.Run("default python3 not on PATH", func(t *testing.T) {
		_, err := abi.DetectPython(context.Background(), abi.PythonProbe{Env: pathEnv(d)})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "python3")
		assert.Contains(t, err.Error(), "INFERA_PYTHON")
	})
	t.Run("by path", func(t *testing.T) {
		missing := filepath.Join(d, "nope", "python3.12")
		_, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: missing})
		require.Error(t, err)
		assert.Contains(t, err.Error(), missing)
		assert.Contains(t, err.Error(), "INFERA_PYTHON")
	})
	t.Run("dangling symlink", func(t *testing.T) {
		link := pySymlink(t, filepath.Join(d, "gone"), filepath.Join(d, "python3.12"))
		_, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: link})
		require.Error(t, err)
		assert.Contains(t, err.Error(), link)
	})
}

func TestDetectPythonNotExecutable(t *testing.T) {
	d := pyDir(t)
	exe := filepath.Join(d, "python3")
	require.NoError(t, os.WriteFile(exe, []byte("#!/bin/sh\necho 3.12.0\n"), 0o644))

	t.Run("by path", func(t *testing.T) {
		p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: exe})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "not executable")
		assert.Contains(t, err.Error(), exe)
		assert.False(t, p.Asked)
	})
	t.Run("on PATH", func(t *testing.T) {
		_, err := abi.DetectPython(context.Background(), abi.PythonProbe{Env: pathEnv(d)})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "not executable")
		assert.Contains(t, err.Error(), "INFERA_PYTHON")
	})
}

// The interpreter is looked up on, and run with, the probe's environment
// and working directory, not the test process's.
func TestDetectPythonUsesProbeEnvAndDir(t *testing.T) {
	base := pyDir(t)
	bin := filepath.Join(base, "bin")
	work := filepath.Join(base, "work")
	require.NoError(t, os.MkdirAll(work, 0o755))
	t.Setenv("INFERA_PROBE_LEAK", "leaked")
	fakePython(t, filepath.Join(bin, "python3"), fmt.Sprintf(`
if [ "$(pwd)" = %q ] && [ "$INFERA_PROBE_MARK" = from-probe ] && [ -z "$INFERA_PROBE_LEAK" ]; then
	echo 3.12.5
else
	echo "wrong pwd=$(pwd) mark=$INFERA_PROBE_MARK leak=$INFERA_PROBE_LEAK"
fi`, work))

	env := environ.New([]string{"PATH=" + bin, "INFERA_PROBE_MARK=from-probe"})
	p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Env: env, Dir: work})
	require.NoError(t, err)
	assert.True(t, p.Asked)
	assert.Equal(t, filepath.Join(bin, "python3"), p.Path)
	assert.Equal(t, 3, p.Major)
	assert.Equal(t, 12, p.Minor)

	t.Run("another dir is noticed", func(t *testing.T) {
		_, err := abi.DetectPython(context.Background(), abi.PythonProbe{Env: env, Dir: base})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "wrong pwd="+base)
	})
	t.Run("relative PATH element is relative to Dir", func(t *testing.T) {
		p, err := abi.DetectPython(context.Background(), abi.PythonProbe{
			Env: environ.New([]string{"PATH=../bin", "INFERA_PROBE_MARK=from-probe"}),
			Dir: work,
		})
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(bin, "python3"), p.Path)
		assert.Equal(t, 12, p.Minor)
	})
}

// A relative interpreter path or PATH element is resolved against Dir (or
// the process's cwd when Dir is empty), and the file checked is the file
// run: not a same-named interpreter found elsewhere on the test's PATH,
// nor the path taken a second time relative to Dir.
func TestDetectPythonRelativePaths(t *testing.T) {
	base := pyDir(t)
	decoy := filepath.Join(base, "decoy")
	fakePython(t, filepath.Join(decoy, "python3"), "echo 3.10.0")
	t.Setenv("PATH", decoy)
	fakePython(t, filepath.Join(base, "python3"), "echo 3.12.7")
	fakePython(t, filepath.Join(base, "bin", "python3"), "echo 3.13.1")
	require.NoError(t, os.MkdirAll(filepath.Join(base, "work"), 0o755))
	t.Chdir(base)

	t.Run("./python3 with no Dir", func(t *testing.T) {
		p, err := abi.DetectPython(context.Background(), abi.PythonProbe{Interpreter: "./python3"})
		require.NoError(t, err)
		assert.Equal(t, 12, p.Minor, "ran the interpreter that was checked, not %s", filepath.Join(decoy, "python3"))
		assert.Equal(t, filepath.Join(base, "python3"), p.Path)
	})
	t.Run("relative Dir", func(t *testing.T) {
		p, err := abi.DetectPython(context.Background(), abi.PythonProbe{
			Env: environ.New([]string{"PATH=../bin"}),
			Dir: "work",
		})
		require.NoError(t, err)
		assert.Equal(t, 13, p.Minor)
		assert.Equal(t, filepath.Join(base, "bin", "python3"), p.Path)
	})
}
