package patchdef

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const goodDef = `
id = "demo-fix"
summary = "fix the demo"
package = "demo"
distribution = "demo-pkg"
versions = ">= 1.0, < 2"

[[edit]]
file = "sub/mod.py"
anchor = '''
    a, _ = x
'''
replacement = '''
    a = x[0]
'''
`

func TestParseGood(t *testing.T) {
	d, err := Parse([]byte(goodDef), "t.toml")
	require.NoError(t, err)
	assert.Equal(t, "demo-fix", d.ID)
	assert.Equal(t, "demo", d.Package)
	require.Len(t, d.Edits, 1)
	assert.Equal(t, 1, d.Edits[0].Count, "count defaults to 1")
	assert.Equal(t, "    a, _ = x\n", d.Edits[0].Anchor, "the newline after ''' is dropped, indentation kept")
	in, _ := d.InScope("1.4.2")
	assert.True(t, in)
	in, why := d.InScope("2.0.0")
	assert.False(t, in)
	assert.Contains(t, why, "demo-pkg 2.0.0 is outside >= 1.0, < 2")
	in, _ = d.InScope("1.9.0rc2.dev161+g6a6bd8ad3.rocm700")
	assert.True(t, in, "PEP 440 local and dev parts are compared by release")
	in, why = d.InScope("")
	assert.False(t, in)
	assert.Contains(t, why, "the version of demo-pkg is unknown")
	st, why := d.Scope("", "cannot read /x/METADATA: not a regular file")
	assert.Equal(t, Drift, st, "a range that cannot be checked is undecided, never not-applicable")
	assert.Contains(t, why, "(cannot read /x/METADATA: not a regular file), so the range >= 1.0, < 2 cannot be checked; not applied")
	st, _ = d.Scope("main", "")
	assert.Equal(t, Drift, st)
	st, _ = d.Scope("2.0.0", "")
	assert.Equal(t, NotApplicable, st)
}

func TestParseRejects(t *testing.T) {
	edit := func(file, anchor, repl string, extra string) string {
		return "id = \"x\"\nsummary = \"s\"\npackage = \"demo\"\ndistribution = \"demo\"\n" + extra +
			"[[edit]]\nfile = \"" + file + "\"\nanchor = \"" + anchor + "\"\nreplacement = \"" + repl + "\"\n"
	}
	variants := func(body string) string {
		return "id = \"x\"\nsummary = \"s\"\npackage = \"demo\"\ndistribution = \"demo\"\n" + body
	}
	cases := []struct {
		name, toml, want string
	}{
		{"malformed", "id = ", "t.toml"},
		{"unknown key", edit("a.py", "x", "y", "") + "anchr = \"z\"\n", "unknown keys edit.anchr"},
		{"dotdot", edit("../other/a.py", "x", "y", ""), "must stay inside the package directory"},
		{"dotdot inside", edit("a/../../b.py", "x", "y", ""), "clean relative path"},
		{"absolute", edit("/usr/lib/a.py", "x", "y", ""), "relative to the package directory"},
		{"empty anchor", edit("a.py", "", "y", ""), "anchor is empty"},
		{"empty replacement", edit("a.py", "x", "", ""), "replacement is empty"},
		{"same", edit("a.py", "x", "x", ""), "replacement equals the anchor"},
		{"bad id", `id = "Bad Id"` + "\n", `id "Bad Id"`},
		{"bad package", edit("a.py", "x", "y", "") + "\n", ""},
		{"bad versions", edit("a.py", "x", "y", "versions = \"~~1\"\n"), "versions \"~~1\""},
		{"no edit", "id = \"x\"\nsummary = \"s\"\npackage = \"demo\"\ndistribution = \"demo\"\n", "no [[edit]] and no [[variant]]"},
		{"edits and variants", edit("a.py", "x", "y", "") + "[[variant]]\nname = \"v\"\n[[variant.edit]]\nfile = \"a.py\"\nanchor = \"x\"\nreplacement = \"y\"\n", "both [[edit]] and [[variant]]"},
		{"variant without edits", variants("[[variant]]\nname = \"v\"\n"), "variant 1 (v): no [[variant.edit]]"},
		{"variant without name", variants("[[variant]]\n[[variant.edit]]\nfile = \"a.py\"\nanchor = \"x\"\nreplacement = \"y\"\n"), "variant 1: name \"\""},
		{"variant names twice", variants(strings.Repeat("[[variant]]\nname = \"v\"\n[[variant.edit]]\nfile = \"a.py\"\nanchor = \"x\"\nreplacement = \"y\"\n", 2)), "variant 2: name \"v\" is used twice"},
		{"variant bad versions", variants("[[variant]]\nname = \"v\"\nversions = \"~~1\"\n[[variant.edit]]\nfile = \"a.py\"\nanchor = \"x\"\nreplacement = \"y\"\n"), "variant 1 (v): versions \"~~1\""},
		{"variant edit leaves", variants("[[variant]]\nname = \"v\"\n[[variant.edit]]\nfile = \"../a.py\"\nanchor = \"x\"\nreplacement = \"y\"\n"), "variant v: edit 1 (../a.py): file must stay inside"},
		{"guard leaves", edit("a.py", "x", "y", "[[guard]]\nfile = \"/etc/passwd\"\n"), "guard 1 (/etc/passwd): file must be relative"},
		{"guard unknown key", edit("a.py", "x", "y", "[[guard]]\nfile = \"a.py\"\nhas = \"z\"\n"), "unknown keys guard.has"},
		{"supersedes a path", edit("a.py", "x", "y", "supersedes = [\"../x.py\"]\n"), "want the file name of a patch script"},
		{"negative count", edit("a.py", "x", "y", "") + "count = -1\n", "count -1 is negative"},
		{"marker in anchor", edit("a.py", "x_marker", "y", "") + "upstream = \"marker\"\n", "upstream marker occurs in the anchor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "bad package" {
				c.toml = "id = \"x\"\nsummary = \"s\"\npackage = \"vllm.distributed\"\ndistribution = \"vllm\"\n[[edit]]\nfile = \"a.py\"\nanchor = \"x\"\nreplacement = \"y\"\n"
				c.want = `package "vllm.distributed" is not a top-level import name`
			}
			_, err := Parse([]byte(c.toml), "t.toml")
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "t.toml", "the error names the file")
		})
	}
}

