package pyimport

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rule case is one layout that a rule of the resolver is about, built
// for an interpreter: what the worker's command is, and, where the
// resolver is to say it is not certain, the words of its reason (else it
// must be certain where it models the layout, as want says).
type ruleCase struct {
	build func(t *testing.T, T, exe, version string) genLayout
	// uncertain(version) is the reason the resolver must give, or "" when
	// it must be certain and agree with the interpreter.
	uncertain func(version string) string
	// fails(version): the worker itself exits with an error there.
	fails func(version string) bool
}

func always(s string) func(string) string { return func(string) string { return s } }

// below returns why for versions before 3.minor, else "".
func below(minor int, why string) func(string) string {
	return func(v string) string {
		if versionAtLeast(v, minor) {
			return ""
		}
		return why
	}
}

// bare is a layout of the interpreter linked as T/bin/python3, -c, with
// a site directory (the user site) holding files.
func bare(t *testing.T, T, exe, version string, files map[string]string) genLayout {
	t.Helper()
	l := genLayout{env: map[string]string{"PATH": filepath.Join(T, "venv/bin") + ":/usr/bin:/bin", "HOME": filepath.Join(T, "home")}, cwd: filepath.Join(T, "cwd")}
	require.NoError(t, os.MkdirAll(l.cwd, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(T, "venv/bin"), 0o755))
	require.NoError(t, os.Symlink(exe, filepath.Join(T, "venv/bin/python3")))
	// A venv without the system's site directories: what the machine's
	// own site directories hold is not the layout's.
	mustWrite(filepath.Join(T, "venv/pyvenv.cfg"), "home = "+filepath.Dir(exe)+"\ninclude-system-site-packages = false\n")
	site := filepath.Join(T, "venv/lib/python"+version+"/site-packages")
	require.NoError(t, os.MkdirAll(site, 0o755))
	for _, d := range []string{"extra1", "extra2"} {
		require.NoError(t, os.MkdirAll(filepath.Join(T, d), 0o755))
	}
	for name, content := range files {
		mustWrite(filepath.Join(site, name), strings.ReplaceAll(content, "@", T))
	}
	l.argv = []string{filepath.Join(T, "venv/bin/python3"), "-c"}
	return l
}

func pthCase(files map[string]string, uncertain func(string) string) ruleCase {
	return ruleCase{build: func(t *testing.T, T, exe, version string) genLayout { return bare(t, T, exe, version, files) }, uncertain: uncertain}
}

var (
	wrapperOnce sync.Once
	wrapperSrc  string
	wrapperErr  error
)

// elfWrapper builds (once) a static Go program in the shape of Nix's
// makeBinaryWrapper: it sets PYTHONPATH and runs the real interpreter.
func elfWrapper(t *testing.T) string {
	wrapperOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pywrapper")
		if err != nil {
			wrapperErr = err
			return
		}
		src := filepath.Join(dir, "main.go")
		mustWrite(src, `package main

import (
	"os"
	"syscall"
)

func main() {
	os.Setenv("PYTHONPATH", os.Getenv("WRAP_PYTHONPATH"))
	exe := os.Getenv("WRAP_EXE")
	syscall.Exec(exe, append([]string{exe}, os.Args[1:]...), os.Environ())
	os.Exit(127)
}
`)
		mustWrite(filepath.Join(dir, "go.mod"), "module wrapper\n\ngo 1.21\n")
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "wrapper"), ".")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			wrapperErr = fmt.Errorf("building the wrapper: %v: %s", err, out)
			return
		}
		wrapperSrc = filepath.Join(dir, "wrapper")
	})
	if wrapperErr != nil {
		needFixture(t, "the Go toolchain to build an ELF wrapper: %v", wrapperErr)
	}
	return wrapperSrc
}

