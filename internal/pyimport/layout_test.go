package pyimport

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pythonVersion is the full version of the interpreter exe, as venv
// writes it into pyvenv.cfg.
func pythonVersion(t *testing.T, exe string) string {
	t.Helper()
	out, err := exec.Command(exe, "-c", "import platform; print(platform.python_version())").Output()
	require.NoError(t, err, exe)
	return strings.TrimSpace(string(out))
}

// realSysPath is sys.path of the interpreter exe run with -c.
func realSysPath(t *testing.T, exe string) []string {
	t.Helper()
	out, err := exec.Command(exe, "-c", "import json, sys; print(json.dumps(sys.path))").Output()
	require.NoError(t, err, exe)
	var p []string
	require.NoError(t, json.Unmarshal(out, &p))
	return p
}

// getpath reads the ._pth file of the executable as found and of the one
// its links lead to (the path with "._pth" appended), which replaces
// sys.path; no other name beside them. Each case is checked against the
// interpreter itself: a ._pth file it reads makes the resolver uncertain,
// one it does not read leaves the answer certain and the interpreter's.
func TestPthFiles(t *testing.T) {
	base := realPython(t)
	// The standard library, for a ._pth file the interpreter can start
	// with, and an entry that shows it was read.
	var std []string
	for _, p := range realSysPath(t, base) {
		if p != "" && !strings.HasSuffix(p, ".zip") && !strings.Contains(p, "-packages") {
			std = append(std, p)
		}
	}
	version := pythonVersion(t, base)
	const marker = "/nonexistent/read-from-the-pth-file"
	pth := strings.Join(append(std, marker), "\n") + "\n"

	// A venv whose python3 links to the interpreter or to a copy of it
	// in real/ (whose stdlib is the interpreter's: real/../lib is a link),
	// or, made with --copies, is a copy itself of the one in real/.
	venv := func(t *testing.T, dir string, copied, exeCopied bool) (exe, real string) {
		root := filepath.Join(t.TempDir(), dir)
		bin := filepath.Join(root, "bin")
		require.NoError(t, os.MkdirAll(bin, 0o755))
		real, home := base, filepath.Dir(base)
		if copied {
			var err error
			real, err = fixture.PythonPrefix(base, filepath.Join(root, "real"))
			require.NoError(t, err)
			home = filepath.Dir(real)
		}
		exe = filepath.Join(bin, "python3")
		if exeCopied {
			require.NoError(t, fixture.CopyFile(real, exe, 0o755))
		} else {
			require.NoError(t, os.Symlink(real, exe))
		}
		mustWrite(filepath.Join(root, "pyvenv.cfg"), "home = "+home+"\ninclude-system-site-packages = false\nversion = "+version+"\n")
		return exe, real
	}
	resolve := func(exe string) *Answer {
		return Resolve(Query{Argv: []string{exe, "-c", "pass"}, Path: exe, Env: func(string) (string, bool) { return "", false }, Cwd: "/"}, []string{"json"})
	}

	for _, c := range []struct {
		name      string
		dir       string
		copied    bool
		exeCopied bool
		file      func(exe, real string) string
		read      bool
	}{
		{"beside the executable", "plain", false, false, func(exe, _ string) string { return exe + "._pth" }, true},
		{"beside the executable, in a directory named like a pattern", "py[3]", false, false, func(exe, _ string) string { return exe + "._pth" }, true},
		{"beside the executable its links lead to", "linked", true, false, func(_, real string) string { return real + "._pth" }, true},
		{"another name beside the executable", "other", false, false, func(exe, _ string) string { return filepath.Join(filepath.Dir(exe), "python._pth") }, false},
		{"the executable's name without its version", "unversioned", true, false, func(_, real string) string { return filepath.Join(filepath.Dir(real), "python3._pth") }, false},
		// With no link to follow, getpath takes the base executable from
		// pyvenv.cfg's home: python3 there, else python3.X.
		{"beside the base executable of a venv made with --copies", "copies", true, true, func(_, real string) string { return real + "._pth" }, true},
		{"beside the venv's copy made with --copies", "copies-own", true, true, func(exe, _ string) string { return exe + "._pth" }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			exe, real := venv(t, c.dir, c.copied, c.exeCopied)
			file := c.file(exe, real)
			mustWrite(file, pth)
			got := realSysPath(t, exe)
			require.Equal(t, c.read, slices.Contains(got, marker), "does the interpreter read %s: sys.path %q", file, got)
			a := resolve(exe)
			if c.read {
				require.False(t, a.Certain, "certain with %s, which the interpreter reads", file)
				require.Contains(t, a.Reason, file)
				return
			}
			require.True(t, a.Certain, a.Reason)
			require.Equal(t, got, a.SysPath)
		})
	}
}