func TestMergeAndDuplicates(t *testing.T) {
	a, err := Parse([]byte(goodDef), "builtin:demo/a.toml")
	require.NoError(t, err)
	b, err := Parse([]byte(goodDef), "payload/demo/a.toml")
	require.NoError(t, err)
	s, err := Merge([]*Definition{a}, []*Definition{b})
	require.NoError(t, err)
	require.Len(t, s.Defs, 1)
	assert.Equal(t, "payload/demo/a.toml", s.Defs[0].Source, "the payload's definition replaces the built-in one")
	assert.Contains(t, s.Notes[0], "replaces the built-in definition of demo-fix")

	_, err = Merge(nil, []*Definition{a, b})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `patch id "demo-fix" is defined twice: builtin:demo/a.toml and payload/demo/a.toml`)
}

func TestLoadDirAndLoad(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "demo"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "demo", "fix.toml"), []byte(goodDef), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "demo", "legacy.py"), []byte("print(1)\n"), 0o755))
	defs, _, err := loadDir(dir)
	require.NoError(t, err)
	require.Len(t, defs, 1)
	assert.Equal(t, filepath.Join(dir, "demo/fix.toml"), defs[0].Source)

	// A definition under the wrong import-name directory is refused.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "other"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other", "fix2.toml"), []byte(goodDef), 0o644))
	_, _, err = loadDir(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `package "demo" lives under demo/, not other/`)

	defs, _, err = loadDir(filepath.Join(dir, "missing"))
	require.NoError(t, err)
	assert.Empty(t, defs)
}

func TestParseVariants(t *testing.T) {
	d, err := Parse([]byte(`id = "v"
summary = "s"
package = "demo"
distribution = "demo"
supersedes = ["patch_demo.py"]
[[guard]]
file = "a.py"
contains = "def f("
[[variant]]
name = "new"
versions = ">= 2"
[[variant.edit]]
file = "a.py"
anchor = "x"
replacement = "y"
[[variant]]
name = "old"
[[variant.guard]]
file = "b.py"
[[variant.edit]]
file = "a.py"
anchor = "z"
replacement = "y"
count = 2
`), "t.toml")
	require.NoError(t, err)
	require.Len(t, d.Variants, 2)
	assert.Equal(t, "new", d.Variants[0].Name)
	assert.NotNil(t, d.Variants[0].constraint)
	assert.Equal(t, []Guard{{File: "b.py"}}, d.Variants[1].Guards)
	assert.Equal(t, 1, d.Variants[0].Edits[0].Count, "count defaults to 1 in variants too")
	assert.Equal(t, 2, d.Variants[1].Edits[0].Count)
	assert.Equal(t, []Guard{{File: "a.py", Contains: "def f("}}, d.Guards)
	set := &Set{Defs: []*Definition{d}}
	assert.Equal(t, "v", set.Supersede("/p/patches/demo/patch_demo.py", "demo"))
	assert.Equal(t, "", set.Supersede("/p/patches/other/patch_demo.py", "other"), "only scripts of the same package")
	assert.Equal(t, "", set.Supersede("/p/patches/demo/patch_else.py", "demo"))
}

