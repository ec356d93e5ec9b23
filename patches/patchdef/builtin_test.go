package patchdef

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
)

var updateBuiltin = flag.Bool("update-builtin", false, "rewrite builtin_gen.go from builtin/*/*.toml")

// The definitions compiled into the binary are exactly the TOML files,
// and so is their digest; `go generate ./patches/patchdef` rewrites them.
func TestBuiltinGenerated(t *testing.T) {
	defs, digest, err := builtinFromTOML()
	require.NoError(t, err)
	src := genBuiltin(defs, digest)
	if *updateBuiltin {
		require.NoError(t, writeBuiltin("builtin_gen.go", defs, digest, pendingTrees(t, testTrees)))
		return
	}
	have, err := os.ReadFile("builtin_gen.go")
	require.NoError(t, err)
	assert.Equal(t, string(src), string(have), "builtin_gen.go is stale: run go generate ./patches/patchdef")
	got, err := Builtin()
	require.NoError(t, err)
	assert.Equal(t, defs, got)
	assert.Equal(t, digest, builtinDigest)
}

// testTrees is the pristine test trees (testdata/ANCHORS.md): each with
// the states and variants its EXPECTED file gives the built-ins.
const testTrees = "../testdata/trees"

// writeBuiltin writes the generated definitions to path, unless a marker
// of one of them matches a pristine test tree outside its edit's site
// (AmbiguousIn: every variant's edits, on every tree where the
// definition is pending): then it writes nothing and names definition,
// variant, edit, file and line.
func writeBuiltin(path string, defs []*Definition, digest string, trees []pendingTree) error {
	var bad []string
	for _, tree := range trees {
		for _, d := range defs {
			if !tree.pending[d.ID] {
				continue
			}
			found, _, err := d.AmbiguousIn(tree.root)
			if err != nil {
				return err
			}
			for _, a := range found {
				bad = append(bad, fmt.Sprintf("test tree %s: %s", tree.name, a))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s not written: a built-in's marker matches a pristine tree outside its edit's site (make it longer, give it its indentation, or narrow the site):\n  %s",
			path, strings.Join(bad, "\n  "))
	}
	return os.WriteFile(path, genBuiltin(defs, digest), 0o644)
}

// pendingTree is a test tree laid down whole (its BASE chain), with the
// definitions its EXPECTED file says are pending there.
type pendingTree struct {
	name, root string
	pending    map[string]bool
}

// pendingTrees lays down every test tree of src in a directory of the
// test's. A tree's packages are in its site-packages, or in the source
// directory of an editable install.
func pendingTrees(t *testing.T, src string) []pendingTree {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, fixture.Trees(src, dir))
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.NotEmpty(t, names, "test trees in %s", src)
	var out []pendingTree
	for _, n := range names {
		tree := pendingTree{name: n.Name(), root: filepath.Join(dir, n.Name()), pending: map[string]bool{}}
		for _, rel := range []string{"site-packages", "sgl-workspace/sglang/python"} {
			if fi, err := os.Stat(filepath.Join(tree.root, rel)); err == nil && fi.IsDir() {
				tree.root = filepath.Join(tree.root, rel)
				break
			}
		}
		data, err := os.ReadFile(filepath.Join(dir, n.Name(), "EXPECTED"))
		require.NoError(t, err)
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && State(f[1]) == Pending {
				tree.pending[f[0]] = true
			}
		}
		out = append(out, tree)
	}
	return out
}

// The generator refuses a built-in whose marker matches a pristine tree
// outside its site, naming definition, variant, edit, file and line, and
// leaves builtin_gen.go as it was: the chunk-wait-event script's
// statement without its indentation is upstream's line in SGLang
// v0.5.16's maybe_send_cached_prefix_chunk.
func TestBuiltinGeneratorRefusesAmbiguousMarker(t *testing.T) {
	defs, digest, err := builtinFromTOML()
	require.NoError(t, err)
	trees := pendingTrees(t, testTrees)
	path := filepath.Join(t.TempDir(), "builtin_gen.go")
	require.NoError(t, os.WriteFile(path, []byte("as it was\n"), 0o644))
	require.NoError(t, writeBuiltin(path, defs, digest, trees), "the built-ins as they are")
	require.NoError(t, os.WriteFile(path, []byte("as it was\n"), 0o644))

	var d *Definition
	for _, x := range defs {
		if x.ID == "sglang-mooncake-chunk-wait-event" {
			d = x
		}
	}
	require.NotNil(t, d)
	v := &d.Variants[0]
	e := &v.Edits[len(v.Edits)-1]
	e.LegacyMarker = "req.disagg_kv_sender._early_send_wait_event = ev"
	err = writeBuiltin(path, defs, digest, trees)
	require.Error(t, err)
	for _, want := range []string{d.ID, d.Source, "variant " + v.Name + ":", fmt.Sprintf("edit %d:", len(v.Edits)),
		"test tree sglang-0.5.16:", "srt/disaggregation/prefill.py", "legacy_marker at line 1048"} {
		assert.Contains(t, err.Error(), want)
	}
	have, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "as it was\n", string(have), "nothing written")
}

