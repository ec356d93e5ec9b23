package plan

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pythonMinor is the CPython 3.minor of the test machine's python3.
func pythonMinor(t *testing.T, py string) int {
	t.Helper()
	out, err := exec.Command(py, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])").Output()
	require.NoError(t, err)
	var major, minor int
	_, err = fmt.Sscan(string(out), &major, &minor)
	require.NoError(t, err)
	require.Equal(t, 3, major)
	return minor
}

// The suffixes derived from the CPython minor and the machine are the
// interpreter's own importlib.machinery.EXTENSION_SUFFIXES, in order.
func TestExtensionSuffixesAreThePythons(t *testing.T) {
	py := python(t)
	out, err := exec.Command(py, "-c", "import importlib.machinery as m, json; print(json.dumps(m.EXTENSION_SUFFIXES))").Output()
	require.NoError(t, err)
	var want []string
	require.NoError(t, json.Unmarshal(out, &want))
	assert.Equal(t, want, extensionSuffixes(pythonMinor(t, py), runtime.GOARCH))
}

// The import order the importer follows is CPython's, proven against the
// real interpreter: each case is a tree beside a module demo.sub.mod (and
// its parents), and the file importlib.util.find_spec names must be the
// one the importer names, for every name from the package down.
func TestImporterAgreesWithFindSpec(t *testing.T) {
	py := python(t)
	minor := pythonMinor(t, py)
	ext := extensionSuffixes(minor, runtime.GOARCH)
	other := strings.Replace(ext[0], fmt.Sprintf("-3%d-", minor), fmt.Sprintf("-3%d-", minor+1), 1)
	otherArch := ".cpython-3" + fmt.Sprint(minor) + "-sparc64-linux-gnu.so"
	base := map[string]string{"__init__.py": "", "sub/__init__.py": "", "sub/mod.py": "X = 1\n"}
	cases := []struct {
		name  string
		files map[string]string // added to base ("" content; a trailing / is a directory)
		drop  []string          // removed from base
		links map[string]string // symlinks: name -> target
	}{
		{name: "source alone"},
		{name: "package directory beside it", files: map[string]string{"sub/mod/__init__.py": ""}},
		{name: "package with sourceless init", files: map[string]string{"sub/mod/__init__.pyc": ""}},
		{name: "package with extension init", files: map[string]string{"sub/mod/__init__" + ext[2]: ""}},
		{name: "directory without init", files: map[string]string{"sub/mod/x.txt": ""}},
		{name: "extension: own tag", files: map[string]string{"sub/mod" + ext[0]: ""}},
		{name: "extension: stable ABI", files: map[string]string{"sub/mod" + ext[1]: ""}},
		{name: "extension: bare .so", files: map[string]string{"sub/mod" + ext[2]: ""}},
		{name: "extensions: order", files: map[string]string{"sub/mod" + ext[0]: "", "sub/mod" + ext[1]: "", "sub/mod" + ext[2]: ""}},
		{name: "extensions: abi3 before .so", files: map[string]string{"sub/mod" + ext[1]: "", "sub/mod" + ext[2]: ""}},
		{name: "extension of another minor", files: map[string]string{"sub/mod" + other: ""}},
		{name: "extension of another machine", files: map[string]string{"sub/mod" + otherArch: ""}},
		{name: "sourceless bytecode beside", files: map[string]string{"sub/mod.pyc": ""}},
		{name: "sourceless bytecode alone", files: map[string]string{"sub/mod.pyc": ""}, drop: []string{"sub/mod.py"}},
		{name: "directory named like an extension", files: map[string]string{"sub/mod" + ext[2] + "/": ""}},
		{name: "dangling link named like an extension", links: map[string]string{"sub/mod" + ext[2]: "nowhere"}},
		{name: "link to an extension", files: map[string]string{"real.so": ""}, links: map[string]string{"sub/mod" + ext[1]: "../real.so"}},
		{name: "package init shadowed by an extension init", files: map[string]string{"sub/__init__" + ext[0]: ""}},
		{name: "module beside a package directory", files: map[string]string{"sub.py": ""}},
		{name: "module beside a directory without init", files: map[string]string{"sub.py": ""}, drop: []string{"sub/__init__.py"}},
		{name: "namespace parent", drop: []string{"sub/__init__.py"}},
		{name: "parent not there", drop: []string{"sub/__init__.py", "sub/mod.py"}, files: map[string]string{"other/mod.py": ""}},
	}
	root := t.TempDir()
	var names []string
	for i, c := range cases {
		top := fmt.Sprintf("case%d", i)
		dir := filepath.Join(root, top)
		files := map[string]string{}
		for k, v := range base {
			files[k] = v
		}
		for _, k := range c.drop {
			delete(files, k)
		}
		for k, v := range c.files {
			files[k] = v
		}
		for k, v := range files {
			if strings.HasSuffix(k, "/") {
				require.NoError(t, os.MkdirAll(filepath.Join(dir, k), 0o755))
				continue
			}
			write(t, filepath.Join(dir, k), v)
		}
		for k, v := range c.links {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, k)), 0o755))
			require.NoError(t, os.Symlink(v, filepath.Join(dir, k)))
		}
		names = append(names, top+".sub", top+".sub.mod")
	}
	// find_spec imports the parents (empty __init__ files), never the
	// name asked; a parent that cannot be imported is an error.
	script := `import sys, importlib.util, json
sys.path.insert(0, sys.argv[1])
out = {}
for name in sys.argv[2:]:
    try:
        s = importlib.util.find_spec(name)
    except Exception as e:
        out[name] = "error"
        continue
    if s is None:
        out[name] = "none"
    elif s.origin is None or s.origin == "namespace":
        out[name] = "namespace:" + ",".join(s.submodule_search_locations)
    else:
        out[name] = s.origin
print(json.dumps(out))
`
	cmd := exec.Command(py, append([]string{"-S", "-c", script, root}, names...)...)
	cmd.Env = []string{"PYTHONDONTWRITEBYTECODE=1"}
	out, err := cmd.Output()
	require.NoError(t, err)
	var want map[string]string
	require.NoError(t, json.Unmarshal(out, &want))

	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			top := fmt.Sprintf("case%d", i)
			dir := filepath.Join(root, top)
			pkg := Package{Name: top, Found: true, Dir: dir, Dirs: []string{dir}}
			im := newImporter(minor, nil)
			for _, comps := range [][]string{{"sub"}, {"sub", "mod"}} {
				name := top + "." + strings.Join(comps, ".")
				if len(comps) == 2 && strings.HasSuffix(want[top+".sub"], ".so") {
					// find_spec imports the parent, and the fixture's
					// extension is no ELF: the parent's origin was compared.
					continue
				}
				s, _, bad := im.specOf(pkg, comps)
				got := s.origin
				switch {
				case bad != "":
					got = "error"
				case s.kind == notFound:
					got = "none"
				case s.kind == namespace:
					got = "namespace:" + strings.Join(s.path, ",")
				}
				assert.Equal(t, want[name], got, "%s: python's find_spec and the importer disagree", name)
			}
		})
	}
}