func TestBuiltinDefinitionsParse(t *testing.T) {
	defs, err := Builtin()
	require.NoError(t, err)
	set, err := Merge(defs, nil)
	require.NoError(t, err)
	for _, d := range set.Defs {
		assert.NotEmpty(t, d.Summary, d.ID)
		assert.Contains(t, []string{"vllm", "sglang", "atom"}, d.Package, d.ID)
	}
}

// A built-in patch meets engine releases older than the code it fixes. A
// guard naming that code is what makes it not-applicable there; without
// one, a missing anchor reads as drift (exit 65 from --check, a warning on
// every start) on a release that never had the bug. A guard must also
// still hold once the patch is applied, or an applied file would read as
// not-applicable.
func TestBuiltinDefinitionsHaveGuards(t *testing.T) {
	defs, err := Builtin()
	require.NoError(t, err)
	for _, d := range defs {
		assert.Empty(t, d.Unguarded(), "%s: variants no guard names the code the fix is about", d.ID)
		for _, v := range d.EditSets() {
			guards := append(append([]Guard{}, d.Guards...), v.Guards...)
			for _, g := range guards {
				for _, e := range v.Edits {
					if e.File == g.File && g.Contains != "" && strings.Contains(e.Anchor, g.Contains) {
						assert.Contains(t, e.Replacement, g.Contains,
							"%s, variant %q: the edit of %s removes the guard's %q, so an applied file would read as not-applicable", d.ID, v.Name, e.File, g.Contains)
					}
				}
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(goodDef))
	f.Add([]byte("id = \"x\"\n[[edit]]\nfile = \"../a\"\n"))
	f.Add([]byte("[[edit]]\n[[edit]]\ncount = 99999999999999999999\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data, "fuzz.toml")
		if err != nil {
			return
		}
		// Whatever parses is safe to apply: relative, clean, inside the
		// package, with real anchors.
		var edits []Edit
		for _, v := range d.EditSets() {
			edits = append(edits, v.Edits...)
		}
		for _, e := range edits {
			if filepath.IsAbs(e.File) || e.File == ".." || len(e.File) >= 3 && e.File[:3] == "../" || filepath.Clean(e.File) != e.File {
				t.Fatalf("unsafe file accepted: %q", e.File)
			}
			if e.Anchor == "" || e.Replacement == "" || e.Count < 1 {
				t.Fatalf("edit accepted without anchor, replacement or count: %+v", e)
			}
		}
		for _, g := range d.Guards {
			if filepath.IsAbs(g.File) || filepath.Clean(g.File) != g.File || strings.HasPrefix(g.File, "..") {
				t.Fatalf("unsafe guard file accepted: %q", g.File)
			}
		}
		if !idRE().MatchString(d.ID) || len(edits) == 0 {
			t.Fatalf("definition accepted with id %q and %d edits", d.ID, len(edits))
		}
	})
}

// Definitions are read from <import-name>/*.toml only; anything else that
// looks like one is listed, since a start would silently not read it.
func TestStray(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"vllm/ok.toml", "fix.toml", "vllm/deep/x.toml", "vllm/notes.txt"} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), nil, 0o644))
	}
	stray, err := Stray(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"fix.toml", "vllm/deep/x.toml"}, stray)

	stray, err = Stray(filepath.Join(dir, "missing"))
	assert.Error(t, err)
	assert.Empty(t, stray)
}

func TestUnguarded(t *testing.T) {
	d, err := Parse([]byte(goodDef), "demo.toml")
	require.NoError(t, err)
	assert.Equal(t, []string{""}, d.Unguarded(), "a definition without variants or guards")

	d.Guards = []Guard{{File: "sub/mod.py"}}
	assert.Empty(t, d.Unguarded())

	d.Guards = nil
	d.Variants = []Variant{{Name: "a", Guards: []Guard{{File: "x.py"}}}, {Name: "b"}}
	assert.Equal(t, []string{"b"}, d.Unguarded())
}

