package patches

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/stretchr/testify/assert"
)

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
