package sitepath

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

func mkdirs(t *testing.T, root string, rels ...string) {
	t.Helper()
	for _, r := range rels {
		require.NoError(t, os.MkdirAll(filepath.Join(root, r), 0o755))
	}
}

const debianSitePy = `sitepackages.append(os.path.join(prefix, "lib", "python3", "dist-packages"))` + "\n"

// Debian's python3.11: /usr/local/lib/python3.11/dist-packages, then
// /usr/lib/python3/dist-packages, then the deprecated
// /usr/lib/python3.11/dist-packages; not in name order, which puts
// python3.11 before python3 and /usr/lib before /usr/local.
func TestDebianOrder(t *testing.T) {
	root := t.TempDir()
	write(t, root, "usr/lib/python3.11/os.py", "")
	write(t, root, "usr/lib/python3.11/site.py", debianSitePy)
	mkdirs(t, root, "usr/lib/python3.11/lib-dynload", "usr/lib/python3/dist-packages", "usr/lib/python3.11/dist-packages", "usr/local/lib/python3.11/dist-packages", "usr/lib/python3.11/site-packages")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	require.NoError(t, os.Symlink("python3.11", filepath.Join(root, "usr/bin/python3")))

	ins := Find(root)
	require.Len(t, ins, 1)
	assert.Equal(t, Interpreter{Prefix: "/usr", Base: "/usr", Version: "3.11", Debian: true, PlatLibDir: "lib"}, ins[0])
	assert.Equal(t, []string{"/usr/local/lib/python3.11/dist-packages", "/usr/lib/python3/dist-packages", "/usr/lib/python3.11/dist-packages"}, ins[0].PrefixSites("/usr"))
}

// A Python built into /usr/local (the python:3.12 images) reads
// site-packages; a venv under /opt comes first and, without system site
// packages, sees neither the user site nor the base's.
func TestNonDebianAndVenv(t *testing.T) {
	root := t.TempDir()
	write(t, root, "usr/local/lib/python3.12/os.py", "")
	write(t, root, "usr/local/lib/python3.12/site.py", "# upstream\n")
	mkdirs(t, root, "usr/local/lib/python3.12/site-packages", "usr/local/lib/python3.12/dist-packages", "root/.local/lib/python3.12/site-packages")
	write(t, root, "opt/venv/pyvenv.cfg", "home = /usr/local/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n")
	mkdirs(t, root, "opt/venv/lib/python3.12/site-packages")
	write(t, root, "opt/sys/pyvenv.cfg", "home = /usr/local/bin\ninclude-system-site-packages = True\n")
	mkdirs(t, root, "opt/sys/lib/python3.12/site-packages")

	ins := Find(root)
	require.Len(t, ins, 3)
	assert.Equal(t, "/opt/sys", ins[0].Prefix)
	assert.Equal(t, "/opt/venv", ins[1].Prefix)
	assert.Equal(t, "/usr/local", ins[2].Prefix)
	assert.Equal(t, "/usr/local", ins[1].Base)
	assert.False(t, ins[1].SystemSite)
	assert.True(t, ins[0].SystemSite)
	assert.Equal(t, []string{"/usr/local/lib/python312.zip", "/usr/local/lib/python3.12", "/usr/local/lib/python3.12/lib-dynload"}, ins[2].StdLib())
	assert.Equal(t, []string{"/opt/venv/lib/python3.12/site-packages"}, ins[1].PrefixSites("/opt/venv"))
}

// Debian's python3-numpy leaves numpy/core/_multiarray_umath...so in
// /usr/lib/python3.11/dist-packages, a directory without __init__: the
// regular package in /usr/lib/python3/dist-packages is what imports,
// wherever the stray copy stands on the path.
func TestResolveRegularBeatsNamespacePortions(t *testing.T) {
	root := t.TempDir()
	stray, real := filepath.Join(root, "a"), filepath.Join(root, "b")
	write(t, stray, "numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so", "")
	write(t, real, "numpy/__init__.py", "")
	f := Resolve([]string{stray, real}, "numpy", "3.11")
	assert.Equal(t, Regular, f.Kind)
	assert.Equal(t, filepath.Join(real, "numpy"), f.Path)
	assert.Equal(t, []string{filepath.Join(stray, "numpy")}, f.Others)

	// Portions only: a namespace package of all of them.
	write(t, real, "ns/x.py", "")
	mkdirs(t, stray, "ns")
	f = Resolve([]string{stray, real}, "ns", "3.11")
	assert.Equal(t, Namespace, f.Kind)
	assert.Equal(t, []string{filepath.Join(stray, "ns"), filepath.Join(real, "ns")}, f.Portions)

	// A module file in an earlier entry wins over a later package; an
	// extension module for another CPython does not count.
	write(t, stray, "six.py", "")
	write(t, real, "six/__init__.py", "")
	assert.Equal(t, filepath.Join(stray, "six.py"), Resolve([]string{stray, real}, "six", "3.11").Path)
	write(t, stray, "ext.cpython-312-x86_64-linux-gnu.so", "")
	write(t, real, "ext.cpython-311-x86_64-linux-gnu.so", "")
	assert.Equal(t, filepath.Join(real, "ext.cpython-311-x86_64-linux-gnu.so"), Resolve([]string{stray, real}, "ext", "3.11").Path)
	assert.Equal(t, NotFound, Resolve([]string{stray, real}, "absent", "").Kind)
}