func TestParseRejectsOverlappingVariants(t *testing.T) {
	head := "id = \"x\"\nsummary = \"s\"\npackage = \"demo\"\ndistribution = \"demo\"\n"
	variant := func(name, anchor string) string {
		return "[[variant]]\nname = \"" + name + "\"\n[[variant.edit]]\nfile = \"a.py\"\nanchor = '''\n" + anchor + "'''\nreplacement = '''\n# fixed\n'''\n"
	}
	// The second variant's anchor is a piece of the first's: a file in the
	// first's form matches both.
	_, err := Parse([]byte(head+variant("long", "def f():\n    x = 1\n    return x\n")+variant("short", "    x = 1\n")), "t.toml")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "variants long and short overlap")
	// Disjoint anchors are fine, and so are variants kept apart by their
	// version ranges.
	_, err = Parse([]byte(head+variant("new", "def f():\n    x = 2\n")+variant("old", "def f():\n    x = 1\n")), "t.toml")
	require.NoError(t, err)
	ranged := strings.Replace(head+variant("long", "def f():\n    x = 1\n")+variant("short", "    x = 1\n"), "name = \"short\"\n", "name = \"short\"\nversions = \"< 1\"\n", 1)
	_, err = Parse([]byte(ranged), "t.toml")
	require.NoError(t, err)
}

func TestParseUpstreamAndLegacy(t *testing.T) {
	base := "id = \"x\"\nsummary = \"s\"\npackage = \"demo\"\ndistribution = \"demo\"\n[[edit]]\nfile = \"a.py\"\nanchor = \"x = 1\"\nreplacement = \"x = 2\"\n"
	d, err := Parse([]byte(base+"site = \"def f(\"\nlegacy_marker = \"FIXED-BY-SCRIPT\"\nlegacy_script = \"patch_x.py\"\n[upstream]\nissue = \"none found\"\npr = \"none found\"\ndrop = \"upstream assigns 2\"\n"), "t.toml")
	require.NoError(t, err)
	assert.Equal(t, "upstream issue none found, PR none found; drop when upstream assigns 2", d.Status.String())
	for _, c := range []struct{ extra, want string }{
		{"legacy_marker = \"m\"\n", "legacy_marker and legacy_script go together"},
		{"legacy_marker = \"x\"\nlegacy_script = \"p.py\"\n", "legacy marker occurs in the anchor"},
		{"legacy_marker = \"m\"\nlegacy_script = \"../p.py\"\n", "want the file name of a patch script"},
		{"[upstream]\nissue = \"#1\"\n", "[upstream] wants issue, pr and drop"},
		// A marker needs a site: these anchor and replacement share no line.
		{"legacy_marker = \"m\"\nlegacy_script = \"p.py\"\n", "legacy_marker is decided at the edit's site, and this edit has none"},
		{"upstream = \"m\"\n", "upstream is decided at the edit's site, and this edit has none"},
		{"site = \"def f(\"\nsite_lines = -1\nupstream = \"m\"\n", "site_lines -1 is negative"},
		// Whose the legacy patch is: v0.2.2's scripts or the seed's
		// scripts and diffs, nothing else.
		{"site = \"def f(\"\nlegacy_marker = \"m\"\nlegacy_script = \"p.py\"\nlegacy_from = \"v0.3\"\n", `t.toml: x: edit 1 (a.py): legacy_from "v0.3": want "v0.2.2"`},
		{"site = \"def f(\"\nlegacy_marker = \"m\"\nlegacy_script = \"p.diff\"\n", `legacy_script "p.diff" is a diff, and the v0.2.2 payload ships scripts only: add legacy_from = "seed"`},
		{"site = \"def f(\"\nlegacy_marker = \"m\"\nlegacy_script = \"p.diff\"\nlegacy_from = \"v0.2.2\"\n", "is a diff, and the v0.2.2 payload ships scripts only"},
		{"site = \"def f(\"\nlegacy_marker = \"m\"\nlegacy_script = \"p.patch\"\nlegacy_from = \"seed\"\n", "want the file name of a patch script (*.py) or of a seed diff (*.diff)"},
		{"site = \"def f(\"\nlegacy_from = \"seed\"\n", `legacy_from "seed" without a legacy_script`},
	} {
		_, err := Parse([]byte(base+c.extra), "t.toml")
		require.Error(t, err, c.extra)
		assert.Contains(t, err.Error(), c.want)
	}
	// What the script leaves is applied, in its name; the anchor still
	// there is pending; neither is drift.
	e := &d.Edits[0]
	assert.Equal(t, Applied, Evaluate(e, "def f():\n    # FIXED-BY-SCRIPT\n    x = 3\n", nil).State)
	assert.Contains(t, Evaluate(e, "def f():\n    # FIXED-BY-SCRIPT\n    x = 3\n", nil).Why, "by the v0.2.2 script patch_x.py")
	assert.Equal(t, Pending, Evaluate(e, "def f():\n    x = 1\n", nil).State)
	// A script that inserted its fix in f, leaving the anchor: still its fix.
	assert.Equal(t, Applied, Evaluate(e, "def f():\n    # FIXED-BY-SCRIPT\n    x = 1\n", nil).State)
	// The marker's text in another function decides nothing: f is pending.
	assert.Equal(t, Pending, Evaluate(e, "def g():\n    # FIXED-BY-SCRIPT\n    y = 1\n\ndef f():\n    x = 1\n", nil).State)
	assert.Equal(t, Drift, Evaluate(e, "def f():\n    x = 3\n", nil).State)

	// The seed's script and the seed's diff say whose they are.
	for _, c := range []struct{ extra, want string }{
		{"legacy_script = \"patch_x.py\"\nlegacy_from = \"v0.2.2\"\n", "by the v0.2.2 script patch_x.py (its marker at the edit's site)"},
		{"legacy_script = \"patch_x.py\"\nlegacy_from = \"seed\"\n", "by the seed's script patch_x.py (its marker at the edit's site)"},
		{"legacy_script = \"x_rows.diff\"\nlegacy_from = \"seed\"\n", "by the seed's diff x_rows.diff (its marker at the edit's site)"},
	} {
		d, err := Parse([]byte(base+"site = \"def f(\"\nlegacy_marker = \"FIXED-BY-SCRIPT\"\n"+c.extra), "t.toml")
		require.NoError(t, err, c.extra)
		ev := Evaluate(&d.Edits[0], "def f():\n    # FIXED-BY-SCRIPT\n    x = 3\n", nil)
		assert.Equal(t, Applied, ev.State, c.extra)
		assert.Equal(t, c.want, ev.Why, c.extra)
	}
}

