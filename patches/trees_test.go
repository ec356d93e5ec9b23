package patches

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches/patchdef"
)

// expectation is one line of a tree's EXPECTED file: "<id> <state>", or
// "<id> <state> <variant>" when the variant that decides it is named.
type expectation struct {
	state   patchdef.State
	variant string // "" = not checked
}

func readExpected(t *testing.T, path string) map[string]expectation {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	want := map[string]expectation{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		require.True(t, len(f) == 2 || len(f) == 3, "%s: malformed line %q", path, line)
		e := expectation{state: patchdef.State(f[1])}
		if len(f) == 3 {
			e.variant = f[2]
		}
		want[f[0]] = e
	}
	return want
}

// treeRoot is what --check is pointed at in a test tree: its site-packages,
// or the source directory of an editable install.
func treeRoot(tree string) string {
	for _, rel := range []string{"site-packages", "sgl-workspace/sglang/python"} {
		if p := filepath.Join(tree, rel); isDir(p) {
			return p
		}
	}
	return tree
}

// snapshot maps every regular file under root to its content.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		files[p] = string(b)
		return err
	}))
	return files
}

// builtinTrees is the built-in definitions, and every test tree laid down
// in a directory of the test's.
func builtinTrees(t *testing.T) (*patchdef.Set, []string) {
	t.Helper()
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, fixture.Trees("testdata/trees", dir))
	trees, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	require.NotEmpty(t, trees)
	return set, trees
}

// locateTree is where set's packages are under root, found as --check
// finds them.
func locateTree(t *testing.T, set *patchdef.Set, root string) *Location {
	t.Helper()
	loc, err := LocateOffline(root, set.Packages())
	require.NoError(t, err)
	loc.fillDistVersions(set, root)
	return loc
}

// Every test tree, shaped like the upstream files of one revision (see
// testdata/ANCHORS.md), against the built-in definitions: the dry run finds
// the states and variants of its EXPECTED file; applying turns every
// pending patch into applied with the same variant and leaves the others
// alone; the result evaluates as applied, and a second run writes nothing.
func TestVariantTrees(t *testing.T) {
	set, trees := builtinTrees(t)

	// Each variant of every built-in definition is decided by some tree.
	covered := map[string]bool{}
	for _, tree := range trees {
		t.Run(filepath.Base(tree), func(t *testing.T) {
			want := readExpected(t, filepath.Join(tree, "EXPECTED"))
			root := treeRoot(tree)
			evaluate := func(dry bool) map[string]Result {
				got := map[string]Result{}
				for _, r := range applySet(set, locateTree(t, set, root), options{DryRun: dry}) {
					got[r.ID] = r
				}
				return got
			}

			before := evaluate(true)
			require.Len(t, before, len(want), "EXPECTED names every built-in patch")
			for id, w := range want {
				r, ok := before[id]
				require.True(t, ok, "EXPECTED names unknown patch %s", id)
				assert.Equal(t, w.state, r.State, "%s: %s", id, r.Why)
				if w.variant != "" {
					assert.Equal(t, w.variant, r.Variant, id)
					covered[id+" "+r.Variant] = true
				}
			}

			applied := evaluate(false)
			after := evaluate(true)
			for id, b := range before {
				wantState := b.State
				if b.State == patchdef.Pending {
					wantState = patchdef.Applied
				}
				for _, r := range []Result{applied[id], after[id]} {
					assert.Equal(t, wantState, r.State, "%s: %s", id, r.Why)
					assert.Equal(t, b.Variant, r.Variant, id)
				}
			}

			files := snapshot(t, tree)
			for id, r := range evaluate(false) {
				assert.Equal(t, "none", r.Action, id)
			}
			assert.Equal(t, files, snapshot(t, tree), "a second run changes no byte")
		})
	}
	for _, d := range set.Defs {
		for _, v := range d.Variants {
			assert.True(t, covered[d.ID+" "+v.Name], "no tree under testdata/trees names variant %s of %s in its EXPECTED", v.Name, d.ID)
		}
	}
}

// On every test tree, each kind of restart ends where the full check
// would, by its fast path: a restart in the same container takes the
// record; on a new container layer of the same image (the image copied
// back with its sizes, modes and mtimes, as cp -a does: new inodes, as a
// new overlay mount shows them), a tree the first start left alone takes
// the record too, and one it wrote is planned and written again once
// (keeping the blob), then replayed: the same bytes and results as the
// full check, and the restart after it takes the record.
func TestRestartsMatchTheFullCheckOnEveryTree(t *testing.T) {
	set, trees := builtinTrees(t)
	var replayedTrees []string
	for _, image := range trees {
		name := filepath.Base(image)
		t.Run(name, func(t *testing.T) {
			tree := filepath.Join(t.TempDir(), name)
			layer := func() {
				require.NoError(t, os.RemoveAll(tree))
				out, err := exec.Command("cp", "-a", image, tree).CombinedOutput()
				require.NoError(t, err, "%s", out)
			}
			opt := options{StateDir: t.TempDir()}
			start := func() []Result {
				loc := locateTree(t, set, treeRoot(tree))
				loc.Fingerprint = "probe of " + name
				return applySet(set, loc, opt)
			}
			fromRecord := func(what string) {
				t.Helper()
				for _, r := range start() {
					assert.Equal(t, "none", r.Action, "%s: %s", what, r.ID)
					assert.True(t, r.Recorded, "%s takes the record: %s", what, r.ID)
				}
			}
			layer()
			first := start()
			written := snapshot(t, tree)
			fromRecord("a restart in the same container")
			assert.Equal(t, written, snapshot(t, tree), "a restart changes no byte")
			if !slices.ContainsFunc(first, func(r Result) bool { return r.Action == "applied" }) {
				layer()
				fromRecord("a new layer the first start did not write")
				return
			}

			layer()
			planned := start()
			assert.Equal(t, written, snapshot(t, tree), "the first restart on a new layer writes what the first start wrote")
			layer()
			again := start()
			assert.Equal(t, written, snapshot(t, tree), "a replay writes what the full check wrote")
			require.Len(t, again, len(planned))
			replays := false
			for i, r := range again {
				assert.False(t, planned[i].Replayed, "%s: no blob yet on the first new layer", r.ID)
				replays = replays || r.Replayed
				assert.Equal(t, r.Action == "applied", r.Replayed, "%s: replayed exactly when written", r.ID)
				r.Replayed = false
				assert.Equal(t, planned[i], r, "%s: the results of the full check", r.ID)
			}
			if replays {
				replayedTrees = append(replayedTrees, name)
			}
			fromRecord("the restart after a replay")
			assert.Equal(t, written, snapshot(t, tree), "the restart after a replay changes no byte")
		})
	}
	t.Logf("replayed on: %s", strings.Join(replayedTrees, " "))
	assert.Contains(t, replayedTrees, "vllm-pending")
}
