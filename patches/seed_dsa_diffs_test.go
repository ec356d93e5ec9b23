package patches

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches/patchdef"
)

// seedDSADiffs are the seed's context diffs for GLM-5.2 PD with DP
// attention on ROCm (deploy/docker/patches/sglang_dsa/ of AMD-AGI/Infera),
// each at the seed revision to read it at, with the built-in definitions
// that make the same fixes. The last two are the seed's cuts for its
// v0.5.15.post1 base, which its af8f8be replaced.
var seedDSADiffs = []struct {
	rev, name string
	ids       []string
	// leaves: the files a start still writes on the diff's own result
	// (the cut lacks a fix the definition makes), "" none.
	leaves string
	// reverseFails: the hunks of the diff that do not apply in reverse to
	// what a start writes (a start writes another cut's text there).
	reverseFails string
	// uncovered: why a release where the diff applies but its
	// definitions are not-applicable needs no fix ("" = none may be).
	uncovered string
}{
	{rev: "HEAD", name: "dsa_dp_sync.diff", ids: []string{"sglang-dsa-dp-sync"}},
	{rev: "HEAD", name: "dsa_page_table_rows.diff", ids: []string{"sglang-dsa-page-table-rows"}},
	{rev: "HEAD", name: "draft_cuda_graph_dp_vote.diff", ids: []string{"sglang-draft-cuda-graph-dp-vote"}},
	// Hunks 2 and 3 are its host-sync fix, for which a start writes the
	// v0.5.17 cut's text (dsa_dp_sync.diff, which applies on
	// v0.5.15.post1 too and is checked both ways there).
	{rev: "bb10221", name: "dsa_backend_dp_sync_and_page_table_rows.diff", ids: []string{"sglang-dsa-dp-sync", "sglang-dsa-page-table-rows"}, reverseFails: "2 3"},
	// The v0.5.15.post1 cut has no default on BaseSpecWorker (its v0.5.17
	// cut added it): the other spec workers raise AttributeError at the
	// decode call site, so a start adds it.
	{rev: "c91db76", name: "draft_cuda_graph_dp_vote.diff@c91db76", ids: []string{"sglang-draft-cuda-graph-dp-vote"}, leaves: "sglang/srt/speculative/base_spec_worker.py",
		uncovered: "draft() has no rank-dependent term before #30839 (v0.5.15.post1 carries its cherry-pick #31083): every rank decides alike, so there is no vote to take"},
}

const seedDSADir = "deploy/docker/patches/sglang_dsa/"

// dsaRevisions are SGLang revisions (tags, main commits where a state
// changes, tips of bytedance-iaas/sglang's GLM-5.2 and DSpark branches)
// with the states of the three definitions there, "<state> <variant>",
// in the order vote, dp-sync, page-table rows, and the seed diffs that
// apply to them with --fuzz=0.
var dsaRevisions = []struct {
	rev                string
	vote, sync, ptRows string
	diffs              string
}{
	{"v0.5.12", "not-applicable", "not-applicable", "not-applicable", ""},
	{"v0.5.14", "not-applicable", "not-applicable", "not-applicable", "draft_cuda_graph_dp_vote.diff@c91db76"},
	{"v0.5.15", "not-applicable", "pending", "not-applicable", "dsa_dp_sync.diff draft_cuda_graph_dp_vote.diff@c91db76"},
	{"v0.5.15.post1", "pending fixed-width", "pending", "pending before-cp-index-share", "dsa_dp_sync.diff dsa_backend_dp_sync_and_page_table_rows.diff draft_cuda_graph_dp_vote.diff@c91db76"},
	{"v0.5.16", "pending can-cuda-graph", "pending", "pending after-cp-index-share", "dsa_dp_sync.diff dsa_page_table_rows.diff"},
	{"v0.5.17", "pending tp0-info", "pending", "pending after-cp-index-share", "dsa_dp_sync.diff dsa_page_table_rows.diff draft_cuda_graph_dp_vote.diff"},
	{"v0.5.18", "pending tp0-info-cpu", "pending", "pending after-cp-index-share", "dsa_dp_sync.diff dsa_page_table_rows.diff"},
	{"d55f1c28e2", "pending tp0-info-cpu", "pending", "pending after-cp-index-share", "dsa_dp_sync.diff dsa_page_table_rows.diff"},
	// main: #29413 put the sync on a per-rank branch, #29798 added the
	// draft-extend mirrors, #30839 the rank-dependent draft guard and the
	// IndexShare seed across PD, #30992 the second padded call site.
	{"9214b9338f", "not-applicable", "drift", "not-applicable", "draft_cuda_graph_dp_vote.diff@c91db76"},
	{"70b6c06793", "not-applicable", "pending", "not-applicable", "dsa_dp_sync.diff draft_cuda_graph_dp_vote.diff@c91db76"},
	{"78dc581518", "drift", "pending", "drift", "dsa_dp_sync.diff"},
	{"7e229e2a81", "drift", "pending", "pending after-cp-index-share", "dsa_dp_sync.diff dsa_page_table_rows.diff"},
	{"861d97d24d", "pending can-cuda-graph", "pending", "pending after-cp-index-share", "dsa_dp_sync.diff dsa_page_table_rows.diff"},
	{"47d8b5b749", "pending tp0-info", "pending", "pending after-cp-index-share", "dsa_dp_sync.diff dsa_page_table_rows.diff draft_cuda_graph_dp_vote.diff"},
	{"b3c02cbce7", "pending tp0-info-cpu", "pending", "pending after-cp-index-share", "dsa_dp_sync.diff dsa_page_table_rows.diff"},
	// Branches: codex/dspark-megamoe-dp, and codex/glm52-ed4638-final-image,
	// which merged sglang#33973's commit (7c47251959): the seed's
	// dsa_dp_sync.diff is that PR's text, so it reads applied by the diff.
	{"c01dee2709", "pending tp0-info", "pending", "pending after-cp-index-share", "dsa_dp_sync.diff dsa_page_table_rows.diff draft_cuda_graph_dp_vote.diff"},
	{"9357c6c3a7", "pending tp0-info-cpu", "applied", "drift", ""},
}