// The built-ins that recognise a v0.2.2 payload script's result keep its
// name; every other legacy patch is one of the seed's scripts or diffs
// and says so.
func TestBuiltinLegacyFrom(t *testing.T) {
	v022 := map[string]bool{ // the v0.2.2 payload's scripts
		"patch_defer_kv_register.py": true, "patch_mooncake_mamba_unpack.py": true, "patch_moriio_pagelen.py": true,
		"patch_moriio_write.py": true, "patch_sched_guard.py": true, "patch_vllm_mooncake_blocksize.py": true,
		"patch_vllm_mooncake_prom_metrics.py": true, "patch_mooncake_early_send_wait_event.py": true,
		"patch_hicache_rocm_host_alloc.py": true, "patch_hicache_rocm_staged_write_back.py": true,
	}
	defs, err := Builtin()
	require.NoError(t, err)
	seed := map[string]bool{}
	for _, d := range defs {
		for _, v := range d.EditSets() {
			for _, e := range v.Edits {
				if e.LegacyScript == "" {
					continue
				}
				want := "the v0.2.2 script "
				if !v022[e.LegacyScript] {
					want, seed[d.ID] = "the seed's ", true
				}
				assert.True(t, strings.HasPrefix(e.LegacyBy(), want), "%s %s: %s", d.ID, v.Name, e.LegacyBy())
			}
		}
	}
	for _, id := range []string{"vllm-moriio-dsv4-noncontig-register", "vllm-moriio-dsv4-hybrid-block-size",
		"vllm-moriio-dsv4-sparse-backend", "vllm-moriio-kernel-block-ratio", "vllm-moriio-per-layer-offsets",
		"vllm-moriio-dsa-indexer-write", "sglang-glm52-nextn-quark-exclude"} {
		assert.True(t, seed[id], "%s recognises no seed script's result", id)
	}
}

// Every built-in definition says where its fix stands upstream and when
// to drop it.
func TestBuiltinDefinitionsHaveUpstreamStatus(t *testing.T) {
	defs, err := Builtin()
	require.NoError(t, err)
	for _, d := range defs {
		require.NotNil(t, d.Status, "%s has no [upstream]", d.ID)
		assert.NotEmpty(t, d.Status.Drop, d.ID)
	}
}
