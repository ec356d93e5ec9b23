package payloadindex

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/overlay"
)

// A payload from given trees and patches: the binary, each tree at its
// DEST, the patches under patches/, and an index that lists exactly that.
// An old payload in the way (an earlier run's) is replaced, not merged.
func TestBuildFromTrees(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "infera-exec")
	require.NoError(t, os.WriteFile(bin, []byte("\x7fELF stand-in"), 0o755))
	py, patches := filepath.Join(dir, "py"), filepath.Join(dir, "patches")
	require.NoError(t, os.MkdirAll(filepath.Join(py, "pkg"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(py, "pkg", "__init__.py"), []byte("X = 1\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(patches, "vllm"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(patches, "vllm", "fix.toml"), []byte(guardedFix), 0o644))
	writeTree(t, filepath.Join(patches, "vllm", "fix.trees", "v1"), "vllm/mod.py", "def f():\n    return 1\n")
	out := filepath.Join(dir, "payload")
	_, err := Build(Options{Out: out, Bin: bin, Trees: []string{py + ":py312"}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(out, "stale"), nil, 0o644))

	r, err := Build(Options{Out: out, Bin: bin, Patches: patches, Trees: []string{py + ":py312"}})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(out, overlay.IndexName), r.Index)
	ix, _, err := overlay.ReadIndex(out)
	require.NoError(t, err)
	assert.Len(t, ix.Entries, r.Entries)
	var paths []string
	for _, e := range ix.Entries {
		paths = append(paths, e.Path)
	}
	assert.ElementsMatch(t, []string{"bin", "bin/infera-exec", "patches", "patches/vllm", "patches/vllm/fix.toml",
		"py312", "py312/pkg", "py312/pkg/__init__.py"}, paths, "the pristine tree beside fix.toml checked, not shipped")
	assert.NoFileExists(t, filepath.Join(out, "stale"))
	assert.Empty(t, r.Notes)
}

const guardedFix = `id = "fix"
summary = "a fix"
package = "vllm"
distribution = "vllm"

[[guard]]
file = "mod.py"
contains = "def f("

[[edit]]
file = "mod.py"
anchor = "    return 1\n"
replacement = "    return 2\n"
`

// overlappingFix has two variants of which the second's anchor is a part
// of the first's: one file would match both.
const overlappingFix = `id = "fix"
summary = "s"
package = "vllm"
distribution = "vllm"
[[guard]]
file = "a.py"
[[variant]]
name = "long"
[[variant.edit]]
file = "a.py"
anchor = "def f():\n    return 1\n"
replacement = "def f():\n    return 2\n"
[[variant]]
name = "short"
[[variant.edit]]
file = "a.py"
anchor = "    return 1\n"
replacement = "    return 2\n"
`

// Definitions a start would refuse, or never read, fail the build before
// anything is written: the payload directory in the way stays as it was.
func TestBuildRefusesPatches(t *testing.T) {
	for name, c := range map[string]struct{ file, content, want string }{
		"malformed":            {"vllm/fix.toml", "id = \"fix\"\n", "vllm/fix.toml: fix: summary is empty; a start with this payload would refuse to run (exit 78)"},
		"not toml":             {"vllm/fix.toml", "id = [", "vllm/fix.toml"},
		"stray":                {"fix.toml", guardedFix, "fix.toml: not at <import-name>/<file>.toml"},
		"too deep":             {"vllm/sub/fix.toml", guardedFix, "vllm/sub/fix.toml: not at <import-name>/<file>.toml"},
		"overlapping variants": {"vllm/fix.toml", overlappingFix, "vllm/fix.toml: fix: variants long and short overlap"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "infera-exec")
			require.NoError(t, os.WriteFile(bin, nil, 0o755))
			patches := filepath.Join(dir, "patches")
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(patches, c.file)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(patches, c.file), []byte(c.content), 0o644))
			out := filepath.Join(dir, "payload")
			require.NoError(t, os.MkdirAll(out, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(out, "old"), []byte("kept"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(out, ".infera-payload-out"), nil, 0o644)) // an earlier run's

			_, err := Build(Options{Out: out, Bin: bin, Patches: patches})
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			b, rerr := os.ReadFile(filepath.Join(out, "old"))
			require.NoError(t, rerr, "the old payload is untouched")
			assert.Equal(t, "kept", string(b))
		})
	}
}