// ruleCases are the layouts behind each rule, as the resolver must read
// them on every CPython version.
var ruleCases = map[string]ruleCase{
	// .pth line endings: a bare CR ends a line on every version.
	"pth bare CR":   pthCase(map[string]string{"a.pth": "@/extra1\r@/extra2\n"}, always("")),
	"pth CRLF":      pthCase(map[string]string{"a.pth": "@/extra1\r\n@/extra2\r\n"}, always("")),
	"pth no ending": pthCase(map[string]string{"a.pth": "@/extra1\n@/extra2"}, always("")),
	// 3.13 ends a line at a form feed; 3.12 keeps it in the line.
	"pth form feed": pthCase(map[string]string{"a.pth": "@/extra1\f@/extra2\n"}, always("")),
	// str.rstrip strips U+001C to U+001F (ASCII, read alike everywhere).
	"pth trailing U+001C": pthCase(map[string]string{"a.pth": "@/extra1\x1c\n@/extra2\x1f \t\n"}, always("")),
	// White space outside ASCII: read in the locale's encoding up to 3.12.
	// 3.10 reads them as UTF-8 in the UTF-8 Mode, which the C locale of
	// these layouts (no locale variables) turns on; 3.11 and 3.12 in the
	// locale's codeset, coerced to C.UTF-8 where that is installed.
	"pth trailing NBSP":                  pthCase(map[string]string{"a.pth": "@/extra1\u00a0\n"}, byVersion("", "decodes .pth files in the locale's encoding", "")),
	"pth BOM":                            pthCase(map[string]string{"a.pth": "\ufeff@/extra1\n"}, byVersion("", "decodes .pth files in the locale's encoding", "")),
	"pth not UTF-8":                      pthCase(map[string]string{"a.pth": "@/extra1\n#\xff\n"}, byVersion("fails at start", "in the locale's encoding", "is not UTF-8")),
	"pth comment, blank and import-like": pthCase(map[string]string{"a.pth": "#@/extra1\n \t\x0b\n importx\n@/extra2 \n"}, always("")),
	// Python sorts names as str: a byte that is not UTF-8 becomes a
	// surrogate, below U+1F600, whose UTF-8 bytes sort below 0xff.
	"pth name order":      pthCase(map[string]string{"\xff.pth": "@/extra1\n", "\U0001F600.pth": "@/extra2\n", "a.pth": "@/extra2\n@/extra1\n"}, always("")),
	"pth name order only": pthCase(map[string]string{"\xff.pth": "@/extra1\n", "\U0001F600.pth": "@/extra2\n"}, always("")),
	// normpath keeps exactly two leading slashes.
	"pth two leading slashes": pthCase(map[string]string{"a.pth": "/@/extra1\n"}, always("")),
	// pyvenv.cfg: an empty include-system-site-packages is false.
	"venv include-system-site-packages empty": {build: func(t *testing.T, T, exe, version string) genLayout {
		// With the system's site directories, sys.path would hold them
		// and the user site.
		l := bare(t, T, exe, version, map[string]string{"eng/__init__.py": ""})
		mustWrite(filepath.Join(T, "home/.local/lib/python"+version+"/site-packages/eng/__init__.py"), "")
		mustWrite(filepath.Join(T, "venv/pyvenv.cfg"), "home = "+filepath.Dir(exe)+"\ninclude-system-site-packages = \n")
		return l
	}, uncertain: always("")},
	"venv pyvenv.cfg CRLF": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		mustWrite(filepath.Join(T, "venv/pyvenv.cfg"), "home = "+filepath.Dir(exe)+"\r\ninclude-system-site-packages = false\r\n")
		return l
	}, uncertain: always("site.py and getpath may read differently")},
	// A relative PYTHONPATH entry is joined to getcwd(): the working
	// directory with its links resolved.
	"relative PYTHONPATH in a linked working directory": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		real := filepath.Join(T, "real/deep/dir")
		require.NoError(t, os.MkdirAll(real, 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(T, "real/deep/pp/eng"), 0o755))
		mustWrite(filepath.Join(T, "real/deep/pp/eng/__init__.py"), "")
		require.NoError(t, os.MkdirAll(filepath.Join(T, "pp/eng"), 0o755))
		mustWrite(filepath.Join(T, "pp/eng/__init__.py"), "")
		require.NoError(t, os.Remove(l.cwd))
		require.NoError(t, os.Symlink(real, l.cwd))
		l.env["PYTHONPATH"] = "../pp::x"
		return l
	}, uncertain: always("")},
	"relative PYTHONPATH under -S": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		l.env["PYTHONPATH"] = "../extra1"
		l.argv = []string{l.argv[0], "-S", "-c"}
		return l
	}, uncertain: below(11, "keeps a relative entry as given")},
	// PYTHONSAFEPATH: from 3.11 only.
	"PYTHONSAFEPATH": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		l.env["PYTHONSAFEPATH"] = "1"
		return l
	}, uncertain: always("")},
	"-P": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		l.argv = []string{l.argv[0], "-P", "-c"}
		return l
	}, uncertain: below(11, "-P is not an option of CPython"), fails: func(v string) bool { return !versionAtLeast(v, 11) }},
	// A bytecode cache prefix.
	"PYTHONPYCACHEPREFIX": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		l.env["PYTHONPYCACHEPREFIX"] = filepath.Join(T, "pyc")
		return l
	}, uncertain: always("PYTHONPYCACHEPREFIX=")},
	"PYTHONPYCACHEPREFIX under -E": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		l.env["PYTHONPYCACHEPREFIX"] = filepath.Join(T, "pyc")
		l.argv = []string{l.argv[0], "-E", "-c"}
		return l
	}, uncertain: always("")},
	"-X pycache_prefix": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		l.argv = []string{l.argv[0], "-X", "pycache_prefix=" + filepath.Join(T, "pyc"), "-c"}
		return l
	}, uncertain: always("-X pycache_prefix=")},
	"-Xutf8": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		l.argv = []string{l.argv[0], "-Xutf8", "-c"}
		return l
	}, uncertain: always("")},
	// env(1) at the head of the command: its assignments followed.
	"env PYTHONPATH=X python3": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		mustWrite(filepath.Join(T, "extra1/eng/__init__.py"), "")
		l.argv = []string{"/usr/bin/env", "PYTHONPATH=" + filepath.Join(T, "extra1"), "python3", "-c"}
		return l
	}, uncertain: always("")},
	"env -u HOME -i": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, map[string]string{"eng/__init__.py": ""})
		l.argv = []string{"/usr/bin/env", "-u", "HOME", "PATH=" + filepath.Join(T, "venv/bin"), "HOME=" + filepath.Join(T, "home"), "python3", "-c"}
		return l
	}, uncertain: always("")},
	"env -C": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		l.argv = []string{"/usr/bin/env", "-C", T, "python3", "-c"}
		return l
	}, uncertain: always("the env option \"-C\"")},
	// An ELF wrapper named python3.N that sets PYTHONPATH and runs the
	// real interpreter, beside a standard library it would otherwise be
	// placed by.
	"ELF wrapper python3.N": {build: func(t *testing.T, T, exe, version string) genLayout {
		l := bare(t, T, exe, version, nil)
		mustWrite(filepath.Join(T, "extra1/eng/__init__.py"), "")
		w := filepath.Join(T, "wrap/bin/python"+version)
		data, err := os.ReadFile(elfWrapper(t))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(w), 0o755))
		require.NoError(t, os.WriteFile(w, data, 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(T, "wrap/lib"), 0o755))
		real, err := filepath.EvalSymlinks(exe)
		require.NoError(t, err)
		lib := filepath.Join(filepath.Dir(filepath.Dir(real)), "lib/python"+version)
		require.NoError(t, os.Symlink(lib, filepath.Join(T, "wrap/lib/python"+version)))
		l.env["WRAP_EXE"], l.env["WRAP_PYTHONPATH"] = real, filepath.Join(T, "extra1")
		l.argv[0] = w
		return l
	}, uncertain: always("Py_BytesMain")},
}