// A build directory's marker where getpath looks for one (for a venv,
// in pyvenv.cfg's home) makes the interpreter take its library from the
// build tree; the resolver does not answer then. StartFiles names it, so
// that a key holds its absence.
func TestBuildDirectoryMarkers(t *testing.T) {
	base := realPython(t)
	for _, marker := range []string{"pybuilddir.txt", "Modules/Setup.local"} {
		t.Run(marker, func(t *testing.T) {
			root := t.TempDir()
			copied, err := fixture.PythonPrefix(base, filepath.Join(root, "real"))
			require.NoError(t, err)
			home := filepath.Dir(copied)
			exe := filepath.Join(root, "venv", "bin", "python3")
			require.NoError(t, fixture.CopyFile(base, exe, 0o755))
			cfg := "home = " + home + "\ninclude-system-site-packages = false\n"
			mustWrite(filepath.Join(root, "venv", "pyvenv.cfg"), cfg)
			q := Query{Argv: []string{exe, "-c", "pass"}, Path: exe, Env: func(string) (string, bool) { return "", false }, Cwd: "/"}
			// getpath looks for the base executable by the venv's name
			// (python3), then python3.X: without the version, not certain.
			a := Resolve(q, []string{"json"})
			require.False(t, a.Certain)
			require.Contains(t, a.Reason, "version, which is not known")
			mustWrite(filepath.Join(root, "venv", "pyvenv.cfg"), cfg+"version = "+pythonVersion(t, base)+"\n")
			q = Query{Argv: []string{exe, "-c", "pass"}, Path: exe, Env: func(string) (string, bool) { return "", false }, Cwd: "/"}
			a = Resolve(q, []string{"json"})
			require.True(t, a.Certain, a.Reason)
			require.Equal(t, realSysPath(t, exe), a.SysPath)
			file := filepath.Join(home, marker)
			require.Contains(t, StartFiles(exe), file)

			mustWrite(file, "build\n")
			out, err := exec.Command(exe, "-c", "import json, sys; print(json.dumps(sys.path))").CombinedOutput()
			var got []string
			require.False(t, err == nil && json.Unmarshal(out, &got) == nil && slices.Equal(got, a.SysPath),
				"the interpreter does not read %s: %s", file, out)
			b := Resolve(q, []string{"json"})
			require.False(t, b.Certain, "certain with %s", file)
			require.Contains(t, b.Reason, file)
		})
	}
}

// pyvenv.cfg beside the executable and one directory above: getpath
// reads the second, site.py the first, so the resolver does not answer.
func TestTwoVenvConfigs(t *testing.T) {
	base := realPython(t)
	root := t.TempDir()
	exe := filepath.Join(root, "bin", "python3")
	require.NoError(t, os.MkdirAll(filepath.Dir(exe), 0o755))
	require.NoError(t, os.Symlink(base, exe))
	cfg := "home = " + filepath.Dir(base) + "\ninclude-system-site-packages = false\n"
	mustWrite(filepath.Join(root, "pyvenv.cfg"), cfg)
	q := Query{Argv: []string{exe, "-c", "pass"}, Path: exe, Env: func(string) (string, bool) { return "", false }, Cwd: "/"}
	require.True(t, Resolve(q, []string{"json"}).Certain)
	mustWrite(filepath.Join(root, "bin", "pyvenv.cfg"), cfg)
	a := Resolve(q, []string{"json"})
	require.False(t, a.Certain)
	require.Contains(t, a.Reason, "both ")
}

