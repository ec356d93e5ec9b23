package pyimport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeIn(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o755))
}

func mkdirsIn(t *testing.T, root string, rels ...string) {
	t.Helper()
	for _, r := range rels {
		require.NoError(t, os.MkdirAll(filepath.Join(root, r), 0o755))
	}
}

func linkIn(t *testing.T, root, rel, target string) {
	t.Helper()
	p := filepath.Join(root, rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.Symlink(target, p))
}

const debianSitePy = `sitepackages.append(os.path.join(prefix, "lib", "python3", "dist-packages"))` + "\n"

// installation writes what getpath and site need of a CPython at prefix:
// bin/python3.X (an ELF header is all that is read), lib/python3.X with
// os.py, site.py (Debian's or upstream's) and lib-dynload.
func installation(t *testing.T, root, prefix, version string, debian bool) {
	t.Helper()
	writeIn(t, root, prefix+"/bin/python"+version, "\x7fELF")
	linkIn(t, root, prefix+"/bin/python3", "python"+version)
	lib := prefix + "/lib/python" + version
	writeIn(t, root, lib+"/os.py", "")
	site := "# upstream\n"
	if debian {
		site = debianSitePy
	}
	writeIn(t, root, lib+"/site.py", site)
	mkdirsIn(t, root, lib+"/lib-dynload")
}

// Debian's python3.11: /usr/local/lib/python3.11/dist-packages, then
// /usr/lib/python3/dist-packages, then the deprecated
// /usr/lib/python3.11/dist-packages; not in name order, which puts
// python3.11 before python3 and /usr/lib before /usr/local.
func TestImageDebianOrder(t *testing.T) {
	root := t.TempDir()
	installation(t, root, "/usr", "3.11", true)
	mkdirsIn(t, root, "usr/lib/python3/dist-packages", "usr/lib/python3.11/dist-packages", "usr/local/lib/python3.11/dist-packages", "usr/lib/python3.11/site-packages")

	r := ResolveImage(root, nil)
	require.Len(t, r.Installations, 1)
	a := r.Installations[0]
	assert.True(t, a.Certain, a.Reason)
	assert.Equal(t, "/usr/bin/python3.11", a.Interpreter)
	assert.Equal(t, []string{
		"/usr/lib/python311.zip", "/usr/lib/python3.11", "/usr/lib/python3.11/lib-dynload",
		"/usr/local/lib/python3.11/dist-packages", "/usr/lib/python3/dist-packages", "/usr/lib/python3.11/dist-packages",
	}, a.SysPath)
}

// A Python built into /usr/local (the python:3.12 images) reads
// site-packages; venvs under /opt come first and, without system site
// packages, see neither the user site nor the base's. The venvs' links
// to their base (/usr/local/bin/python3.12) are resolved inside the root.
func TestImageNonDebianAndVenv(t *testing.T) {
	root := t.TempDir()
	installation(t, root, "/usr/local", "3.12", false)
	mkdirsIn(t, root, "usr/local/lib/python3.12/site-packages", "usr/local/lib/python3.12/dist-packages", "root/.local/lib/python3.12/site-packages")
	writeIn(t, root, "opt/venv/pyvenv.cfg", "home = /usr/local/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n")
	linkIn(t, root, "opt/venv/bin/python3.12", "/usr/local/bin/python3.12")
	mkdirsIn(t, root, "opt/venv/lib/python3.12/site-packages")
	writeIn(t, root, "opt/sys/pyvenv.cfg", "home = /usr/local/bin\ninclude-system-site-packages = True\n")
	linkIn(t, root, "opt/sys/bin/python3", "/usr/local/bin/python3.12")
	mkdirsIn(t, root, "opt/sys/lib/python3.12/site-packages")

	r := ResolveImage(root, nil)
	require.Len(t, r.Installations, 3, "%+v", r)
	for _, a := range r.Installations {
		assert.True(t, a.Certain, a.Reason)
	}
	std := []string{"/usr/local/lib/python312.zip", "/usr/local/lib/python3.12", "/usr/local/lib/python3.12/lib-dynload"}
	assert.Equal(t, "/opt/sys/bin/python3", r.Installations[0].Interpreter)
	assert.Equal(t, append(std, "/opt/sys/lib/python3.12/site-packages", "/root/.local/lib/python3.12/site-packages", "/usr/local/lib/python3.12/site-packages"), r.Installations[0].SysPath)
	assert.Equal(t, "/opt/venv/bin/python3.12", r.Installations[1].Interpreter)
	assert.Equal(t, append(std, "/opt/venv/lib/python3.12/site-packages"), r.Installations[1].SysPath)
	assert.Equal(t, "/usr/local/bin/python3.12", r.Installations[2].Interpreter)
	assert.Equal(t, append(std, "/root/.local/lib/python3.12/site-packages", "/usr/local/lib/python3.12/site-packages"), r.Installations[2].SysPath)
}

