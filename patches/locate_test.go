package patches

import (
	"context"
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

	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
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

// The probe's answer is reused while nothing that decides it changes, and
// the interpreter runs again as soon as something does.
func TestLocateCache(t *testing.T) {
	py, site := venv(t, false)
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	counter := filepath.Join(t.TempDir(), "runs")
	wrapper := filepath.Join(t.TempDir(), "python3")
	write(t, wrapper, "#!/bin/sh\necho run >> "+counter+"\nexec "+py+" \"$@\"\n")
	require.NoError(t, os.Chmod(wrapper, 0o755))
	runs := func() int {
		b, _ := os.ReadFile(counter)
		return strings.Count(string(b), "run")
	}
	cache := t.TempDir()
	time.Sleep(fileid.RacyWindow) // files written within the clock's granularity are not trusted
	l := &engineLocator{Python: wrapper, Env: envWith(), Dir: "/", CacheDir: cache}
	loc, err := l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.False(t, loc.Cached)
	assert.Equal(t, 1, runs())

	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.True(t, loc.Cached)
	assert.Equal(t, filepath.Join(site, "demo"), loc.Packages["demo"].Dir)
	assert.Equal(t, 1, runs(), "the cached answer needs no interpreter")

	// A new .pth in site-packages may change resolution: asked again.
	time.Sleep(10 * time.Millisecond)
	write(t, filepath.Join(site, "extra.pth"), "/nonexistent\n")
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.False(t, loc.Cached)
	assert.Equal(t, 2, runs())

	// So does a different PYTHONPATH.
	l.Env = envWith("PYTHONPATH", t.TempDir())
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.False(t, loc.Cached)
	assert.Equal(t, 3, runs())
}

// An in-place edit of a .pth file leaves its directory's mtime alone, yet
// moves the package elsewhere: the cached answer must not be reused. The
// edit keeps the file's size and even its mtime; its ctime still moves.
func TestLocateCachePthEditedInPlace(t *testing.T) {
	py, site := venv(t, false)
	a, b := filepath.Join(t.TempDir(), "aaaa"), filepath.Join(t.TempDir(), "bbbb")
	write(t, filepath.Join(a, "demo/__init__.py"), "")
	write(t, filepath.Join(b, "demo/__init__.py"), "")
	pth := filepath.Join(site, "engine.pth")
	write(t, pth, a+"\n")
	cache := t.TempDir()
	time.Sleep(fileid.RacyWindow)
	l := &engineLocator{Python: py, Env: envWith(), Dir: "/", CacheDir: cache}
	loc, err := l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(a, "demo"), loc.Packages["demo"].Dir)
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	require.True(t, loc.Cached)

	siteBefore, _ := os.Stat(site)
	fi, err := os.Stat(pth)
	require.NoError(t, err)
	f, err := os.OpenFile(pth, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte(b+"\n"), 0) // same length: same size
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chtimes(pth, fi.ModTime(), fi.ModTime()))
	siteAfter, _ := os.Stat(site)
	require.Equal(t, siteBefore.ModTime(), siteAfter.ModTime(), "the directory does not show the edit")

	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.False(t, loc.Cached, "the .pth file's ctime moved")
	assert.Equal(t, filepath.Join(b, "demo"), loc.Packages["demo"].Dir)
}

