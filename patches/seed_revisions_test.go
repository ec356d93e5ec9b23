package patches

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches/patchdef"
)

// seedEngineScripts are the seed repository's MoRIIO scripts beyond the
// v0.2.2 payload's: each as the seed had it (the revision of the seed
// repository to read it at), and the built-in definition that makes the
// same fix. The three pre-layout ones were removed from the seed in its
// commit 3375773, so they are read from its parent.
var seedEngineScripts = []struct{ rev, script, id string }{
	{"HEAD", "deploy/docker/patches/vllm-dsv4/patch_moriio_dsv4_noncontig_register.py", "vllm-moriio-dsv4-noncontig-register"},
	{"HEAD", "deploy/docker/patches/vllm-dsv4/patch_moriio_dsv4_hybrid_blocksize.py", "vllm-moriio-dsv4-hybrid-block-size"},
	{"HEAD", "deploy/docker/patches/vllm-dsv4/patch_moriio_dsv4_sparse_backend.py", "vllm-moriio-dsv4-sparse-backend"},
	{"3375773^", "deploy/docker/patches/vllm/patch_vllm_moriio_blocksize.py", "vllm-moriio-kernel-block-ratio"},
	{"3375773^", "deploy/docker/patches/vllm/patch_moriio_hetero.py", "vllm-moriio-per-layer-offsets"},
	{"3375773^", "deploy/docker/patches/vllm/patch_moriio_dsa_write.py", "vllm-moriio-dsa-indexer-write"},
}

// moriioRevisions is every vLLM main commit that changed the MoRIIO
// connector's directory, from its first (2026-01-09) to 2026-08-07 (the
// last before main 2026-08-17, 017e9f4448, which has the same files).
var moriioRevisions = []string{
	"47228db84c", "f42761204f", "1206891822", "ffc4f08c8e", "971dac2caa",
	"51878e5b6e", "2285cfca46", "07f9baf756", "e840f0d3f5", "d32575a2d2",
	"7e47fb72b5", "b91b7726e0", "188c68798e", "5add018beb", "552eb81918",
	"681d7dd38b", "86ccef7d44", "ea0e501bb1", "ac58e2a170", "cefa5281a7",
	"b3d0b37908", "0024f39a32", "77a73458e3", "1a7894dbdf", "2612ba9285",
	"4505849b30",
}

// notCovered are the revisions a script changes that no definition
// covers, and why (none now: b91b7726e0, the first commit with
// moriio_layout.py, still has the empty wait_for_save that
// vllm-moriio-dsa-indexer-write fills in, and its per-layer offsets are
// upstream's there).
var notCovered = map[string]string{}

const moriioDir = "vllm/distributed/kv_transfer/kv_connector/v1/moriio"