// .pth lines are taken inside the root; a line that runs code is named
// in a note and passed over, and the answer is the best one that can be
// read. An absolute link in a site directory leads inside the root, not
// to this machine's file of that name.
func TestImagePthAndNotes(t *testing.T) {
	root := t.TempDir()
	installation(t, root, "/usr", "3.11", true)
	dp := "usr/lib/python3/dist-packages"
	writeIn(t, root, dp+"/b.pth", "# comment\n/src/b\nmissing\n")
	writeIn(t, root, dp+"/a.pth", "rel\n")
	writeIn(t, root, dp+"/c.pth", "import sys; sys.path.insert(0, '/elsewhere')\n")
	mkdirsIn(t, root, "src/b", dp+"/rel")
	writeIn(t, root, "src/b/eng/__init__.py", "")
	writeIn(t, root, "opt/linked/eng2/__init__.py", "")
	linkIn(t, root, dp+"/eng2", "/opt/linked/eng2")
	// The same link target on this machine does not exist: only the
	// root's is found.
	require.NoDirExists(t, "/opt/linked/eng2")

	r := ResolveImage(root, []string{"eng", "eng2"})
	require.Len(t, r.Installations, 1)
	a := r.Installations[0]
	assert.Equal(t, []string{"/usr/lib/python311.zip", "/usr/lib/python3.11", "/usr/lib/python3.11/lib-dynload",
		"/usr/lib/python3/dist-packages", "/usr/lib/python3/dist-packages/rel", "/src/b"}, a.SysPath)
	assert.False(t, a.Certain)
	require.Len(t, a.Notes, 1)
	assert.Contains(t, a.Notes[0], "line 1 of /usr/lib/python3/dist-packages/c.pth runs code at start-up")
	assert.Equal(t, []string{"/src/b/eng"}, a.Specs["eng"].Locations)
	assert.Equal(t, filepath.Join(root, "src/b/eng"), r.Host("/src/b/eng"))
	assert.Equal(t, []string{"/usr/lib/python3/dist-packages/eng2"}, a.Specs["eng2"].Locations)
	assert.Equal(t, filepath.Join(root, "opt/linked/eng2"), r.Host(a.Specs["eng2"].Locations[0]))
}

// A prefix with site directories but no interpreter (a partial root) is
// read from its directories, and says so.
func TestImageWithoutInterpreter(t *testing.T) {
	root := t.TempDir()
	writeIn(t, root, "usr/lib/python3.11/site.py", debianSitePy)
	writeIn(t, root, "usr/lib/python3/dist-packages/eng/__init__.py", "")
	r := ResolveImage(root, []string{"eng"})
	require.Len(t, r.Installations, 1)
	a := r.Installations[0]
	assert.Equal(t, []string{"/usr/lib/python3/dist-packages/eng"}, a.Specs["eng"].Locations)
	assert.False(t, a.Certain)
	assert.Contains(t, a.Reason, "no interpreter of /usr for CPython 3.11 could be placed")
}

// On this machine's own root the search lists no top-level directory but
// /opt and /usr: the others include mounts (a model directory on NFS)
// that a start must not list outside the deadline helper. A venv two
// levels under /tmp is therefore not looked for.
func TestLocalRootListsOnlyOptAndUsr(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "pyimport-venv-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pyvenv.cfg"), []byte("home = /usr/bin\n"), 0o644))
	for _, p := range imagePrefixes(hostFS) {
		assert.True(t, p == "/usr" || p == "/usr/local" || strings.HasPrefix(p, "/opt/"), "%s", p)
	}
}
