package patches

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/record"
)

// countStats makes every stat of the importer's go through a counter, by
// path, for the rest of the test.
func countStats(t *testing.T) map[string]int {
	t.Helper()
	n := map[string]int{}
	orig := statType
	statType = func(p string) (identity, bool) {
		n[p]++
		return orig(p)
	}
	t.Cleanup(func() { statType = orig })
	return n
}

// pendingTree is a copy of the vllm-pending test tree, located offline,
// with the built-in definitions: a first start's work.
func pendingTree(t *testing.T) (*patchdef.Set, *Location, string) {
	t.Helper()
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, fixture.Trees("testdata/trees", dir))
	root := treeRoot(filepath.Join(dir, "vllm-pending"))
	loc, err := LocateOffline(root, set.Packages())
	require.NoError(t, err)
	loc.fillDistVersions(set, root)
	loc.Fingerprint = "probe-1"
	return set, loc, root
}

// A first start resolves every module it edits from the package down, for
// each patch and again for each written patch as written (asWritten): the
// same package directories, __init__ files and extension names, each
// stat'ed once per run; and the record still lists every one of them with
// its type, for the next start.
func TestImporterStatsEachPathOncePerRun(t *testing.T) {
	set, loc, _ := pendingTree(t)

	stats := countStats(t)
	opt := options{StateDir: t.TempDir(), PyMinor: 12}
	written := 0
	for _, r := range applySet(set, loc, opt) {
		require.NotEqual(t, "failed", r.Action, "%s: %s", r.ID, r.Why)
		if r.Action == "applied" {
			written++
		}
	}
	require.Greater(t, written, 1, "the tree has several pending patches")
	require.NotEmpty(t, stats)
	for p, n := range stats {
		assert.Equal(t, 1, n, "%s stat'ed %d times in one run", p, n)
	}

	files, err := filepath.Glob(filepath.Join(opt.StateDir, "patches-*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1, "a first start records what it wrote, without waiting for the clock")
	data, err := os.ReadFile(files[0])
	require.NoError(t, err)
	var rec record.Record
	require.NoError(t, json.Unmarshal(data, &rec))
	inRecord := map[string]bool{}
	for _, f := range rec.Files {
		inRecord[f.Path] = true
		if f.Type {
			assert.Contains(t, stats, f.Path, "a type recorded is of a path probed")
			want, ok := statType(f.Path)
			require.True(t, ok)
			assert.Equal(t, want, f.ID, f.Path)
		}
	}
	// A probed path that is an edited file is in the record with its
	// whole identity; every other one with its type.
	for p := range stats {
		assert.True(t, inRecord[p], "%s was probed but is not in the record", p)
	}
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
	checkBytecode(r, map[string]*target{}, true, false, c, pycachePrefix{})
	require.Equal(t, []string{pyc}, r.Edits[0].PycsRemoved)
	assert.False(t, c.isFile(pyc), "removed by the run: stat'ed again")
	assert.Equal(t, 2, stats[pyc])
}

// A first start hashes each content once: what it read (as it was read),
// each patch's planned content, what it wrote; the edits' hashes before
// and after, the record's sums and asWritten's re-plan share them.
func TestEachContentHashedOncePerRun(t *testing.T) {
	set, loc, root := pendingTree(t)
	read := map[string]bool{}
	for _, f := range snapshot(t, root) {
		read[f] = true
	}

	hashed := map[string]int{}
	orig := hashContent
	hashContent = func(s string) string {
		hashed[s]++
		return orig(s)
	}
	t.Cleanup(func() { hashContent = orig })
	results := applySet(set, loc, options{StateDir: t.TempDir(), PyMinor: 12})
	written := 0
	for _, r := range results {
		require.NotEqual(t, "failed", r.Action, "%s: %s", r.ID, r.Why)
		if r.Action == "applied" {
			written++
		}
	}
	require.Greater(t, written, 1, "the tree has several pending patches")
	require.NotEmpty(t, hashed)
	for s, n := range hashed {
		assert.False(t, read[s], "a content read is hashed as it is read, not again")
		assert.Equal(t, 1, n, "a content of %d bytes hashed %d times in one run", len(s), n)
	}
}
