package shadowtree

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// image is a site directory with a package laid out as an engine's: a
// module to patch two levels down, its bytecode and a sibling's, package
// data, an extension-module-like file, a subpackage, and the
// distribution's dist-info beside it.
func image(t *testing.T) (site, pkg string) {
	site = t.TempDir()
	pkg = filepath.Join(site, "eng")
	files := map[string]string{
		"__init__.py":          "",
		"data.txt":             "package data\n",
		"_C.abi3.so":           "not really ELF",
		"sub/__init__.py":      "",
		"sub/conn/__init__.py": "",
		"sub/conn/mod.py":      "VALUE = 'image'\n",
		"sub/conn/other.py":    "OTHER = 1\n",
		"sub/conn/__pycache__/mod.cpython-311.pyc":   "stale",
		"sub/conn/__pycache__/other.cpython-311.pyc": "fine",
		"sub/conn/res/a.json":                        "{}",
		"side/__init__.py":                           "SIDE = 1\n",
	}
	for rel, content := range files {
		p := filepath.Join(pkg, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	di := filepath.Join(site, "eng-1.2.3.dist-info")
	require.NoError(t, os.MkdirAll(di, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(di, "METADATA"), []byte("Metadata-Version: 2.1\nName: eng\nVersion: 1.2.3\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(di, "RECORD"), []byte("eng/sub/conn/mod.py,,\n"), 0o644))
	return site, pkg
}

func TestEnsureMirrorsThePackageWithCopiesOnlyWhereAsked(t *testing.T) {
	_, pkg := image(t)
	parent := t.TempDir()
	s := Spec{Pkg: pkg, Name: "eng", Files: []string{"sub/conn/mod.py", "sub/conn/absent.py"}, Beside: []string{"eng-1.2.3.dist-info"}}
	tr, err := Ensure(parent, s)
	require.NoError(t, err)
	assert.False(t, tr.Reused)
	assert.Equal(t, []string{"sub/conn/mod.py"}, tr.Copied, "an absent file is left out")
	assert.Equal(t, filepath.Join(tr.Root, "eng"), tr.Dir)

	kind := func(rel string) string {
		st, err := os.Lstat(filepath.Join(tr.Dir, rel))
		if err != nil {
			return "absent"
		}
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(filepath.Join(tr.Dir, rel))
			require.Equal(t, filepath.Join(pkg, rel), target, rel)
			return "link"
		case st.IsDir():
			return "dir"
		}
		return "file"
	}
	for rel, want := range map[string]string{
		".":                    "dir",
		"__init__.py":          "link",
		"data.txt":             "link",
		"_C.abi3.so":           "link",
		"side":                 "link",
		"sub":                  "dir",
		"sub/__init__.py":      "link",
		"sub/conn":             "dir",
		"sub/conn/mod.py":      "file",
		"sub/conn/other.py":    "link",
		"sub/conn/res":         "link",
		"sub/conn/__pycache__": "dir",
		"sub/conn/__pycache__/other.cpython-311.pyc": "link",
		"sub/conn/__pycache__/mod.cpython-311.pyc":   "absent",
	} {
		assert.Equal(t, want, kind(rel), rel)
	}
	b, err := os.ReadFile(filepath.Join(tr.Dir, "sub/conn/mod.py"))
	require.NoError(t, err)
	assert.Equal(t, "VALUE = 'image'\n", string(b))
	st, err := os.Stat(filepath.Join(tr.Dir, "sub/conn/mod.py"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
	target, err := os.Readlink(filepath.Join(tr.Root, "eng-1.2.3.dist-info"))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(filepath.Dir(pkg), "eng-1.2.3.dist-info"), target)

	// The same inputs: the same tree, as it is (a patch written into it stays).
	require.NoError(t, os.WriteFile(filepath.Join(tr.Dir, "sub/conn/mod.py"), []byte("VALUE = 'patched'\n"), 0o644))
	again, err := Ensure(parent, s)
	require.NoError(t, err)
	assert.True(t, again.Reused)
	assert.Equal(t, tr.Root, again.Root)

	// The image's file changes (another engine build): another tree.
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(pkg, "sub/conn/mod.py"), later, later))
	moved, err := Ensure(parent, s)
	require.NoError(t, err)
	assert.False(t, moved.Reused)
	assert.NotEqual(t, tr.Root, moved.Root)
	// So does a new entry in a directory the tree makes real.
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "sub/conn/new.py"), nil, 0o644))
	grown, err := Ensure(parent, s)
	require.NoError(t, err)
	assert.NotEqual(t, moved.Root, grown.Root)
	assert.Equal(t, "link", kind2(t, grown.Dir, "sub/conn/new.py"))

	// Nothing of the image changed, and no temporary directory is left.
	ents, err := os.ReadDir(parent)
	require.NoError(t, err)
	for _, e := range ents {
		assert.False(t, strings.Contains(e.Name(), ".tmp-"), e.Name())
	}
	b, err = os.ReadFile(filepath.Join(pkg, "sub/conn/mod.py"))
	require.NoError(t, err)
	assert.Equal(t, "VALUE = 'image'\n", string(b))
}

func kind2(t *testing.T, dir, rel string) string {
	st, err := os.Lstat(filepath.Join(dir, rel))
	require.NoError(t, err)
	if st.Mode()&os.ModeSymlink != 0 {
		return "link"
	}
	return "other"
}