// genBuiltin writes the definitions as Go values.
func genBuiltin(defs []*Definition, digest string) []byte {
	var b bytes.Buffer
	q := strconv.Quote
	fmt.Fprintf(&b, "// Code generated by TestBuiltinGenerated from builtin/*/*.toml (go generate ./patches/patchdef); DO NOT EDIT.\n\npackage patchdef\n\n")
	fmt.Fprintf(&b, "// builtinDigest identifies the TOML the values below were decoded from.\nconst builtinDigest = %s\n\n", q(digest))
	guards := func(gs []Guard) {
		if len(gs) == 0 {
			return
		}
		b.WriteString("Guards: []Guard{\n")
		for _, g := range gs {
			fmt.Fprintf(&b, "{File: %s, Contains: %s, Absent: %t", q(g.File), q(g.Contains), g.Absent)
			if len(g.ContainsAny) > 0 {
				fmt.Fprintf(&b, ", ContainsAny: %#v", g.ContainsAny)
			}
			b.WriteString("},\n")
		}
		b.WriteString("},\n")
	}
	edits := func(es []Edit) {
		if len(es) == 0 {
			return
		}
		b.WriteString("Edits: []Edit{\n")
		for _, e := range es {
			fmt.Fprintf(&b, "{File: %s, Count: %d, Optional: %t,\nAnchor: %s,\nReplacement: %s,\nUpstream: %s, LegacyMarker: %s, LegacyScript: %s, LegacyFrom: %s, LegacyUnique: %t, Site: %s, SiteLines: %d},\n",
				q(e.File), e.Count, e.Optional, q(e.Anchor), q(e.Replacement), q(e.Upstream), q(e.LegacyMarker), q(e.LegacyScript), q(e.LegacyFrom), e.LegacyUnique, q(e.Site), e.SiteLines)
		}
		b.WriteString("},\n")
	}
	b.WriteString("func builtinDefs() []*Definition {\nreturn []*Definition{\n")
	for _, d := range defs {
		fmt.Fprintf(&b, "{ID: %s, Summary: %s, Package: %s, Distribution: %s, Versions: %s, Required: %t, Source: %s,\n",
			q(d.ID), q(d.Summary), q(d.Package), q(d.Distribution), q(d.Versions), d.Required, q(d.Source))
		if len(d.Supersedes) > 0 {
			fmt.Fprintf(&b, "Supersedes: %#v,\n", d.Supersedes)
		}
		if len(d.Requires) > 0 {
			fmt.Fprintf(&b, "Requires: %#v,\n", d.Requires)
		}
		if d.Caveat != "" {
			fmt.Fprintf(&b, "Caveat: %s,\n", q(d.Caveat))
		}
		if u := d.Status; u != nil {
			fmt.Fprintf(&b, "Status: &UpstreamStatus{Issue: %s, PR: %s, State: %s, Drop: %s},\n", q(u.Issue), q(u.PR), q(u.State), q(u.Drop))
		}
		guards(d.Guards)
		edits(d.Edits)
		if len(d.Variants) > 0 {
			b.WriteString("Variants: []Variant{\n")
			for _, v := range d.Variants {
				fmt.Fprintf(&b, "{Name: %s, Versions: %s,\n", q(v.Name), q(v.Versions))
				guards(v.Guards)
				edits(v.Edits)
				b.WriteString("},\n")
			}
			b.WriteString("},\n")
		}
		b.WriteString("},\n")
	}
	b.WriteString("}\n}\n")
	out, err := format.Source(b.Bytes())
	if err != nil {
		panic(fmt.Sprintf("generated code does not parse: %v", err))
	}
	return out
}