// TestSeedScriptsOnRevisions runs the seed's MoRIIO scripts on the MoRIIO
// connector of every vLLM revision that changed it, both ways. Where a
// script changes the engine, a start changes at least the files it
// changes, with the script's fix among the results applied, and the
// script then changes nothing; and the script's own result reads as the
// fix applied, which a start leaves as it is. INFERA_SEED_GIT names a git
// directory of AMD-AGI/Infera and INFERA_VLLM_GIT one of vLLM (a bare
// mirror of neuralmagic/vllm does); the test is skipped without them,
// without git or without python3.
func TestSeedScriptsOnRevisions(t *testing.T) {
	seedGit, vllmGit := os.Getenv("INFERA_SEED_GIT"), os.Getenv("INFERA_VLLM_GIT")
	python, perr := exec.LookPath("python3")
	_, gerr := exec.LookPath("git")
	if seedGit == "" || vllmGit == "" || perr != nil || gerr != nil {
		t.Skip("needs INFERA_SEED_GIT (a git directory of AMD-AGI/Infera), INFERA_VLLM_GIT (one of vLLM), git and python3")
	}
	git := func(t *testing.T, dir string, args ...string) []byte {
		t.Helper()
		out, err := exec.Command("git", append([]string{"--git-dir", dir}, args...)...).Output()
		require.NoError(t, err, "git %s", strings.Join(args, " "))
		return out
	}
	scripts := t.TempDir()
	for _, s := range seedEngineScripts {
		require.NoError(t, os.WriteFile(filepath.Join(scripts, filepath.Base(s.script)), git(t, seedGit, "show", s.rev+":"+s.script), 0o644))
	}
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)

	// tree lays the MoRIIO directory of rev down as site-packages/vllm,
	// read from git once per revision.
	revs := t.TempDir()
	tree := func(t *testing.T, rev string) string {
		orig := filepath.Join(revs, rev)
		if !isDir(orig) {
			require.NoError(t, mkfile(filepath.Join(orig, "vllm/__init__.py"), ""))
			for _, f := range strings.Fields(string(git(t, vllmGit, "ls-tree", "--name-only", rev, moriioDir+"/"))) {
				require.NoError(t, mkfile(filepath.Join(orig, f), string(git(t, vllmGit, "show", rev+":"+f))))
			}
		}
		site := filepath.Join(t.TempDir(), "site-packages")
		require.NoError(t, fixture.CopyTree(orig, site))
		return site
	}
	runScript := func(t *testing.T, site, script string) string {
		cmd := exec.Command(python, filepath.Join(scripts, script))
		cmd.Env = append(os.Environ(), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1")
		cmd.Dir = "/"
		out, _ := cmd.CombinedOutput() // the pre-layout scripts exit 1 on anchors they do not find
		require.NotContains(t, string(out), "Traceback", script)
		return string(out)
	}
	results := func(t *testing.T, set *patchdef.Set, site string, dry bool) map[string]Result {
		got := map[string]Result{}
		for _, r := range applySet(set, locateTree(t, set, site), options{DryRun: dry}) {
			got[r.ID] = r
		}
		return got
	}

	changedBy := map[string]int{} // script: revisions it changes
	for _, rev := range moriioRevisions {
		t.Run(rev, func(t *testing.T) {
			for _, s := range seedEngineScripts {
				script := filepath.Base(s.script)
				t.Run(script, func(t *testing.T) {
					// The script alone.
					site := tree(t, rev)
					before := snapshot(t, site)
					out := runScript(t, site, script)
					byScript := changed(site, before, snapshot(t, site))
					if len(byScript) == 0 {
						return // the script has nothing to do on this revision
					}
					if why := notCovered[rev+" "+script]; why != "" {
						t.Logf("%s changes %s, which no definition covers: %s", script, rev, why)
						return
					}
					changedBy[script]++
					// The definition alone decides the script's result:
					// the other fixes a start makes are not the script's.
					one := &patchdef.Set{Defs: []*patchdef.Definition{set.Lookup(s.id)}}
					r := results(t, one, site, true)[s.id]
					assert.Equal(t, patchdef.Applied, r.State, "%s after %s (%s): %s", s.id, script, out, r.Why)
					assert.Contains(t, r.Why, "by the seed's script "+script)
					scripted := snapshot(t, site)
					r = results(t, one, site, false)[s.id]
					assert.Equal(t, patchdef.Applied, r.State, r.Why)
					assert.Equal(t, "none", r.Action, "a start on the script's result writes nothing for %s", s.id)
					assert.Empty(t, changed(site, scripted, snapshot(t, site)), "a start changed the script's result")

					// A start alone: at least the script's files, the fix applied.
					site = tree(t, rev)
					before = snapshot(t, site)
					r = results(t, set, site, false)[s.id]
					require.Equal(t, patchdef.Applied, r.State, r.Why)
					ours := snapshot(t, site)
					byStart := changed(site, before, ours)
					for _, f := range byScript {
						assert.Contains(t, byStart, f, "%s changes %s, a start does not", script, f)
					}
					var abs []string
					for _, f := range byStart {
						abs = append(abs, filepath.Join(site, f))
					}
					compiles(t, python, "/", abs)
					out = runScript(t, site, script)
					assert.Empty(t, changed(site, ours, snapshot(t, site)), "%s changed what a start wrote: %s", script, out)
				})
			}
		})
	}
	// Each script changes the engine somewhere: the test cannot pass by
	// finding nothing to do.
	for _, s := range seedEngineScripts {
		assert.NotZero(t, changedBy[filepath.Base(s.script)], "%s changed no revision", s.script)
	}
}