// TestSeedDSADiffsOnRevisions runs the seed's sglang_dsa context diffs on
// the files they edit at each revision of dsaRevisions, both ways, and
// holds the three definitions to the states listed. Where a diff applies
// (patch -p1 --fuzz=0): the diff's own result reads applied (by the seed's
// diff) and a start writes nothing there; a start on the release as it is
// changes at least the files the diff changes, with its fix applied, the
// files compile, and the diff then applies in reverse (--fuzz=0): each
// edit leaves the diff's post-image at its hunk. INFERA_SEED_GIT and
// INFERA_SGLANG_GIT name git directories of the seed and of SGLang (the
// bytedance-iaas/sglang mirror has the tags and branches); skipped
// without them, git, patch or python3.
func TestSeedDSADiffsOnRevisions(t *testing.T) {
	seedGit, sglangGit := os.Getenv("INFERA_SEED_GIT"), os.Getenv("INFERA_SGLANG_GIT")
	python, perr := exec.LookPath("python3")
	_, gerr := exec.LookPath("git")
	_, xerr := exec.LookPath("patch")
	if seedGit == "" || sglangGit == "" || perr != nil || gerr != nil || xerr != nil {
		t.Skip("needs INFERA_SEED_GIT (a git directory of AMD-AGI/Infera), INFERA_SGLANG_GIT (one of SGLang), git, patch and python3")
	}
	diffs := t.TempDir()
	for _, d := range seedDSADiffs {
		text, ok := gitShow(seedGit, d.rev, seedDSADir+strings.Split(d.name, "@")[0])
		require.True(t, ok, "the seed's %s at %s", d.name, d.rev)
		require.NoError(t, os.WriteFile(filepath.Join(diffs, d.name), []byte(text), 0o644))
	}
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	ids := []string{"sglang-draft-cuda-graph-dp-vote", "sglang-dsa-dp-sync", "sglang-dsa-page-table-rows"}
	// The files the three definitions read, under the package.
	var files []string
	for _, id := range ids {
		d := set.Lookup(id)
		require.NotNil(t, d, id)
		for _, g := range d.Guards {
			files = append(files, g.File)
		}
		for _, v := range d.EditSets() {
			for _, g := range v.Guards {
				files = append(files, g.File)
			}
			for _, e := range v.Edits {
				files = append(files, e.File)
			}
		}
	}
	sort.Strings(files)
	files = slices.Compact(files)

	// tree lays the files of rev down as <dir>/python/sglang, the layout
	// the diffs' paths have (-p1), read from git once per revision; the
	// package root is <dir>/python.
	revs := t.TempDir()
	tree := func(t *testing.T, rev string) string {
		orig := filepath.Join(revs, rev)
		if !isDir(orig) {
			require.NoError(t, mkfile(filepath.Join(orig, "python/sglang/__init__.py"), ""))
			for _, f := range files {
				if c, ok := gitShow(sglangGit, rev, "python/sglang/"+f); ok {
					require.NoError(t, mkfile(filepath.Join(orig, "python/sglang", f), c))
				}
			}
		}
		dir := filepath.Join(t.TempDir(), "tree")
		require.NoError(t, fixture.CopyTree(orig, dir))
		return dir
	}
	patchCmd := func(dir, diff string, args ...string) (string, error) {
		cmd := exec.Command("patch", append([]string{"-p1", "--fuzz=0", "-f", "--no-backup-if-mismatch", "-i", filepath.Join(diffs, diff)}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	one := func(id string) *patchdef.Set { return &patchdef.Set{Defs: []*patchdef.Definition{set.Lookup(id)}} }
	result := func(t *testing.T, s *patchdef.Set, dir, id string, dry bool) Result {
		for _, r := range applySet(s, locateTree(t, s, filepath.Join(dir, "python")), options{DryRun: dry}) {
			if r.ID == id {
				return r
			}
		}
		t.Fatalf("no result for %s", id)
		return Result{}
	}
	failedHunks := regexp.MustCompile(`Hunk #(\d+) FAILED`)

	changedBy := map[string]int{}
	for _, c := range dsaRevisions {
		t.Run(c.rev, func(t *testing.T) {
			// The states of the release as it is; no marker of the
			// variant that applies stands outside its edit's site.
			dir := tree(t, c.rev)
			for i, want := range []string{c.vote, c.sync, c.ptRows} {
				r := result(t, one(ids[i]), dir, ids[i], true)
				state, variant, _ := strings.Cut(want, " ")
				assert.Equal(t, patchdef.State(state), r.State, "%s: %s", ids[i], r.Why)
				if variant != "" {
					assert.Equal(t, variant, r.Variant, ids[i])
				}
				if r.State != patchdef.Pending {
					continue
				}
				for _, v := range set.Lookup(ids[i]).EditSets() {
					if v.Name != r.Variant {
						continue
					}
					for k := range v.Edits {
						data, err := os.ReadFile(filepath.Join(dir, "python/sglang", v.Edits[k].File))
						require.NoError(t, err)
						assert.Empty(t, v.Edits[k].Ambiguous(string(data)), "%s: edit %d", ids[i], k+1)
					}
				}
			}

			var applies []string
			for _, d := range seedDSADiffs {
				if _, err := patchCmd(dir, d.name, "--dry-run"); err == nil {
					applies = append(applies, d.name)
				}
			}
			assert.Equal(t, c.diffs, strings.Join(applies, " "), "the seed diffs that apply with --fuzz=0")
			for _, d := range seedDSADiffs {
				if !slices.Contains(applies, d.name) {
					continue
				}
				t.Run(d.name, func(t *testing.T) {
					// The diff alone: its result is the fix, by the seed.
					dir := tree(t, c.rev)
					before := snapshot(t, dir)
					out, err := patchCmd(dir, d.name)
					require.NoError(t, err, "%s", out)
					byDiff := changed(dir, before, snapshot(t, dir))
					require.NotEmpty(t, byDiff)
					if d.uncovered != "" && !slices.ContainsFunc(d.ids, func(id string) bool {
						return result(t, one(id), tree(t, c.rev), id, true).State != patchdef.NotApplicable
					}) {
						t.Logf("%s changes %s, where its definitions are not-applicable: %s", d.name, c.rev, d.uncovered)
						return
					}
					changedBy[d.name]++
					for _, id := range d.ids {
						r := result(t, one(id), dir, id, true)
						diffed := snapshot(t, dir)
						if d.leaves != "" {
							assert.Equal(t, patchdef.Pending, r.State, "%s after %s: %s", id, d.name, r.Why)
							r = result(t, one(id), dir, id, false)
							assert.Equal(t, patchdef.Applied, r.State, r.Why)
							assert.Equal(t, []string{filepath.Join("python", d.leaves)}, changed(dir, diffed, snapshot(t, dir)))
							continue
						}
						assert.Equal(t, patchdef.Applied, r.State, "%s after %s: %s", id, d.name, r.Why)
						assert.Contains(t, r.Why, "by the seed's diff "+strings.Split(d.name, "@")[0])
						r = result(t, one(id), dir, id, false)
						assert.Equal(t, patchdef.Applied, r.State, r.Why)
						assert.Equal(t, "none", r.Action, "a start on the diff's result writes nothing for %s", id)
						assert.Empty(t, changed(dir, diffed, snapshot(t, dir)), "a start changed the diff's result")
					}

					// A start alone: at least the diff's files, the fix
					// applied, and the diff applies in reverse.
					dir = tree(t, c.rev)
					before = snapshot(t, dir)
					for _, id := range d.ids {
						require.Equal(t, patchdef.Applied, result(t, set, dir, id, false).State, id)
					}
					byStart := changed(dir, before, snapshot(t, dir))
					for _, f := range byDiff {
						assert.Contains(t, byStart, f, "%s changes %s, a start does not", d.name, f)
					}
					var rel []string
					for _, f := range byStart {
						rel = append(rel, strings.TrimPrefix(f, "python"+string(filepath.Separator)))
					}
					compiles(t, python, filepath.Join(dir, "python"), rel)
					out, err = patchCmd(dir, d.name, "-R", "--dry-run")
					var failed []string
					for _, m := range failedHunks.FindAllStringSubmatch(out, -1) {
						failed = append(failed, m[1])
					}
					assert.Equal(t, d.reverseFails, strings.Join(failed, " "), "hunks of %s that do not apply in reverse to a start's result: %s", d.name, out)
					if d.reverseFails == "" {
						assert.NoError(t, err, "%s -R on a start's result: %s", d.name, out)
					}
				})
			}
		})
	}
	// Each diff changes the engine somewhere a definition covers: the
	// test cannot pass by finding nothing to do.
	for _, d := range seedDSADiffs {
		assert.NotZero(t, changedBy[d.name], "%s changed no revision", d.name)
	}
}