// PYTHONEXECUTABLE (and __PYVENV_LAUNCHER__) is taken as the executable,
// even under -I: a pyvenv.cfg beside the path it names makes the worker's
// interpreter that venv's, not its own, so the resolver does not answer.
func TestPythonExecutableNamesAnotherVenv(t *testing.T) {
	base := realPython(t)
	mkvenv := func() string {
		v := t.TempDir()
		mustWrite(filepath.Join(v, "pyvenv.cfg"), "home = "+filepath.Dir(base)+"\ninclude-system-site-packages = false\n")
		require.NoError(t, os.MkdirAll(filepath.Join(v, "bin"), 0o755))
		require.NoError(t, os.Symlink(base, filepath.Join(v, "bin", "python3")))
		return v
	}
	worker, other, home := mkvenv(), mkvenv(), t.TempDir()
	exe := filepath.Join(worker, "bin", "python3")
	for _, k := range []string{"PYTHONEXECUTABLE", "__PYVENV_LAUNCHER__"} {
		for _, opts := range [][]string{nil, {"-I"}} {
			env := map[string]string{"HOME": home}
			q := Query{Argv: append(append([]string{exe}, opts...), "-c", "pass"), Path: exe, Env: func(key string) (string, bool) { x, ok := env[key]; return x, ok }, Cwd: "/"}
			require.True(t, Resolve(q, []string{"json"}).Certain, "%v without %s", opts, k)

			env[k] = filepath.Join(other, "bin", "python3")
			cmd := exec.Command(exe, append(opts, "-c", "import sys; print(sys.prefix)")...)
			cmd.Env = append(os.Environ(), "HOME="+home, k+"="+env[k])
			out, err := cmd.Output()
			require.NoError(t, err)
			require.Equal(t, other, strings.TrimSpace(string(out)), "%s %v: the interpreter is the other venv's", k, opts)
			a := Resolve(q, []string{"json"})
			require.False(t, a.Certain, "%s %v", k, opts)
			require.Contains(t, a.Reason, k)
		}
	}
}

// NotPython marks a command that runs no interpreter by itself (an
// executable of another name, a #! script of a shell, a file of neither
// kind); a Python interpreter, a console script of one and a wrapper
// named like an interpreter are Python, certain or not.
func TestNotPythonIsACommandThatRunsNoInterpreter(t *testing.T) {
	base := realPython(t)
	dir := t.TempDir()
	script := func(name, content string) string {
		p := filepath.Join(dir, name)
		mustWrite(p, content)
		require.NoError(t, os.Chmod(p, 0o755))
		return p
	}
	cases := []struct {
		path      string
		notPython bool
	}{
		{"/bin/true", true},
		{script("start.sh", "#!/bin/sh\nexec true\n"), true},
		{script("start-env.sh", "#!/usr/bin/env sh\nexec true\n"), true},
		{script("plain.txt", "echo no interpreter line\n"), true},
		{base, false},
		{script("console", "#!"+base+"\nimport sys\n"), false},
		{script("python3", "#!/bin/sh\nexec "+base+" \"$@\"\n"), false}, // a wrapper: Python, not readable
	}
	for _, c := range cases {
		a := Resolve(Query{Argv: []string{c.path}, Path: c.path, Env: func(k string) (string, bool) {
			if k == "PATH" {
				return "/usr/bin:/bin", true
			}
			return "", false
		}, Cwd: "/"}, []string{"json"})
		assert.Equal(t, c.notPython, a.NotPython, "%s: %s", c.path, a.Reason)
		if c.notPython {
			assert.False(t, a.Certain, c.path)
		}
	}
}