// A definition without a guard ships, with a note that says what it costs.
func TestBuildNotesUnguardedPatch(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "infera-exec")
	require.NoError(t, os.WriteFile(bin, nil, 0o755))
	patches := filepath.Join(dir, "patches")
	require.NoError(t, os.MkdirAll(filepath.Join(patches, "vllm"), 0o755))
	unguarded := strings.Replace(guardedFix, "[[guard]]\nfile = \"mod.py\"\ncontains = \"def f(\"\n", "", 1)
	require.NotEqual(t, guardedFix, unguarded)
	require.NoError(t, os.WriteFile(filepath.Join(patches, "vllm", "fix.toml"), []byte(unguarded), 0o644))

	py := filepath.Join(dir, "py")
	require.NoError(t, os.MkdirAll(py, 0o755))
	writeTree(t, filepath.Join(patches, "vllm", "fix.trees", "v1"), "vllm/mod.py", "def f():\n    return 1\n")
	r, err := Build(Options{Out: filepath.Join(dir, "payload"), Bin: bin, Patches: patches, Trees: []string{py + ":py312"}})
	require.NoError(t, err)
	require.Len(t, r.Notes, 1)
	assert.Contains(t, r.Notes[0], "vllm/fix.toml (fix): it has no [[guard]]")
	assert.Contains(t, r.Notes[0], "reads as drift")
}

// writeTree writes one file of a pristine tree.
func writeTree(t *testing.T, tree, rel, content string) {
	t.Helper()
	p := filepath.Join(tree, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

// pristineMod is upstream's vllm/mod.py where the fix is pending: f is
// the edit's site; g holds the same text as the fix's markers below.
const pristineMod = `def f():
    return 1


def g():
    ev = record()
    return 2
`

// markedFix edits f, with an upstream and a legacy marker and two
// variants; the test cases change its markers and replacement.
const markedFix = `id = "fix"
summary = "a fix"
package = "vllm"
distribution = "vllm"

[[guard]]
file = "mod.py"
contains = "def f("

[[variant]]
name = "old"
[[variant.edit]]
file = "mod.py"
site = "def f("
anchor = "    return 1\n"
replacement = "    return 1 + 0\n"
upstream = "return 1 + 1"

[[variant]]
name = "new"
[[variant.edit]]
file = "other.py"
anchor = "x = 1\n"
replacement = "x = 2\n"
[[variant.edit]]
file = "mod.py"
site = "def f("
anchor = "def f():\n"
replacement = "def f():\n    # fixed\n"
legacy_marker = "# fixed by v0.2.2"
legacy_script = "fix_mod.py"
`

// The pristine trees shipped beside a payload definition
// (<name>.trees/<tree>/, laid out as site-packages) are checked against
// every marker of every variant: one that a tree holds outside the
// edit's site (upstream, legacy, our replacement) fails the build, naming
// definition, variant, edit, file and line, with the payload in the way
// untouched; so does a tree that holds none of the definition's files.
// Without a tree the build goes on, with a note that says so.
func TestBuildChecksPristineTrees(t *testing.T) {
	for name, c := range map[string]struct {
		old, new string   // a change of markedFix
		tree     string   // the tree's directory under patches/vllm/; empty: none
		file     string   // the tree's file, relative to the tree
		want     []string // in the error; none: the build succeeds
		note     string   // in the notes, with no error
	}{
		"clean":                        {tree: "fix.trees/v1", file: "vllm/mod.py"},
		"upstream marker elsewhere":    {old: `upstream = "return 1 + 1"`, new: `upstream = "ev = record()"`, tree: "fix.trees/v1", file: "vllm/mod.py", want: []string{"patch definition fix (", "vllm/fix.toml): variant old: edit 1: upstream at line 6 in ", filepath.Join("fix.trees", "v1", "vllm", "mod.py")}},
		"legacy marker elsewhere":      {old: `legacy_marker = "# fixed by v0.2.2"`, new: `legacy_marker = "return 2"`, tree: "fix.trees/v1", file: "vllm/mod.py", want: []string{"vllm/fix.toml): variant new: edit 2: legacy_marker at line 7 in "}},
		"replacement elsewhere":        {old: `replacement = "    return 1 + 0\n"`, new: `replacement = "    return 2\n"`, tree: "fix.trees/v1", file: "vllm/mod.py", want: []string{"variant old: edit 1: replacement at line 7 in "}},
		"tree without the files":       {tree: "fix.trees/v1", file: "sglang/mod.py", want: []string{"pristine tree ", "holds none of the files it edits (want ", "/vllm/<file>, e.g. mod.py)"}},
		"tree laid out as the package": {tree: "fix.trees/v1", file: "mod.py", want: []string{"holds none of the files it edits"}},
		"no tree":                      {note: "vllm/fix.toml (fix): no pristine tree beside it (fix.trees/<tree>/vllm/...: "},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "infera-exec")
			require.NoError(t, os.WriteFile(bin, nil, 0o755))
			patches := filepath.Join(dir, "patches")
			def := strings.Replace(markedFix, c.old, c.new, 1)
			require.True(t, c.old == "" || def != markedFix, "the case changes the definition")
			writeTree(t, patches, "vllm/fix.toml", def)
			if c.tree != "" {
				tree := filepath.Join(patches, "vllm", filepath.FromSlash(c.tree))
				writeTree(t, tree, c.file, pristineMod)
				// A tree's .toml files are the engine's, not definitions.
				writeTree(t, tree, "vllm/engine.toml", "x = 1\n")
			}
			out := filepath.Join(dir, "payload")
			require.NoError(t, os.MkdirAll(out, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(out, "old"), []byte("kept"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(out, ".infera-payload-out"), nil, 0o644)) // an earlier run's

			py := filepath.Join(dir, "py")
			require.NoError(t, os.MkdirAll(py, 0o755))
			r, err := Build(Options{Out: out, Bin: bin, Patches: patches, Trees: []string{py + ":py312"}})
			if len(c.want) == 0 {
				require.NoError(t, err)
				if c.note == "" {
					assert.Empty(t, r.Notes)
					return
				}
				require.Len(t, r.Notes, 1)
				assert.Contains(t, r.Notes[0], c.note)
				return
			}
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			b, rerr := os.ReadFile(filepath.Join(out, "old"))
			require.NoError(t, rerr, "the old payload is untouched")
			assert.Equal(t, "kept", string(b))
		})
	}
}

