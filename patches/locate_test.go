package patches

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/patches/patchdef"
)

// python is the machine's interpreter; these tests use the real import
// system, venvs and pip.
func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	return p
}

func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PIP_NO_INDEX=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}

func write(t *testing.T, p, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

// debianPython is Debian's /usr/bin/python3 with python3-setuptools,
// python3-wheel and python3-pip (installed by .ci/run): what pip needs to
// make an editable install without an index.
func debianPython(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("Debian's python3 is not installed")
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import setuptools, wheel, pip").CombinedOutput(); err != nil {
		t.Skipf("python3-setuptools, python3-wheel or python3-pip missing: %s", out)
	}
	return "/usr/bin/python3"
}

// venv makes a venv and returns its interpreter and site-packages. With
// systemSite it is made by Debian's python3 and sees its setuptools.
func venv(t *testing.T, systemSite bool) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "venv")
	base, args := python(t), []string{"-m", "venv", "--without-pip", dir}
	if systemSite {
		base, args = debianPython(t), []string{"-m", "venv", "--system-site-packages", "--without-pip", dir}
	}
	run(t, "/", base, args...)
	site := strings.TrimSpace(run(t, "/", filepath.Join(dir, "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
	return filepath.Join(dir, "bin/python"), site
}

func envWith(kv ...string) *environ.Env {
	var kept []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "VIRTUAL_ENV":
		default:
			kept = append(kept, kv)
		}
	}
	e := environ.New(kept)
	for i := 0; i+1 < len(kv); i += 2 {
		e.Set(kv[i], kv[i+1])
	}
	return e
}

func TestLocateRegularInstallAndVersion(t *testing.T) {
	py, site := venv(t, false)
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	write(t, filepath.Join(site, "demo_pkg-1.4.0rc1.dist-info/METADATA"), "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.4.0rc1\n\nVersion: 9.9.9 (in the body)\n")
	l := &engineLocator{Python: py, Env: envWith(), Dir: "/"}
	loc, err := l.locate(context.Background(), []string{"demo", "absent_pkg"})
	require.NoError(t, err)
	assert.Equal(t, Package{Name: "demo", Found: true, Dir: filepath.Join(site, "demo"), Dirs: []string{filepath.Join(site, "demo")}}, loc.Packages["demo"])
	assert.False(t, loc.Packages["absent_pkg"].Found)
	assert.Contains(t, loc.Packages["absent_pkg"].Why, "absent_pkg is not importable")
	v, from := distVersion("demo-pkg", []string{site})
	assert.Equal(t, "1.4.0rc1", v)
	assert.Equal(t, filepath.Join(site, "demo_pkg-1.4.0rc1.dist-info/METADATA"), from)
	v, _ = distVersion("Demo.Pkg", []string{site})
	assert.Equal(t, "1.4.0rc1", v, "distribution names compare normalized")
}

// An editable install made by pip itself (PEP 660 with setuptools): the
// package resolves to the source checkout, not to site-packages.
func TestLocateEditableInstall(t *testing.T) {
	py, site := venv(t, true)
	src := filepath.Join(t.TempDir(), "checkout", "python")
	write(t, filepath.Join(src, "pyproject.toml"), "[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"demo-engine\"\nversion = \"0.5.5\"\n\n[tool.setuptools]\npackages = [\"demo_engine\", \"demo_engine.srt\"]\n")
	write(t, filepath.Join(src, "demo_engine/__init__.py"), "")
	write(t, filepath.Join(src, "demo_engine/srt/__init__.py"), "")
	write(t, filepath.Join(src, "other/stray.py"), "")
	run(t, src, py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", "-q", "-e", ".")

	l := &engineLocator{Python: py, Env: envWith(), Dir: "/"}
	loc, err := l.locate(context.Background(), []string{"demo_engine"})
	require.NoError(t, err)
	got := loc.Packages["demo_engine"]
	require.True(t, got.Found, got.Why)
	assert.Equal(t, filepath.Join(src, "demo_engine"), got.Dir)
	v, _ := distVersion("demo-engine", loc.SysPath)
	assert.Equal(t, "0.5.5", v, "the dist-info of an editable install is in site-packages")

	// The offline locator reads the same install without Python.
	require.FileExists(t, filepath.Join(site, "__editable___demo_engine_0_5_5_finder.py"), "pip made a PEP 660 finder")
	off, err := LocateOffline(site, []string{"demo_engine"})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(src, "demo_engine"), off.Packages["demo_engine"].Dir)
}

