package patches

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// twoVariants is a patch for code that changed shape: "new" for the
// current call, "old" for the call before an argument was added.
func twoVariants(t *testing.T, guards ...patchdef.Guard) *patchdef.Definition {
	t.Helper()
	d := &patchdef.Definition{ID: "moved", Summary: "s", Package: "demo", Distribution: "demo", Guards: guards,
		Variants: []patchdef.Variant{
			{Name: "new", Edits: []patchdef.Edit{{File: "a.py", Anchor: "    send(x, trace)\n", Replacement: "    send(x, trace, wait)\n"}}},
			{Name: "old", Edits: []patchdef.Edit{{File: "a.py", Anchor: "    send(x)\n", Replacement: "    send(x, wait=wait)\n"}}},
		}}
	require.NoError(t, d.Validate())
	return d
}

func TestVariantSelection(t *testing.T) {
	cases := []struct {
		name, content string
		state         patchdef.State
		variant, want string
	}{
		{"first matching variant", "def f():\n    send(x, trace)\n", patchdef.Applied, "new", "def f():\n    send(x, trace, wait)\n"},
		{"later variant when the first does not match", "def f():\n    send(x)\n", patchdef.Applied, "old", "def f():\n    send(x, wait=wait)\n"},
		{"a later variant already in force", "def f():\n    send(x, wait=wait)\n", patchdef.Applied, "old", "def f():\n    send(x, wait=wait)\n"},
		{"no variant matches", "def f():\n    send(y)\n", patchdef.Drift, "new", "def f():\n    send(y)\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			site, loc := pkgTree(t, map[string]string{"a.py": c.content})
			r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{twoVariants(t)}}, loc, options{})[0]
			assert.Equal(t, c.state, r.State, r.Why)
			assert.Equal(t, c.variant, r.Variant)
			assert.Equal(t, c.want, read(t, filepath.Join(site, "demo/a.py")))
			if c.state == patchdef.Drift {
				assert.Contains(t, r.Why, "(no variant matches; closest: new; old is drift: ")
			}
			// A second run changes nothing and names the same variant.
			r2 := applySet(&patchdef.Set{Defs: []*patchdef.Definition{twoVariants(t)}}, loc, options{})[0]
			assert.Equal(t, r.State, r2.State)
			assert.Equal(t, r.Variant, r2.Variant)
			assert.Equal(t, "none", r2.Action)
		})
	}
}

func TestVariantsNeverMix(t *testing.T) {
	// One edit of each variant matches: neither variant matches as a
	// whole, so nothing is written.
	d := &patchdef.Definition{ID: "mix", Summary: "s", Package: "demo", Distribution: "demo", Variants: []patchdef.Variant{
		{Name: "new", Edits: []patchdef.Edit{
			{File: "a.py", Anchor: "    one(x, trace)\n", Replacement: "    one(x, trace, wait)\n"},
			{File: "a.py", Anchor: "    two(x, trace)\n", Replacement: "    two(x, trace, wait)\n"}}},
		{Name: "old", Edits: []patchdef.Edit{
			{File: "a.py", Anchor: "    one(x)\n", Replacement: "    one(x, wait)\n"},
			{File: "a.py", Anchor: "    two(x)\n", Replacement: "    two(x, wait)\n"}}},
	}}
	require.NoError(t, d.Validate())
	content := "def f():\n    one(x, trace)\n    two(x)\n"
	site, loc := pkgTree(t, map[string]string{"a.py": content})
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.Drift, r.State)
	assert.Equal(t, content, read(t, filepath.Join(site, "demo/a.py")))
}

func TestGuardNotApplicableVersusDrift(t *testing.T) {
	guard := patchdef.Guard{File: "a.py", Contains: "def send("}
	cases := []struct {
		name  string
		files map[string]string
		state patchdef.State
		why   string
	}{
		{"guarded file absent", map[string]string{"b.py": "x = 1\n"}, patchdef.NotApplicable, "a.py is absent: the code this fix is about does not exist here"},
		{"guarded code absent", map[string]string{"a.py": "def other():\n    send(y)\n"}, patchdef.NotApplicable, `a.py has no "def send(": the code this fix is about does not exist here`},
		{"code there, anchors not", map[string]string{"a.py": "def send():\n    pass\n\ndef f():\n    send(y)\n"}, patchdef.Drift, "anchor found 0 times and replacement 0 times; expected the anchor 1 times (pending) or the replacement 1 times (applied) (no variant matches; closest: new; old is drift: "},
		{"code there, anchors match", map[string]string{"a.py": "def send():\n    pass\n\ndef f():\n    send(x)\n"}, patchdef.Pending, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, loc := pkgTree(t, c.files)
			r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{twoVariants(t, guard)}}, loc, options{DryRun: true})[0]
			assert.Equal(t, c.state, r.State, r.Why)
			assert.Contains(t, r.Why, c.why)
		})
	}
}