func TestBuildRefusesTree(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "infera-exec")
	require.NoError(t, os.WriteFile(bin, nil, 0o755))
	for _, tree := range []string{"src", "src:", "src:/abs", "src:../up", "src:a/../../b"} {
		_, err := Build(Options{Out: filepath.Join(dir, "payload"), Bin: bin, Trees: []string{tree}})
		require.Error(t, err, tree)
		assert.Contains(t, err.Error(), "want SRC:DEST with DEST relative", tree)
	}
}

// -out is removed before the payload is written, so it must not be able
// to take anything else with it: a directory holding an input (-out D
// with -tree D/src deleted the source), one inside an input, the working
// directory, or a non-empty directory no earlier run wrote (a typo, -out
// build for build/payload, erased build/wheels and build/native). Each is
// refused before anything is touched, naming the path and the fix.
func TestBuildRefusesAnOutputItDidNotWrite(t *testing.T) {
	type layout struct{ dir, bin, build, tree, native string }
	mk := func(t *testing.T) layout {
		d := t.TempDir()
		l := layout{dir: d, bin: filepath.Join(d, "bin", "infera-exec"), build: filepath.Join(d, "build")}
		l.tree, l.native = filepath.Join(l.build, "wheels", "py312"), filepath.Join(l.build, "native", "rocm7-py312")
		for _, f := range []string{l.bin, filepath.Join(l.tree, "pkg", "__init__.py"), filepath.Join(l.native, "lib", "libx.so")} {
			require.NoError(t, os.MkdirAll(filepath.Dir(f), 0o755))
			require.NoError(t, os.WriteFile(f, []byte("input"), 0o755))
		}
		return l
	}
	intact := func(t *testing.T, l layout) {
		t.Helper()
		for _, f := range []string{l.bin, filepath.Join(l.tree, "pkg", "__init__.py"), filepath.Join(l.native, "lib", "libx.so")} {
			b, err := os.ReadFile(f)
			require.NoError(t, err, "the input %s is still there", f)
			assert.Equal(t, "input", string(b))
		}
	}
	for name, c := range map[string]struct {
		opts  func(l layout) Options
		want  string
		force bool // -force does not change the refusal
	}{
		"-out holds a -tree": {
			opts: func(l layout) Options {
				return Options{Out: filepath.Join(l.build, "wheels"), Bin: l.bin, Trees: []string{l.tree + ":py312"}}
			},
			want: "holds -tree " + "%TREE%", force: true,
		},
		"-out is a typo for build/payload": {
			opts: func(l layout) Options {
				return Options{Out: l.build, Bin: l.bin, Trees: []string{l.tree + ":py312", l.native + ":native/rocm7-py312"}}
			},
			want: "holds -tree", force: true,
		},
		"-out is a non-empty directory no run wrote": {
			opts: func(l layout) Options {
				return Options{Out: filepath.Join(l.build, "native"), Bin: l.bin, Trees: []string{l.tree + ":py312"}}
			},
			want: "is a non-empty directory that infera-payload did not write (no .infera-payload-out in it)",
		},
		"-out holds -bin": {
			opts: func(l layout) Options {
				return Options{Out: filepath.Dir(l.bin), Bin: l.bin, Trees: []string{l.tree + ":py312"}}
			},
			want: "holds -bin", force: true,
		},
		"-out inside a -tree": {
			opts: func(l layout) Options {
				return Options{Out: filepath.Join(l.tree, "payload"), Bin: l.bin, Trees: []string{l.tree + ":py312"}}
			},
			want: "is inside -tree", force: true,
		},
		"-out through a link to a -tree": {
			opts: func(l layout) Options {
				link := filepath.Join(l.dir, "link")
				os.Symlink(filepath.Join(l.build, "wheels"), link)
				return Options{Out: link, Bin: l.bin, Trees: []string{l.tree + ":py312"}}
			},
			want: "holds -tree", force: false,
		},
		"-out holds -demo": {
			opts: func(l layout) Options {
				return Options{Out: filepath.Join(l.dir, "out"), Bin: l.bin, Trees: []string{l.tree + ":py312"}, Demo: filepath.Join(l.dir, "out", "demo"), Engine: l.native}
			},
			want: "holds -demo", force: true,
		},
		"-demo holds -out": {
			opts: func(l layout) Options {
				return Options{Out: filepath.Join(l.dir, "demo", "payload"), Bin: l.bin, Trees: []string{l.tree + ":py312"}, Demo: filepath.Join(l.dir, "demo"), Engine: l.native}
			},
			want: "is inside -demo " + "%DIR%/demo, which the run also replaces", force: true,
		},
		"-out is a file": {
			opts: func(l layout) Options { return Options{Out: l.bin, Bin: filepath.Join(l.tree, "pkg", "__init__.py")} },
			want: "is a file",
		},
	} {
		t.Run(name, func(t *testing.T) {
			l := mk(t)
			o := c.opts(l)
			want := strings.NewReplacer("%TREE%", l.tree, "%DIR%", l.dir).Replace(c.want)
			_, err := Build(o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), want)
			assert.Contains(t, err.Error(), o.Out, "the message names the path")
			intact(t, l)
			if c.force {
				o.Force = true
				_, err = Build(o)
				require.Error(t, err, "-force does not make it safe")
				intact(t, l)
			}
		})
	}

	// The working directory.
	l := mk(t)
	t.Chdir(l.build)
	_, err := Build(Options{Out: ".", Bin: l.bin, Trees: []string{l.tree + ":py312"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds the working directory")
	intact(t, l)

	// -force replaces a directory no run wrote, when no input is in it.
	_, err = Build(Options{Out: filepath.Join(l.build, "native"), Bin: l.bin, Trees: []string{l.tree + ":py312"}, Force: true})
	require.NoError(t, err)
	assert.NoDirExists(t, l.native)
}

// What a run wrote, a later run replaces without -force: the marker is
// in the directory, and not in the payload's index.
func TestBuildReplacesItsOwnOutput(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "infera-exec")
	require.NoError(t, os.WriteFile(bin, nil, 0o755))
	py := filepath.Join(dir, "py")
	require.NoError(t, os.MkdirAll(py, 0o755))
	out := filepath.Join(dir, "payload")
	for i := 0; i < 2; i++ {
		_, err := Build(Options{Out: out, Bin: bin, Trees: []string{py + ":py312"}})
		require.NoError(t, err, "run %d", i)
		assert.FileExists(t, filepath.Join(out, ".infera-payload-out"))
		ix, _, err := overlay.ReadIndex(out)
		require.NoError(t, err)
		for _, e := range ix.Entries {
			assert.NotEqual(t, ".infera-payload-out", path.Base(e.Path))
		}
	}
	// A harvested tree carries its own marker; in the payload it is gone.
	require.NoError(t, os.WriteFile(filepath.Join(py, ".infera-payload-out"), nil, 0o644))
	_, err := Build(Options{Out: out, Bin: bin, Trees: []string{py + ":py312"}})
	require.NoError(t, err)
	assert.NoFileExists(t, filepath.Join(out, "py312", ".infera-payload-out"))
}

// The index lists the INFERA_* names the payload's Python code reads, in
// every tree, so that a start does not call them typos; a start reads
// them back from the head of the index.
func TestBuildListsEnvNames(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "infera-exec")
	require.NoError(t, os.WriteFile(bin, nil, 0o755))
	py, native := filepath.Join(dir, "py"), filepath.Join(dir, "native")
	require.NoError(t, os.MkdirAll(filepath.Join(py, "infera", "kvd"), 0o755))
	require.NoError(t, os.MkdirAll(native, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(py, "infera", "kvd", "server.py"),
		[]byte("import os\nSOCK = os.environ.get(\"INFERA_KVD_SOCKET\", \"/kvd/kvd.sock\")\nGPUS = os.getenv('INFERA_PREFLIGHT_KV_GPUS')\n# INFERA_NOT_A_LITERAL in a comment\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(native, "hook.py"), []byte("X = \"INFERA_KVD_SOCKET\"\nY = \"INFERA_DRAIN_TIMEOUT\"\n"), 0o644))
	out := filepath.Join(dir, "payload")
	_, err := Build(Options{Out: out, Bin: bin, Trees: []string{py + ":py312", native + ":native/rocm7-py312"}})
	require.NoError(t, err)
	ix, _, err := overlay.ReadIndex(out)
	require.NoError(t, err)
	want := []string{"INFERA_DRAIN_TIMEOUT", "INFERA_KVD_SOCKET", "INFERA_PREFLIGHT_KV_GPUS"}
	assert.Equal(t, want, ix.EnvNames)
	names, fromIndex := overlay.PayloadEnvNames(out)
	assert.True(t, fromIndex)
	assert.Equal(t, want, names)
}