// So does an edit of an editable install's finder, and a cache file that
// someone else could have written is not read at all.
func TestLocateCacheFinderAndTrust(t *testing.T) {
	py, site := venv(t, false)
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	finder := filepath.Join(site, "__editable___demo_1_0_finder.py")
	write(t, finder, "MAPPING = {}\n")
	cache := t.TempDir()
	time.Sleep(fileid.RacyWindow)
	l := &engineLocator{Python: py, Env: envWith(), Dir: "/", CacheDir: cache}
	_, err := l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	loc, err := l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	require.True(t, loc.Cached)

	f, err := os.OpenFile(finder, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	f.WriteString("# edited\n")
	f.Close()
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.False(t, loc.Cached, "the finder changed")

	time.Sleep(fileid.RacyWindow)
	_, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	files, _ := filepath.Glob(filepath.Join(cache, "probe-*.json"))
	require.Len(t, files, 1)
	require.NoError(t, os.Chmod(files[0], 0o666))
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.False(t, loc.Cached, "a world-writable cache file is not trusted")

	// A FIFO in place of the cache file is neither trusted nor waited on.
	require.NoError(t, os.Remove(files[0]))
	require.NoError(t, syscall.Mkfifo(files[0], 0o644))
	done := make(chan struct{})
	go func() {
		defer close(done)
		loc, err = (&engineLocator{Python: py, Env: envWith(), Dir: "/", CacheDir: cache}).locate(context.Background(), []string{"demo"})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Locate blocked on a FIFO cache file")
	}
	require.NoError(t, err)
	assert.False(t, loc.Cached)
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
	loc, err := parseProbe("P\x00P/site\x00Svllm\x00O/site/vllm/__init__.py\x00L/site/vllm\x00Sns\x00O\x00L/a/ns\x00L/b/ns\x00Smissing\x00N\x00Sbad\x00EImportError: boom\x00Smod\x00O/site/mod.py", []string{"vllm", "ns", "missing", "bad", "mod"})
	require.NoError(t, err)
	assert.Equal(t, []string{"", "/site"}, loc.SysPath)
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

// pythonHome makes a Python prefix for the machine's interpreter whose
// standard library is the interpreter's own (linked entry by entry) and
// whose site-packages is an empty directory of the test's: run with
// PYTHONHOME set to it, the interpreter has a system site directory the
// test may write, as an image's /usr/local/lib/python3.X/dist-packages.
func pythonHome(t *testing.T, py string) (home, site string) {
	t.Helper()
	out := strings.Fields(run(t, "/", py, "-c", "import sysconfig; p = sysconfig.get_paths(); print(p['stdlib'], p['purelib'])"))
	require.Len(t, out, 2)
	stdlib, purelib := out[0], out[1]
	home = t.TempDir()
	lib := filepath.Join(home, "lib", filepath.Base(stdlib))
	require.NoError(t, os.MkdirAll(lib, 0o755))
	entries, err := os.ReadDir(stdlib)
	require.NoError(t, err)
	for _, e := range entries {
		if filepath.Join(stdlib, e.Name()) != purelib {
			require.NoError(t, os.Symlink(filepath.Join(stdlib, e.Name()), filepath.Join(lib, e.Name())))
		}
	}
	return home, filepath.Join(lib, filepath.Base(purelib))
}

// Issue: a user site directory created after the first start (another
// copy of the engine in ~/.local/lib/python3.X/site-packages, or under
// PYTHONUSERBASE) was not noticed: "(location cached)", and the worker
// imported the unpatched user-site copy, which comes before the system
// site directories on sys.path. The directories Python adds only when
// they exist are now inputs of the cache, as absences.
func TestLocateCacheUserSiteAppears(t *testing.T) {
	if os.Getenv("PYTHONNOUSERSITE") != "" {
		t.Skip("PYTHONNOUSERSITE is set: no user site")
	}
	py := python(t)
	home, site := pythonHome(t, py)
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	userBase := filepath.Join(t.TempDir(), "userbase")
	env := envWith("PYTHONHOME", home, "PYTHONUSERBASE", userBase)
	userSite := strings.TrimSpace(runEnv(t, env, py, "-c", "import site; print(site.getusersitepackages())"))
	require.True(t, strings.HasPrefix(userSite, userBase+"/"), userSite)
	require.NoDirExists(t, userSite)

	cache := t.TempDir()
	time.Sleep(fileid.RacyWindow) // files written within the clock's granularity are not trusted
	l := &engineLocator{Python: py, Env: env, Dir: "/", CacheDir: cache}
	loc, err := l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(site, "demo"), loc.Packages["demo"].Dir)
	assert.Contains(t, loc.SiteDirs, userSite)
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	require.True(t, loc.Cached)

	// Another copy appears in the user site: Python imports that one.
	write(t, filepath.Join(userSite, "demo/__init__.py"), "")
	origin := strings.TrimSpace(runEnv(t, env, py, "-c", "import importlib.util as u; print(u.find_spec('demo').origin)"))
	require.Equal(t, filepath.Join(userSite, "demo/__init__.py"), origin, "python imports the user site's copy")
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.False(t, loc.Cached, "a user site that appeared is an input")
	assert.Equal(t, filepath.Join(userSite, "demo"), loc.Packages["demo"].Dir)

	// Disabled (PYTHONNOUSERSITE), the user site is not on sys.path and
	// not asked about.
	env.Set("PYTHONNOUSERSITE", "1")
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.NotContains(t, loc.SiteDirs, userSite)
	assert.Equal(t, filepath.Join(site, "demo"), loc.Packages["demo"].Dir)
}

// runEnv runs a command in / with exactly env.
func runEnv(t *testing.T, env *environ.Env, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = "/", env.Slice()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// A directory named by a .pth file is added by site only when it exists:
// one that appears later (with the engine in it) is noticed.
func TestLocateCachePthDirAppears(t *testing.T) {
	py, site := venv(t, false)
	later := filepath.Join(t.TempDir(), "checkout", "src")
	write(t, filepath.Join(site, "engine.pth"), "# the engine's checkout\n"+later+"\n")
	cache := t.TempDir()
	time.Sleep(fileid.RacyWindow)
	l := &engineLocator{Python: py, Env: envWith(), Dir: "/", CacheDir: cache}
	loc, err := l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	require.False(t, loc.Packages["demo"].Found)
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	require.True(t, loc.Cached)

	write(t, filepath.Join(later, "demo/__init__.py"), "")
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.False(t, loc.Cached, "the .pth file's directory appeared")
	assert.Equal(t, filepath.Join(later, "demo"), loc.Packages["demo"].Dir)
}

func TestPthDirs(t *testing.T) {
	dir := t.TempDir()
	pth := filepath.Join(dir, "x.pth")
	write(t, pth, "# comment\n\n   \nimport os; os.environ\nimport\tsys\nrel/src  \n/abs/path\n  lead\n")
	assert.Equal(t, []string{filepath.Join(dir, "rel/src"), "/abs/path", filepath.Join(dir, "  lead")}, pthDirs(dir, pth))
}

// newMount gives every file and directory under dir new inodes and change
// times and keeps their sizes, modes and modification times, as a new
// overlay mount of the same image shows them: cp -a, then the copy put in
// the original's place.
func newMount(t *testing.T, dir string) {
	t.Helper()
	run(t, "/", "cp", "-a", dir, dir+".copy")
	require.NoError(t, os.Rename(dir, dir+".old"))
	require.NoError(t, os.Rename(dir+".copy", dir))
	require.NoError(t, os.RemoveAll(dir+".old"))
}

// The cached answer survives a new mount of the same files (an emptyDir
// state directory across container restarts), the interpreter binary
// among them (a venv made with --copies holds its own), but not one where
// a .pth file has other content under the same path, size and mtime.
func TestLocateCacheSurvivesNewMount(t *testing.T) {
	root := filepath.Join(t.TempDir(), "venv")
	run(t, "/", debianPython(t), "-m", "venv", "--copies", "--without-pip", root)
	py := filepath.Join(root, "bin/python")
	if id, _ := fileid.Lstat(py); id.Mode&syscall.S_IFMT != syscall.S_IFREG || id.Size <= fileid.SmallFile {
		t.Fatalf("%s is not a copy of the interpreter binary: %+v", py, id)
	}
	site := strings.TrimSpace(run(t, "/", py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
	a, b := filepath.Join(t.TempDir(), "aaaa"), filepath.Join(t.TempDir(), "bbbb")
	write(t, filepath.Join(a, "demo/__init__.py"), "")
	write(t, filepath.Join(b, "demo/__init__.py"), "")
	pth := filepath.Join(site, "engine.pth")
	write(t, pth, a+"\n")
	time.Sleep(fileid.RacyWindow) // files written within the clock's granularity are not trusted
	l := &engineLocator{Python: py, Env: envWith(), Dir: "/", CacheDir: t.TempDir()}
	first, err := l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	require.False(t, first.Cached)
	require.NotEmpty(t, first.Fingerprint)

	sum, before, _ := fileid.Sum(site, false, nil)
	newMount(t, root)
	sum2, after, _ := fileid.Sum(site, false, nil)
	require.NotEqual(t, before, after, "the copy kept its identity: nothing is tested")
	require.Equal(t, before.Portable(), after.Portable())
	require.Equal(t, sum, sum2)
	loc, err := l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.True(t, loc.Cached, "a new mount of the same files keeps the answer")
	assert.Equal(t, first.Fingerprint, loc.Fingerprint, "and the record's key")

	// A directory copied up to a new container layer (the root, where
	// the runtime adds its files) has a new mtime and the same entries:
	// what it holds for imports is its entries.
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(site, later, later))
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.True(t, loc.Cached, "a directory's mtime alone changes no answer")
	assert.Equal(t, first.Fingerprint, loc.Fingerprint, "nor the record's key")

	fi, err := os.Stat(pth)
	require.NoError(t, err)
	f, err := os.OpenFile(pth, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte(b+"\n"), 0) // same length: same size
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chtimes(pth, fi.ModTime(), fi.ModTime()))
	newMount(t, root)
	now, _ := fileid.Lstat(pth)
	require.Equal(t, fileid.Identity{Size: fi.Size(), Mode: now.Mode, Mtime: fi.ModTime().UnixNano()}, now.Portable())
	loc, err = l.locate(context.Background(), []string{"demo"})
	require.NoError(t, err)
	assert.False(t, loc.Cached, "the .pth file's content differs")
	assert.Equal(t, filepath.Join(b, "demo"), loc.Packages["demo"].Dir)
}

// A ._pth file appearing beside the interpreter, or beside the base
// executable of a venv made with --copies, replaces sys.path: the cached
// answer of the probe is not taken after it.
func TestLocateCacheSeesAPthFile(t *testing.T) {
	// The base installation: a copy of Debian's interpreter in a prefix
	// of its own, whose lib is Debian's.
	debian, err := filepath.EvalSymlinks(debianPython(t))
	require.NoError(t, err)
	base, err := fixture.PythonPrefix(debian, t.TempDir())
	require.NoError(t, err)
	root := filepath.Join(t.TempDir(), "venv")
	run(t, "/", base, "-m", "venv", "--copies", "--without-pip", root)
	py := filepath.Join(root, "bin/python3")
	site := strings.TrimSpace(run(t, "/", py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
	stdlib := strings.TrimSpace(run(t, "/", py, "-c", "import os; print(os.path.dirname(os.__file__))"))
	other := t.TempDir()
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	write(t, filepath.Join(other, "demo/__init__.py"), "")
	time.Sleep(fileid.RacyWindow)
	// The venv's python3 is no link and its home has no python3: getpath
	// takes home's python3.X for the base executable.
	for _, pth := range []string{py + "._pth", base + "._pth"} {
		l := &engineLocator{Python: py, Env: envWith(), Dir: "/", CacheDir: t.TempDir()}
		for i, want := range []bool{false, true} {
			loc, err := l.locate(context.Background(), []string{"demo"})
			require.NoError(t, err)
			require.Equal(t, want, loc.Cached, "locate %d", i+1)
			require.Equal(t, filepath.Join(site, "demo"), loc.Packages["demo"].Dir)
		}
		write(t, pth, strings.Join([]string{stdlib, filepath.Join(stdlib, "lib-dynload"), other}, "\n")+"\n")
		loc, err := l.locate(context.Background(), []string{"demo"})
		require.NoError(t, err)
		assert.False(t, loc.Cached, "cached with %s", pth)
		assert.Equal(t, filepath.Join(other, "demo"), loc.Packages["demo"].Dir, "the interpreter reads %s", pth)
		require.NoError(t, os.Remove(pth))
	}
}

// The resolver's key takes the interpreter binary by its GNU build ID,
// not its bytes: an interpreter too large for a content sum (here the real
// one grown to 65 MiB) still has a key. A new mount of the same binary (a
// new inode and change time, the same size and mtime) keeps the key, so
// that the record holds on a new container's root; a rebuilt one with the
// same size and mtime changes it.
func TestResolvedKeyTakesTheInterpreterByItsBuildID(t *testing.T) {
	out := run(t, "/", python(t), "-c", "import os, sys; print(os.path.dirname(os.__file__)); print(sys.version_info[1]); print(os.path.realpath(sys.executable))")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	stdlib, minor, real := lines[0], lines[1], lines[2]
	binary, id, err := fixture.ELFBuildID(real)
	require.NoError(t, err)
	prefix := t.TempDir()
	version := "3." + minor
	require.NoError(t, os.MkdirAll(filepath.Join(prefix, "lib"), 0o755))
	require.NoError(t, os.Symlink(stdlib, filepath.Join(prefix, "lib", "python"+version)))
	exe := filepath.Join(prefix, "bin", "python"+version)
	makeExe := func(path string, b []byte) {
		write(t, path, string(b))
		require.NoError(t, os.Truncate(path, 65<<20))
		require.NoError(t, os.Chmod(path, 0o755))
	}
	makeExe(exe, binary)
	engine := t.TempDir()
	write(t, filepath.Join(engine, "demo/__init__.py"), "")
	n, _ := strconv.Atoi(minor)
	l := &engineLocator{Python: exe, Env: envWith("PYTHONPATH", engine), Dir: "/", Argv: []string{exe, "-S", "-c", "pass"}, Path: exe, PyMinor: n}
	key := func() string {
		t.Helper()
		names := []string{"demo"}
		loc, why := l.resolve(names, l.settings(names), time.Now())
		require.NotNil(t, loc, why)
		require.Equal(t, filepath.Join(engine, "demo"), loc.Packages["demo"].Dir)
		return loc.Fingerprint
	}
	first := key()
	require.NotEmpty(t, first, "the answer is keyed without reading the interpreter whole")
	assert.Equal(t, first, key(), "nothing changed")

	fi, err := os.Stat(exe)
	require.NoError(t, err)
	before, _ := fileid.Stat(exe)
	remountAs := func(b []byte) {
		t.Helper()
		makeExe(exe+".new", b)
		require.NoError(t, os.Chtimes(exe+".new", fi.ModTime(), fi.ModTime()))
		require.NoError(t, os.Rename(exe+".new", exe))
		after, _ := fileid.Stat(exe)
		require.NotEqual(t, before, after, "the copy kept its identity: nothing is tested")
		require.Equal(t, before.Portable(), after.Portable())
	}
	remountAs(binary)
	assert.Equal(t, first, key(), "a new mount of the same interpreter keeps the key")

	remountAs(fixture.Rebuilt(binary, id))
	assert.NotEqual(t, first, key(), "another build with the same size and mtime changes the key")
}

// Every variable the interpreter reads that changes sys.path or where it
// looks for its venv, the last two even under -E and -I, is part of the
// probe cache's settings: an answer cached without it is not taken with it.
func TestSettingsTakeThePathVariables(t *testing.T) {
	for _, k := range []string{"PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
		"PYTHONPLATLIBDIR", "PYTHONSTARTUP", "HOME", "PYTHONEXECUTABLE", "__PYVENV_LAUNCHER__"} {
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
