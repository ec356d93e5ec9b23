package patches

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

// Issue: a package directory or an extension module beside a patched
// module shadows it, and a start said "applied" while the worker imported
// the unpatched code. Now the patch is shadowed (not in force), the file
// is not written, and the reason names what loads.
func TestShadowedByPackageOrExtension(t *testing.T) {
	edit := patchdef.Edit{File: "sub/mod.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"}
	for _, c := range []struct {
		name, shadow, loads string
	}{
		{"package directory", "sub/mod/__init__.py", "a package directory"},
		{"extension module", "sub/mod.cpython-311-x86_64-linux-gnu.so", "an extension module"},
		{"stable-ABI extension", "sub/mod.abi3.so", "an extension module"},
		{"parent is a module", "sub.py", "which is not a package"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if runtime.GOARCH != "amd64" && strings.Contains(c.shadow, "x86_64") {
				t.Skip("the fixture's tag is x86_64's")
			}
			for _, before := range []string{"    a, _ = x\n", "    a = x[0]\n"} {
				files := map[string]string{"__init__.py": "", "sub/__init__.py": "", "sub/mod.py": before, c.shadow: ""}
				if c.shadow == "sub.py" {
					delete(files, "sub/__init__.py") // a bare directory: the module beside it wins
				}
				site, loc := pkgTree(t, files)
				d := def(t, "hidden", edit)
				for _, dry := range []bool{true, false} {
					r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{DryRun: dry, PyMinor: 11})[0]
					assert.Equal(t, patchdef.Shadowed, r.State, r.Why)
					assert.True(t, r.NotImported)
					assert.False(t, r.Ok())
					assert.Equal(t, "none", r.Action)
					assert.Contains(t, r.Why, c.loads)
					assert.Equal(t, before, read(t, filepath.Join(site, "demo/sub/mod.py")), "nothing written: it would never run")
				}
			}
		})
	}
	// An extension module for another interpreter does not load.
	site, loc := pkgTree(t, map[string]string{"__init__.py": "", "sub/__init__.py": "", "sub/mod.py": "    a, _ = x\n",
		"sub/mod.cpython-312-x86_64-linux-gnu.so": "", "sub/mod.cpython-311-aarch64-linux-gnu.so": ""})
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{def(t, "fine", edit)}}, loc, options{PyMinor: 11})[0]
	if runtime.GOARCH == "amd64" {
		assert.Equal(t, patchdef.Applied, r.State, r.Why)
		assert.Equal(t, "    a = x[0]\n", read(t, filepath.Join(site, "demo/sub/mod.py")))
	}
}

// An edit of a package's __init__.py is shadowed by an extension-module
// __init__ in the same directory.
func TestInitShadowedByExtensionInit(t *testing.T) {
	_, loc := pkgTree(t, map[string]string{"__init__.py": "    a, _ = x\n", "__init__.abi3.so": ""})
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{def(t, "init", patchdef.Edit{File: "__init__.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})}}, loc, options{PyMinor: 11})[0]
	assert.Equal(t, patchdef.Shadowed, r.State)
	assert.Contains(t, r.Why, "import demo loads ")
	assert.Contains(t, r.Why, "__init__.abi3.so, an extension module")
}

// A record of an applied patch does not outlive a shadow that appears
// after it: the names tried before the module are part of the record.
func TestRecordInvalidatedByShadow(t *testing.T) {
	for _, shadow := range []string{"demo/a/__init__.py", "demo/a.cpython-312-x86_64-linux-gnu.so", "demo/a.so"} {
		t.Run(shadow, func(t *testing.T) {
			if runtime.GOARCH != "amd64" && strings.Contains(shadow, "x86_64") {
				t.Skip("the fixture's tag is x86_64's")
			}
			site, set, loc, opt := recorded(t)
			write(t, filepath.Join(site, shadow), "")
			r := applySet(set, loc, opt)[0]
			assert.False(t, r.Recorded, "the record must not be used")
			assert.Equal(t, patchdef.Shadowed, r.State, r.Why)
		})
	}
}
