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

	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
	dirs, named := pthDirs(dir, pth)
	assert.True(t, named)
	assert.Equal(t, []string{filepath.Join(dir, "rel/src"), "/abs/path", filepath.Join(dir, "  lead")}, dirs)
	write(t, pth, "/abs/path\n# caf\xe9 in a comment\n")
	_, named = pthDirs(dir, pth)
	assert.True(t, named, "a comment names nothing")
	write(t, pth, "/abs/path\ncaf\xe9\n")
	_, named = pthDirs(dir, pth)
	assert.False(t, named)
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

// A .pth line naming a directory with bytes outside ASCII names the one
// the interpreter decodes it to in the worker's locale, which the cache
// cannot hold absent by its bytes: such an answer is not cached, and
// every start asks again. An ASCII one is (the control).
func TestLocateCacheNotWithANonASCIIPthLine(t *testing.T) {
	for _, c := range []struct {
		line   string
		cached bool
	}{{"/nonexistent/cafe", true}, {"/nonexistent/caf\u00e9", false}} {
		py, site := venv(t, false)
		write(t, filepath.Join(site, "demo/__init__.py"), "")
		write(t, filepath.Join(site, "extra.pth"), c.line+"\n")
		cache := t.TempDir()
		time.Sleep(fileid.RacyWindow)
		l := &engineLocator{Python: py, Env: envWith("LC_ALL", "C.UTF-8"), Dir: "/", CacheDir: cache}
		loc, err := l.locate(context.Background(), []string{"demo"})
		require.NoError(t, err)
		require.True(t, loc.Packages["demo"].Found)
		loc, err = l.locate(context.Background(), []string{"demo"})
		require.NoError(t, err)
		assert.Equal(t, c.cached, loc.Cached, "%q", c.line)
		assert.Equal(t, c.cached, loc.Fingerprint != "", "%q: a fingerprint (the record's key) only for a cacheable answer", c.line)
	}
}