func TestLocateShadowing(t *testing.T) {
	py, site := venv(t, false)
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	pp := t.TempDir()
	write(t, filepath.Join(pp, "demo/__init__.py"), "")
	cwd := t.TempDir()
	write(t, filepath.Join(cwd, "demo/__init__.py"), "")

	// PYTHONPATH comes before site-packages.
	loc, err := (&engineLocator{Python: py, Env: envWith("PYTHONPATH", pp), Dir: "/"}).locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(pp, "demo"), loc.Packages["demo"].Dir)

	// The working directory comes before PYTHONPATH (as for `python3 -m`).
	loc, err = (&engineLocator{Python: py, Env: envWith("PYTHONPATH", pp), Dir: cwd}).locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(cwd, "demo"), loc.Packages["demo"].Dir)
}

func TestLocateNamespacePackage(t *testing.T) {
	py, _ := venv(t, false)
	a, b := t.TempDir(), t.TempDir()
	write(t, filepath.Join(a, "nsdemo/one.py"), "")
	write(t, filepath.Join(b, "nsdemo/two.py"), "    a, _ = x\n")
	loc, err := (&engineLocator{Python: py, Env: envWith("PYTHONPATH", a+":"+b), Dir: "/"}).locate(context.Background(), []string{"nsdemo"})
	require.NoError(t, err)
	pkg := loc.Packages["nsdemo"]
	require.True(t, pkg.Found)
	assert.Equal(t, []string{filepath.Join(a, "nsdemo"), filepath.Join(b, "nsdemo")}, pkg.Dirs)

	// An edit finds its file in whichever portion holds it.
	d := &patchdef.Definition{ID: "ns", Summary: "s", Package: "nsdemo", Distribution: "nsdemo", Edits: []patchdef.Edit{{File: "two.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"}}}
	require.NoError(t, d.Validate())
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.Applied, r.State)
	assert.Equal(t, filepath.Join(b, "nsdemo/two.py"), r.Edits[0].Path)
}

// METADATA is read as a bounded regular file: a FIFO or an oversized file
// gives no version rather than a hang or a huge read.
func TestMetadataIsBounded(t *testing.T) {
	site := t.TempDir()
	meta := filepath.Join(site, "demo-1.0.dist-info", "METADATA")
	write(t, meta, "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n\n")
	v, _ := distVersion("demo", []string{site})
	assert.Equal(t, "1.0", v)
	require.NoError(t, os.Remove(meta))
	require.NoError(t, syscall.Mkfifo(meta, 0o644))
	done := make(chan string)
	go func() { v, _ := distVersion("demo", []string{site}); done <- v }()
	select {
	case v := <-done:
		assert.Equal(t, "", v)
	case <-time.After(10 * time.Second):
		t.Fatal("DistVersion blocked on a FIFO METADATA")
	}
	require.NoError(t, os.Remove(meta))
	write(t, meta, "Version: 1.0\n"+strings.Repeat("x", maxMetadataBytes))
	v, _ = distVersion("demo", []string{site})
	assert.Equal(t, "", v, "over the cap")
}

