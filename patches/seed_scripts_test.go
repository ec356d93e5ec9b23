package patches

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches/patchdef"
)

// seedScripts names, for each v0.2.2 patch script, the built-in definition
// that supersedes it, the test tree it is run on, and the state that
// definition must read after the script alone has run.
var seedScripts = []struct {
	script, tree, id string
	after            patchdef.State
	// refuses: on infera-exec's result the script reports drift and
	// writes nothing (its already-applied test is its own text, comments
	// included, which infera-exec does not copy).
	refuses bool
}{
	{"vllm/patch_moriio_pagelen.py", "vllm-mrv2", "vllm-moriio-mla-page-geometry", patchdef.Applied, false},
	{"vllm/patch_moriio_write.py", "vllm-moriio-write", "vllm-moriio-write-notify-prefill", patchdef.Applied, false},
	{"vllm/patch_sched_guard.py", "vllm-mrv2", "vllm-scheduler-kv-xfer-finished-guard", patchdef.Applied, false},
	{"vllm/patch_mooncake_mamba_unpack.py", "vllm-mrv2", "vllm-mooncake-mamba-arity", patchdef.Applied, false},
	// The script defers the V1 runner's registration only: Model Runner V2's
	// is still to do, so the patch is pending, never drift.
	{"vllm/patch_defer_kv_register.py", "vllm-mrv2", "vllm-defer-kv-connector-registration", patchdef.Pending, false},
	{"vllm/patch_defer_kv_register.py", "vllm-block-size-nbytes", "vllm-defer-kv-connector-registration", patchdef.Applied, false},
	{"vllm/patch_vllm_mooncake_prom_metrics.py", "vllm-pending", "vllm-mooncake-prom-metrics", patchdef.Applied, false},
	// The script applies only to the stride layout (its edit 3 is the
	// stride variant's anchor), and its already-applied test is upstream's
	// attribute name, which infera-exec's result does not carry.
	{"vllm/patch_vllm_mooncake_blocksize.py", "vllm-pending", "vllm-mooncake-logical-block-size", patchdef.Applied, true},
	{"sglang_disagg/patch_mooncake_early_send_wait_event.py", "sglang-editable", "sglang-mooncake-chunk-wait-event", patchdef.Applied, true},
	{"sglang_rocm/patch_hicache_rocm_host_alloc.py", "sglang-hicache", "sglang-hicache-rocm-host-alloc", patchdef.Applied, false},
	{"sglang_rocm/patch_hicache_rocm_staged_write_back.py", "sglang-hicache", "sglang-hicache-rocm-staged-write-back", patchdef.Applied, false},
}

// TestSeedScripts runs the seed repository's v0.2.2 patch scripts
// (INFERA_SEED_PATCHES names their deploy/docker/patches directory; the
// test is skipped without it or without python3) in both directions: a
// tree the script patched reads as that fix (applied, by the script), and
// the script finds nothing to do on a tree infera-exec patched.
func TestSeedScripts(t *testing.T) {
	seed := os.Getenv("INFERA_SEED_PATCHES")
	python, err := exec.LookPath("python3")
	if seed == "" || err != nil {
		t.Skip("needs INFERA_SEED_PATCHES (the seed's deploy/docker/patches) and python3")
	}
	h := newSeedScriptHarness(t, python)
	for _, c := range seedScripts {
		t.Run(c.tree+"/"+filepath.Base(c.script), func(t *testing.T) {
			h.bothWays(t, filepath.Join(seed, c.script), c.tree, c.id, c.after, c.refuses, "the v0.2.2 script "+filepath.Base(c.script))
		})
	}
}

// seedScriptHarness runs a patch script on copies of the test trees and
// reads the built-in definitions' results there.
type seedScriptHarness struct {
	python string
	set    *patchdef.Set
	trees  string
}

func newSeedScriptHarness(t *testing.T, python string) *seedScriptHarness {
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	trees := t.TempDir()
	require.NoError(t, fixture.Trees("testdata/trees", trees))
	return &seedScriptHarness{python: python, set: set, trees: trees}
}

func (h *seedScriptHarness) run(t *testing.T, root, script string, fails bool) string {
	cmd := exec.Command(h.python, script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+root, "PYTHONDONTWRITEBYTECODE=1")
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if fails {
		require.Error(t, err, "%s: %s", script, out)
	} else {
		require.NoError(t, err, "%s: %s", script, out)
	}
	return string(out)
}

func (h *seedScriptHarness) result(t *testing.T, root, id string, dry bool) Result {
	loc, err := LocateOffline(root, h.set.Packages())
	require.NoError(t, err)
	loc.fillDistVersions(h.set, root)
	for _, r := range applySet(h.set, loc, options{DryRun: dry}) {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no result for %s", id)
	return Result{}
}

// bothWays runs script (a path) on a copy of tree: the definition id then
// reads after, "by <by>" when applied, and a start on top converges; and
// on a copy infera-exec patched, the script changes nothing (refuses: it
// exits non-zero doing so).
func (h *seedScriptHarness) bothWays(t *testing.T, script, tree, id string, after patchdef.State, refuses bool, by string) {
	// The script alone: its result is a known state of the fix.
	dir := filepath.Join(t.TempDir(), "script")
	require.NoError(t, fixture.CopyTree(filepath.Join(h.trees, tree), dir))
	root := treeRoot(dir)
	before := snapshot(t, dir)
	out := h.run(t, root, script, false)
	require.NotEqual(t, before, snapshot(t, dir), "the script changed nothing: %s", out)
	r := h.result(t, root, id, true)
	assert.Equal(t, after, r.State, r.Why)
	if after == patchdef.Applied {
		assert.Contains(t, r.Why, "by "+by)
	}
	// A start on top of it converges and stays converged.
	assert.Equal(t, patchdef.Applied, h.result(t, root, id, false).State)
	assert.Equal(t, patchdef.Applied, h.result(t, root, id, true).State)

	// infera-exec alone: the script then has nothing to do.
	dir = filepath.Join(t.TempDir(), "ours")
	require.NoError(t, fixture.CopyTree(filepath.Join(h.trees, tree), dir))
	root = treeRoot(dir)
	require.Equal(t, patchdef.Applied, h.result(t, root, id, false).State)
	ours := snapshot(t, dir)
	out = h.run(t, root, script, refuses)
	assert.Equal(t, ours, snapshot(t, dir), "the script changed a file infera-exec patched: %s", out)
	assert.False(t, strings.Contains(out, "Traceback"), out)
}