func TestVariantGuardAndVersionRange(t *testing.T) {
	d := &patchdef.Definition{ID: "ranged", Summary: "s", Package: "demo", Distribution: "demo", Variants: []patchdef.Variant{
		{Name: "two", Versions: ">= 2", Edits: []patchdef.Edit{{File: "a.py", Anchor: "    send(x)\n", Replacement: "    send(x, 2)\n"}}},
		{Name: "one", Versions: "< 2", Guards: []patchdef.Guard{{File: "a.py", Contains: "# v1"}}, Edits: []patchdef.Edit{{File: "a.py", Anchor: "    send(x)\n", Replacement: "    send(x, 1)\n"}}},
	}}
	require.NoError(t, d.Validate())
	set := &patchdef.Set{Defs: []*patchdef.Definition{d}}

	// 1.2.0 is outside "two"; "one" applies where its guard holds.
	_, loc := pkgTree(t, map[string]string{"a.py": "# v1\ndef f():\n    send(x)\n"})
	r := applySet(set, loc, options{DryRun: true})[0]
	assert.Equal(t, patchdef.Pending, r.State, r.Why)
	assert.Equal(t, "one", r.Variant)

	// Without the guarded text, both variants are out of scope: not-applicable, not drift.
	_, loc = pkgTree(t, map[string]string{"a.py": "def f():\n    send(x)\n"})
	r = applySet(set, loc, options{DryRun: true})[0]
	assert.Equal(t, patchdef.NotApplicable, r.State)
	assert.Contains(t, r.Why, "demo 1.2.0 is outside >= 2")

	// At 2.1 the first variant is in range.
	_, loc = pkgTree(t, map[string]string{"a.py": "def f():\n    send(x)\n"})
	pkg := loc.Packages["demo"]
	pkg.Version = "2.1.0rc1.dev3+g1.rocm700"
	loc.Packages["demo"] = pkg
	r = applySet(set, loc, options{DryRun: true})[0]
	assert.Equal(t, patchdef.Pending, r.State, r.Why)
	assert.Equal(t, "two", r.Variant)

	// An unknown version cannot be placed in any range: no variant is
	// applied, and the patch is undecided (drift), not "not applicable",
	// which would pass for in force.
	pkg.Version, pkg.VersionWhy = "", "cannot read /site/demo-2.1.dist-info/METADATA: not a regular file"
	loc.Packages["demo"] = pkg
	r = applySet(set, loc, options{})[0]
	assert.Equal(t, patchdef.Drift, r.State)
	assert.Equal(t, "none", r.Action)
	assert.Contains(t, r.Why, "the version of demo is unknown (cannot read /site/demo-2.1.dist-info/METADATA: not a regular file)")
	assert.False(t, r.Ok())
}

func TestSupersededScriptsDoNotRun(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"demo/patch_old_fix.py", "demo/patch_other.py"} {
		p := filepath.Join(dir, f)
		require.NoError(t, mkfile(p, "raise SystemExit(9)\n"))
	}
	d := def(t, "demo-fix", patchdef.Edit{File: "a.py", Anchor: "x", Replacement: "y"})
	d.Supersedes = []string{"patch_old_fix.py"}
	scripts := superseded(legacyScripts(dir), &patchdef.Set{Defs: []*patchdef.Definition{d}})
	require.Len(t, scripts, 2)
	assert.Equal(t, "demo-fix", scripts[0].SupersededBy)
	assert.Empty(t, scripts[1].SupersededBy)

	_, loc := pkgTree(t, map[string]string{"a.py": "x"})
	out := runScripts(context.Background(), scripts, loc, "/nonexistent/python3", nil, 0, true)
	assert.False(t, out[0].Ran)
	assert.Equal(t, "superseded by demo-fix; not run", out[0].Why)
	assert.Equal(t, "would run", out[1].Why)
}

func mkfile(p, content string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o644)
}