// python is the machine's interpreter; these tests use the real import
// system.
func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	return p
}

func write(t *testing.T, p, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

// What the run itself removes, it forgets: a cached answer is never one
// the run made stale.
func TestTypeCacheForgetsRemovedBytecode(t *testing.T) {
	dir := t.TempDir()
	py := filepath.Join(dir, "m.py")
	pyc := filepath.Join(dir, "__pycache__", "m.cpython-312.pyc")
	write(t, py, "x = 1\n")
	write(t, pyc, "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	stats := countStats(t)

	c := newTypeCache()
	require.True(t, c.isFile(pyc))
	require.True(t, c.isFile(pyc))
	assert.Equal(t, 1, stats[pyc], "asked twice, stat'ed once")

	r := &Result{Edits: []EditResult{{File: "m.py", Path: py, Evaluation: patchdef.Evaluation{State: patchdef.Applied}}}}
	removeAll := func(r *Result, _ func(string) (identity, bool), wrote, dry bool) {
		require.True(t, wrote)
		require.False(t, dry)
		require.NoError(t, os.Remove(pyc))
		r.Edits[0].PycsRemoved = []string{pyc}
	}
	checkBytecode(r, map[string]*target{}, true, false, c, removeAll)
	require.Equal(t, []string{pyc}, r.Edits[0].PycsRemoved)
	assert.False(t, c.isFile(pyc), "removed by the run: stat'ed again")
	assert.Equal(t, 2, stats[pyc])
}

// countStats makes every stat of the importer's go through a counter, by
// path, for the rest of the test.
func countStats(t *testing.T) map[string]int {
	t.Helper()
	n := map[string]int{}
	orig := StatType
	StatType = func(p string) (identity, bool) {
		n[p]++
		return orig(p)
	}
	t.Cleanup(func() { StatType = orig })
	return n
}