// TestResolverRulesAgainstEveryCPython holds each rule of the resolver
// against the real interpreters: where it is certain, its sys.path and
// find_spec answers are the interpreter's; where the rule makes it
// uncertain, it says which.
func TestResolverRulesAgainstEveryCPython(t *testing.T) {
	forEachCPython(t, func(t *testing.T, exe string) {
		version := strings.TrimPrefix(filepath.Base(exe), "python")
		for name, c := range ruleCases {
			t.Run(name, func(t *testing.T) {
				T := t.TempDir()
				l := c.build(t, T, exe, version)
				q := Query{Argv: l.argv, Path: l.argv[0], Env: func(k string) (string, bool) { v, ok := l.env[k]; return v, ok }, Cwd: l.cwd}
				a := Resolve(q, diffNames)
				real, stderr, err := runWorker(l)
				if c.fails != nil && c.fails(version) {
					assert.Error(t, err, "the worker fails on CPython %s", version)
				}
				if why := c.uncertain(version); why != "" {
					assert.False(t, a.Certain, "certain where the rule says it cannot be: %v", a.SysPath)
					assert.Contains(t, a.Reason, why)
					return
				}
				require.NoError(t, err, stderr)
				require.True(t, a.Certain, "not certain where the rule models the layout: %s", a.Reason)
				agrees(t, real, a, fmt.Sprintf("%s on %s, argv %q, env %v", name, exe, l.argv, l.env))
			})
		}
	})
}