func TestEnsureRefusesWhatIsNotItsOwn(t *testing.T) {
	_, pkg := image(t)
	parent := t.TempDir()
	s := Spec{Pkg: pkg, Name: "eng", Files: []string{"sub/conn/mod.py"}}
	tr, err := Ensure(parent, s)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(tr.Root, 0o777))
	_, err = Ensure(parent, s)
	require.ErrorContains(t, err, "is not infera-exec's own")
	require.NoError(t, os.Chmod(tr.Root, 0o755))

	_, err = Ensure(parent, Spec{Pkg: pkg, Name: "eng", Files: []string{"nothing.py"}})
	require.ErrorContains(t, err, "none of the files to copy is there")
	_, err = Ensure(parent, Spec{Pkg: "relative", Name: "eng", Files: []string{"x.py"}})
	require.Error(t, err)
}

// The interpreter with the tree first on sys.path imports the copy, and
// everything else of the package through the links: submodules, package
// data relative to __file__, the distribution's metadata, whose files
// resolve into the tree.
func TestPythonImportsTheCopyAndTheRestUnchanged(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3 (apt-get install python3)")
	}
	site, pkg := image(t)
	tr, err := Ensure(t.TempDir(), Spec{Pkg: pkg, Name: "eng", Files: []string{"sub/conn/mod.py"}, Beside: []string{"eng-1.2.3.dist-info"}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(tr.Dir, "sub/conn/mod.py"), []byte("VALUE = 'patched'\n"), 0o644))
	script := `import sys, os, importlib.metadata as md
import eng.sub.conn.mod as m, eng.sub.conn.other as o, eng.side as s
print("value", m.VALUE)
print("file", m.__file__)
print("other", o.OTHER, o.__file__)
print("side", s.SIDE)
print("data", open(os.path.join(os.path.dirname(__import__("eng").__file__), "data.txt")).read().strip())
print("version", md.version("eng"))
print("record", [str(f.locate()) for f in md.files("eng")][0])
`
	cmd := exec.Command(python, "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+tr.Root+":"+site, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := string(out)
	assert.Contains(t, got, "value patched\n")
	assert.Contains(t, got, "file "+filepath.Join(tr.Dir, "sub/conn/mod.py")+"\n")
	assert.Contains(t, got, "other 1 "+filepath.Join(tr.Dir, "sub/conn/other.py")+"\n")
	assert.Contains(t, got, "side 1\n")
	assert.Contains(t, got, "data package data\n")
	assert.Contains(t, got, "version 1.2.3\n")
	assert.Contains(t, got, "record "+filepath.Join(tr.Root, "eng/sub/conn/mod.py"))

	// Without the tree on the path: the image's file.
	cmd = exec.Command(python, "-c", "import eng.sub.conn.mod as m; print(m.VALUE)")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+site)
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "image\n", string(out))
}

// An extension module linked in a directory the tree makes real, whose
// RUNPATH climbs out of the package through $ORIGIN, is named: through the
// link the loader looks beside the tree. One whose $ORIGIN stays inside
// the package is not.
func TestEnsureNamesExtensionsWhoseOriginLeavesThePackage(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("needs a C compiler (apt-get install gcc libc6-dev)")
	}
	_, pkg := image(t)
	src := filepath.Join(t.TempDir(), "e.c")
	require.NoError(t, os.WriteFile(src, []byte("int e(void){return 1;}\n"), 0o644))
	for name, rpath := range map[string]string{"_out.abi3.so": "$ORIGIN/../torch/lib", "_in.abi3.so": "$ORIGIN/libs", "_abs.so": "/opt/x/lib"} {
		out, err := exec.Command(cc, "-shared", "-fPIC", "-o", filepath.Join(pkg, name), src, "-Wl,-rpath,"+rpath, "-Wl,--enable-new-dtags").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	tr, err := Ensure(t.TempDir(), Spec{Pkg: pkg, Name: "eng", Files: []string{"sub/conn/mod.py"}})
	require.NoError(t, err)
	require.Len(t, tr.Notes, 1, "%q", tr.Notes)
	assert.Contains(t, tr.Notes[0], filepath.Join(pkg, "_out.abi3.so")+" searches $ORIGIN/../torch/lib, out of the package")
}

func TestSweepRemovesOnlyOldHalfBuiltTreesOfItsOwn(t *testing.T) {
	parent := t.TempDir()
	old := time.Now().Add(-2 * StaleAfter)
	mk := func(name string, dir bool, age time.Time) {
		p := filepath.Join(parent, name)
		if dir {
			require.NoError(t, os.MkdirAll(filepath.Join(p, "eng"), 0o755))
		} else {
			require.NoError(t, os.WriteFile(p, nil, 0o644))
		}
		require.NoError(t, os.Chtimes(p, age, age))
	}
	mk(".eng-abc.tmp-1", true, old)        // left by a killed start: removed
	mk(".eng-abc.tmp-2", true, time.Now()) // another start building now: kept
	mk("eng-abc", true, old)               // a whole tree: kept
	mk(".eng-abc.tmp-3", false, old)       // not a directory: kept
	require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(parent, ".eng-abc.tmp-4")))
	assert.Equal(t, []string{".eng-abc.tmp-1"}, Sweep(parent))
	for _, n := range []string{".eng-abc.tmp-2", "eng-abc", ".eng-abc.tmp-3", ".eng-abc.tmp-4"} {
		_, err := os.Lstat(filepath.Join(parent, n))
		assert.NoError(t, err, n)
	}
}
