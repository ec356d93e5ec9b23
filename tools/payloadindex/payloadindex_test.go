package payloadindex

import (
	"os"
	"path/filepath"
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
	require.NoError(t, os.WriteFile(filepath.Join(patches, "vllm", "fix.toml"), []byte("id = \"fix\"\n"), 0o644))
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
