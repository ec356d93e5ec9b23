package patches

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/patches/patchdef"
)

// dsaIndexerRevisions are SGLang revisions of the DSA indexer, with the
// state and variant sglang-dsa-indexer-hip-dp-rows reads on each as it
// is: the releases from v0.5.8, the first commit of each form of the HIP
// branch of _get_topk_paged, and the tips of the mirror's GLM-5.2, DSA and
// DSpark branches whose indexer is none of the releases'.
var dsaIndexerRevisions = []struct {
	rev     string
	state   patchdef.State
	variant string
}{
	{"v0.5.8", patchdef.NotApplicable, ""}, // a HIP branch, but no real row count (q_offset) yet
	{"v0.5.9", patchdef.Pending, "hip-branch-nsa"},
	{"v0.5.10", patchdef.Pending, "hip-branch-nsa"},
	{"v0.5.11", patchdef.Pending, "hip-branch-nsa"},
	{"v0.5.12", patchdef.Pending, "hip-branch-nsa"},
	{"801d7e3eed", patchdef.Pending, "hip-branch"}, // 2026-05-20, just after the rename to dsa_indexer.py (#25821)
	{"13852d3f31", patchdef.Pending, "hip-branch"}, // 2026-06-02, #24870
	{"v0.5.13", patchdef.Pending, "hip-branch"},
	{"v0.5.14", patchdef.Pending, "hip-branch"},
	{"d101e65526", patchdef.Pending, "hip-branch"},    // feature/dspark-deepseek-v4-mvp
	{"6e9825b38c", patchdef.Pending, "hip-branch"},    // feature/dspark-common-prepare
	{"3248474f4a", patchdef.Pending, "hip-branch"},    // feature/dspark-pr25905-baseline
	{"fefc1743a9", patchdef.Pending, "aiter-backend"}, // 2026-07-06, the paged-MQA backend object (#25220)
	{"e339c83f82", patchdef.Pending, "aiter-backend"}, // 2026-07-07, #30275
	{"v0.5.15", patchdef.Pending, "aiter-backend"},
	{"v0.5.15.post1", patchdef.Pending, "aiter-backend"},
	{"v0.5.16", patchdef.Pending, "aiter-backend"},
	{"v0.5.17", patchdef.Pending, "aiter-backend"},
	{"v0.5.18", patchdef.Pending, "aiter-backend"},
	{"c5b5080dd2", patchdef.Pending, "aiter-backend"}, // dspark_deepep_deepgemm
	{"9b24bf9515", patchdef.Pending, "aiter-backend"}, // dspark_streaming_hidden_inject
	{"a904bdf758", patchdef.Pending, "aiter-backend"}, // cklxx/glm52-eic-migration
	{"b2fda1ae53", patchdef.Pending, "aiter-backend"}, // codex/archive/glm52-pd4-20260817-final
	{"f6d09d3cd8", patchdef.Pending, "aiter-backend"}, // dspark-pp-pd-draft-kv
	{"edfe0788e5", patchdef.Pending, "aiter-backend"}, // feat/dspark-pd-prefill-cp
	{"0dab252ffc", patchdef.Pending, "aiter-backend"}, // deepseek_v4_dspark_draft_kv_factor
	{"6976cf9557", patchdef.Pending, "aiter-backend"}, // deepseek_v4_dspark_suppport_pp_pd
}