func TestLocateInterpreterFailures(t *testing.T) {
	dir := t.TempDir()
	hang := filepath.Join(dir, "hang")
	write(t, hang, "#!/bin/sh\nsleep 30\n")
	require.NoError(t, os.Chmod(hang, 0o755))
	_, err := (&engineLocator{Python: hang, Env: envWith(), Dir: "/", Timeout: 200 * time.Millisecond}).locate(context.Background(), []string{"demo"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did not answer where demo would be imported from within 200ms")

	junk := filepath.Join(dir, "junk")
	write(t, junk, "#!/bin/sh\necho hello\n")
	require.NoError(t, os.Chmod(junk, 0o755))
	_, err = (&engineLocator{Python: junk, Env: envWith(), Dir: "/"}).locate(context.Background(), []string{"demo"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `answered "hello" to the package probe`)

	fail := filepath.Join(dir, "fail")
	write(t, fail, "#!/bin/sh\necho boom >&2\nexit 3\n")
	require.NoError(t, os.Chmod(fail, 0o755))
	_, err = (&engineLocator{Python: fail, Env: envWith(), Dir: "/"}).locate(context.Background(), []string{"demo"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exit status 3): boom")
}

func TestParseProbe(t *testing.T) {
	loc, err := parseProbe("P\x00P/site\x00C/pyc\x00Svllm\x00O/site/vllm/__init__.py\x00L/site/vllm\x00Sns\x00O\x00L/a/ns\x00L/b/ns\x00Smissing\x00N\x00Sbad\x00EImportError: boom\x00Smod\x00O/site/mod.py", []string{"vllm", "ns", "missing", "bad", "mod"})
	require.NoError(t, err)
	assert.Equal(t, []string{"", "/site"}, loc.SysPath)
	assert.Equal(t, "/pyc", loc.PycachePrefix)
	assert.Equal(t, Package{Name: "vllm", Found: true, Dir: "/site/vllm", Dirs: []string{"/site/vllm"}}, loc.Packages["vllm"])
	assert.Equal(t, []string{"/a/ns", "/b/ns"}, loc.Packages["ns"].Dirs)
	assert.Contains(t, loc.Packages["missing"].Why, "missing is not importable")
	assert.Equal(t, "finding bad raised ImportError: boom", loc.Packages["bad"].Why)
	assert.Equal(t, "mod is a module (/site/mod.py), not a package", loc.Packages["mod"].Why)
	assert.False(t, loc.Packages["mod"].Found)

	for _, bad := range []string{"", "Svllm\x00\x00N", "Lx", "Svllm\x00Q", "P/x"} {
		_, err := parseProbe(bad, []string{"vllm"})
		assert.Error(t, err, "%q", bad)
	}
}

// Every variable the interpreter reads that changes sys.path or where it
// looks for its venv, the last two even under -E and -I, is part of the
// probe cache's settings: an answer cached without it is not taken with it.
func TestSettingsTakeThePathVariables(t *testing.T) {
	for _, k := range []string{"PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
		"PYTHONPLATLIBDIR", "PYTHONSTARTUP", "HOME", "PYTHONEXECUTABLE", "__PYVENV_LAUNCHER__", "PYTHONPYCACHEPREFIX",
		"LC_ALL", "LC_CTYPE", "LANG", "LOCPATH", "PYTHONUTF8", "PYTHONCOERCECLOCALE"} {
		l := &engineLocator{Python: "/usr/bin/python3", Env: environ.New(nil), Dir: "/"}
		without := l.settings([]string{"vllm"})
		l.Env.Set(k, "/elsewhere")
		assert.NotEqual(t, without, l.settings([]string{"vllm"}), k)
	}
}

// A worker that is not a Python interpreter (a shell, a script of one)
// does not say which interpreter imports the engine; the probe asks the
// configured one with -c in the worker's directory. The locator reads
// that same question without starting Python when its answer is certain,
// and gives the probe's own answer; when it is not, the probe runs.
func TestLocateANonPythonWorkerReadsTheProbesQuestion(t *testing.T) {
	py, site := venv(t, false)
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	cwd := t.TempDir()
	write(t, filepath.Join(cwd, "demo/__init__.py"), "") // -c: the working directory comes first
	script := filepath.Join(t.TempDir(), "start.sh")
	write(t, script, "#!/bin/sh\nexec true\n")
	require.NoError(t, os.Chmod(script, 0o755))

	for _, argv := range [][]string{{"/bin/true"}, {script, "serve"}} {
		l := &engineLocator{Python: py, Env: envWith(), Dir: cwd, Argv: argv, Path: argv[0]}
		loc, err := l.locate(context.Background(), []string{"demo", "absent_pkg"})
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(loc.Located, "without starting Python: "), "%v: %s", argv, loc.Located)
		require.Contains(t, loc.Located, "as the probe asks it")
		assert.Equal(t, filepath.Join(cwd, "demo"), loc.Packages["demo"].Dir, "%v", argv)

		// The interpreter itself, asked as the probe asks it, agrees.
		asked, err := l.run(context.Background(), []string{"demo", "absent_pkg"})
		require.NoError(t, err)
		for _, n := range []string{"demo", "absent_pkg"} {
			got := loc.Packages[n]
			got.Others = nil // the resolver also lists the copies it shadows
			assert.Equal(t, asked.Packages[n], got, "%v %s", argv, n)
		}
		assert.Equal(t, asked.SysPath, loc.SysPath, "%v", argv)
	}

	// Code at the probe's start-up: not certain; the interpreter is asked.
	write(t, filepath.Join(site, "sitecustomize.py"), "import sys\n")
	l := &engineLocator{Python: py, Env: envWith(), Dir: cwd, Argv: []string{"/bin/true"}, Path: "/bin/true"}
	loc, err := l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.Equal(t, "by the interpreter: not certain without it: the worker's command /bin/true is not a Python interpreter (its name is not python, python3 or python3.N); and for the probe's own command: sitecustomize runs at start-up ("+filepath.Join(site, "sitecustomize.py")+")", loc.Located)
}
