package payloadindex

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/overlay"
)

// A payload from given trees and patches: the binary, each tree at its
// DEST, the patches under patches/, and an index that lists exactly that.
// An old payload in the way is replaced, not merged.
func TestBuildFromTrees(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "infera-exec")
	require.NoError(t, os.WriteFile(bin, []byte("\x7fELF stand-in"), 0o755))
	py, patches := filepath.Join(dir, "py"), filepath.Join(dir, "patches")
	require.NoError(t, os.MkdirAll(filepath.Join(py, "pkg"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(py, "pkg", "__init__.py"), []byte("X = 1\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(patches, "vllm"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(patches, "vllm", "fix.toml"), []byte(guardedFix), 0o644))
	out := filepath.Join(dir, "payload")
	require.NoError(t, os.MkdirAll(out, 0o755))
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
		"py312", "py312/pkg", "py312/pkg/__init__.py"}, paths)
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

// Definitions a start would refuse, or never read, fail the build before
// anything is written: the payload directory in the way stays as it was.
func TestBuildRefusesPatches(t *testing.T) {
	for name, c := range map[string]struct{ file, content, want string }{
		"malformed": {"vllm/fix.toml", "id = \"fix\"\n", "vllm/fix.toml: fix: summary is empty; a start with this payload would refuse to run (exit 78)"},
		"not toml":  {"vllm/fix.toml", "id = [", "vllm/fix.toml"},
		"stray":     {"fix.toml", guardedFix, "fix.toml: not at <import-name>/<file>.toml"},
		"too deep":  {"vllm/sub/fix.toml", guardedFix, "vllm/sub/fix.toml: not at <import-name>/<file>.toml"},
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
	r, err := Build(Options{Out: filepath.Join(dir, "payload"), Bin: bin, Patches: patches, Trees: []string{py + ":py312"}})
	require.NoError(t, err)
	require.Len(t, r.Notes, 1)
	assert.Contains(t, r.Notes[0], "vllm/fix.toml (fix): it has no [[guard]]")
	assert.Contains(t, r.Notes[0], "reads as drift")
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