// changed lists, relative to root, the source files whose content
// differs between two snapshots of root, or that only after has.
func changed(root string, before, after map[string]string) []string {
	var out []string
	for f, c := range after {
		if strings.HasSuffix(f, ".pyc") {
			continue // bytecode a script compiled, not the engine's source
		}
		if b, ok := before[f]; !ok || b != c {
			rel, _ := filepath.Rel(root, f)
			out = append(out, rel)
		}
	}
	sort.Strings(out)
	return out
}

// TestSeedNextnScriptOnReleases runs the seed's GLM-5.2 nextn
// quark-exclude backport (retired in its af8f8be, so read from its
// parent) on SGLang releases, both ways, as TestSeedScriptsOnRevisions
// does for vLLM. From v0.5.16 upstream's #30265 gives GLM-5.2 a nextn
// class of its own: the script still rewrites DeepSeek's probe there,
// and the definition leaves it (not-applicable). INFERA_SEED_GIT and
// INFERA_SGLANG_GIT name git directories of the seed and of SGLang (the
// bytedance-iaas/sglang mirror has the tags); skipped without them, git
// or python3.
func TestSeedNextnScriptOnReleases(t *testing.T) {
	seedGit, sglangGit := os.Getenv("INFERA_SEED_GIT"), os.Getenv("INFERA_SGLANG_GIT")
	python, perr := exec.LookPath("python3")
	_, gerr := exec.LookPath("git")
	if seedGit == "" || sglangGit == "" || perr != nil || gerr != nil {
		t.Skip("needs INFERA_SEED_GIT (a git directory of AMD-AGI/Infera), INFERA_SGLANG_GIT (one of SGLang), git and python3")
	}
	const id = "sglang-glm52-nextn-quark-exclude"
	script, ok := gitShow(seedGit, "af8f8be^", "deploy/docker/patches/sglang/patch_glm52_nextn_quark_exclude.py")
	require.True(t, ok, "the seed's nextn script at af8f8be^")
	scriptPath := filepath.Join(t.TempDir(), "patch_glm52_nextn_quark_exclude.py")
	require.NoError(t, os.WriteFile(scriptPath, []byte(script), 0o644))
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	tree := func(t *testing.T, rev string) string {
		return revisionSite(t, sglangGit, rev, "python/sglang/", "sglang", []string{"srt/models/deepseek_nextn.py", "srt/models/glm4_moe.py"})
	}
	run := func(t *testing.T, site string) string {
		cmd := exec.Command(python, scriptPath)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1")
		cmd.Dir = "/"
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	for _, c := range []struct {
		rev   string
		state patchdef.State // of the definition on the release as it is
	}{
		{"v0.5.12", patchdef.Pending},
		{"v0.5.15.post1", patchdef.Pending},
		{"v0.5.16", patchdef.NotApplicable},
		{"v0.5.18", patchdef.NotApplicable},
	} {
		t.Run(c.rev, func(t *testing.T) {
			one := &patchdef.Set{Defs: []*patchdef.Definition{set.Lookup(id)}}
			site := tree(t, c.rev)
			r := applySet(one, locateTree(t, one, site), options{DryRun: true})[0]
			require.Equal(t, c.state, r.State, r.Why)
			if c.state != patchdef.Pending {
				return
			}
			// The script alone, then a start: applied by the script, nothing written.
			before := snapshot(t, site)
			out := run(t, site)
			require.NotEmpty(t, changed(site, before, snapshot(t, site)), out)
			scripted := snapshot(t, site)
			r = applySet(one, locateTree(t, one, site), options{})[0]
			assert.Equal(t, patchdef.Applied, r.State, r.Why)
			assert.Contains(t, r.Why, "by the seed's script patch_glm52_nextn_quark_exclude.py")
			assert.Equal(t, "none", r.Action)
			assert.Empty(t, changed(site, scripted, snapshot(t, site)))

			// A start alone, then the script: it finds the fix and writes nothing.
			site = tree(t, c.rev)
			before = snapshot(t, site)
			for _, x := range applySet(set, locateTree(t, set, site), options{}) {
				if x.ID == id {
					r = x
				}
			}
			require.Equal(t, patchdef.Applied, r.State, r.Why)
			ours := snapshot(t, site)
			require.Equal(t, []string{"sglang/srt/models/deepseek_nextn.py"}, changed(site, before, ours))
			out = run(t, site)
			assert.Empty(t, changed(site, ours, snapshot(t, site)), out)
		})
	}
}