// TestSeedDSARowsScriptOnRevisions runs the seed's DSA indexer row fix
// (sglang_dsa/patch_dsa_indexer_hip_dp_padded_rows.py, as of its af8f8be)
// on the indexer of SGLang revisions, both ways, as
// TestSeedScriptsOnRevisions does for vLLM: where the script changes the
// engine, a start changes at least the files it changes, with the fix
// applied, and the script then changes nothing (it finds its anchors gone
// and writes nothing); the script's own result reads as the fix applied
// by the seed's script, on which a start writes nothing. On every revision
// the definition reads pending (in the variant named) or not-applicable,
// never drift. INFERA_SEED_GIT and INFERA_SGLANG_GIT name git directories
// of the seed and of SGLang (the bytedance-iaas/sglang mirror has the tags
// and branches); skipped without them, git or python3.
func TestSeedDSARowsScriptOnRevisions(t *testing.T) {
	seedGit, sglangGit := os.Getenv("INFERA_SEED_GIT"), os.Getenv("INFERA_SGLANG_GIT")
	python, perr := exec.LookPath("python3")
	_, gerr := exec.LookPath("git")
	if seedGit == "" || sglangGit == "" || perr != nil || gerr != nil {
		t.Skip("needs INFERA_SEED_GIT (a git directory of AMD-AGI/Infera), INFERA_SGLANG_GIT (one of SGLang), git and python3")
	}
	const (
		id     = "sglang-dsa-indexer-hip-dp-rows"
		script = "patch_dsa_indexer_hip_dp_padded_rows.py"
	)
	src, ok := gitShow(seedGit, "af8f8be", "deploy/docker/patches/sglang_dsa/"+script)
	require.True(t, ok, "the seed's %s at af8f8be", script)
	scriptPath := filepath.Join(t.TempDir(), script)
	require.NoError(t, os.WriteFile(scriptPath, []byte(src), 0o644))
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	one := &patchdef.Set{Defs: []*patchdef.Definition{set.Lookup(id)}}
	require.NotNil(t, one.Defs[0], id)

	tree := func(t *testing.T, rev string) string {
		return revisionSite(t, sglangGit, rev, "python/sglang/", "sglang", []string{"srt/layers/attention/dsa/dsa_indexer.py", "srt/layers/attention/nsa/nsa_indexer.py"})
	}
	// The script exits 1 where it finds an anchor gone (it then writes
	// nothing); a traceback is a failure.
	run := func(t *testing.T, site string) string {
		cmd := exec.Command(python, scriptPath)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1")
		cmd.Dir = "/"
		out, _ := cmd.CombinedOutput()
		require.NotContains(t, string(out), "Traceback")
		return string(out)
	}
	result := func(t *testing.T, set *patchdef.Set, site string, dry bool) Result {
		for _, r := range applySet(set, locateTree(t, set, site), options{DryRun: dry}) {
			if r.ID == id {
				return r
			}
		}
		t.Fatalf("no result for %s", id)
		return Result{}
	}

	scripted, variants := 0, map[string]int{}
	for _, c := range dsaIndexerRevisions {
		t.Run(c.rev, func(t *testing.T) {
			site := tree(t, c.rev)
			r := result(t, one, site, true)
			require.Equal(t, c.state, r.State, r.Why)
			if c.state != patchdef.Pending {
				return
			}
			require.Equal(t, c.variant, r.Variant)
			variants[c.variant]++

			// The script alone: where it changes the engine, its result is
			// the fix applied, by the seed's script, and a start writes nothing.
			before := snapshot(t, site)
			out := run(t, site)
			byScript := changed(site, before, snapshot(t, site))
			// The script is for the aiter backend object (v0.5.15 and later):
			// on the older HIP branch it finds its anchors absent.
			assert.Equal(t, c.variant == "aiter-backend", len(byScript) > 0, "%s changes %v: %s", script, byScript, out)
			if len(byScript) > 0 {
				scripted++
				r = result(t, one, site, true)
				assert.Equal(t, patchdef.Applied, r.State, "after %s (%s): %s", script, out, r.Why)
				assert.Contains(t, r.Why, "by the seed's script "+script)
				after := snapshot(t, site)
				r = result(t, set, site, false)
				assert.Equal(t, patchdef.Applied, r.State, r.Why)
				assert.Equal(t, "none", r.Action, "a start on the script's result writes nothing")
				assert.Empty(t, changed(site, after, snapshot(t, site)), "a start changed the script's result")
			}

			// A start alone: at least the script's files, the fix applied,
			// source that compiles; the script then changes nothing.
			site = tree(t, c.rev)
			before = snapshot(t, site)
			r = result(t, set, site, false)
			require.Equal(t, patchdef.Applied, r.State, r.Why)
			require.Equal(t, "applied", r.Action)
			ours := snapshot(t, site)
			byStart := changed(site, before, ours)
			require.NotEmpty(t, byStart)
			for _, f := range byScript {
				assert.Contains(t, byStart, f, "%s changes %s, a start does not", script, f)
			}
			compiles(t, python, site, byStart)
			out = run(t, site)
			assert.Empty(t, changed(site, ours, snapshot(t, site)), "%s changed what a start wrote: %s", script, out)
			r = result(t, one, site, true)
			assert.Equal(t, patchdef.Applied, r.State, r.Why)
		})
	}
	// The test cannot pass by finding nothing to do: the script changes
	// the engine somewhere, and every variant is decided on a revision.
	assert.NotZero(t, scripted, "%s changed no revision", script)
	t.Logf("%s changes %d of %d revisions; pending by variant: %v", script, scripted, len(dsaIndexerRevisions), variants)
	for _, v := range one.Defs[0].Variants {
		assert.NotZero(t, variants[v.Name], "no revision is pending for variant %s", v.Name)
	}
}