// A preflight rule file a start would refuse fails the build, naming the
// file and the line, and the old payload stays; a good one is copied to
// rules/.
func TestBuildChecksRules(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "infera-exec")
	require.NoError(t, os.WriteFile(bin, nil, 0o755))
	rulesDir := filepath.Join(dir, "rules")
	require.NoError(t, os.MkdirAll(rulesDir, 0o755))
	good := "id = \"r1\"\nsummary = \"s\"\nseverity = \"warn\"\nmessage = \"m\"\nfix = \"f\"\nrationale = \"r\"\n\n[[when]]\nfact = \"env:X\"\npresent = true\n"
	bad := strings.Replace(good, "fact = \"env:X\"", "fact = \"enviro:X\"", 1)
	require.NoError(t, os.WriteFile(filepath.Join(rulesDir, "r1.toml"), []byte(bad), 0o644))
	out := filepath.Join(dir, "payload")
	_, err := Build(Options{Out: out, Bin: bin, Rules: rulesDir, Trees: []string{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "r1.toml:9: r1: condition 1: fact \"enviro:X\"")
	assert.NoDirExists(t, out)

	require.NoError(t, os.WriteFile(filepath.Join(rulesDir, "r1.toml"), []byte(good), 0o644))
	src := filepath.Join(dir, "py")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "infera"), 0o755))
	_, err = Build(Options{Out: out, Bin: bin, Rules: rulesDir, Trees: []string{src + ":py312"}})
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(out, "rules", "r1.toml"))
}
