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

// atomFiles are the ATOM files the seed's atom/ scripts edit (and the
// built-ins' guards read), relative to the package directory.
var atomFiles = []string{
	"model_ops/attentions/gdn_attn.py",
	"models/minimax_m2.py",
	"kv_transfer/disaggregation/mooncake/mooncake_connector.py",
}

// atomRevision is an ATOM revision with the state (and variant, where
// the definition has variants) one built-in reads on it as it is.
type atomRevision struct {
	rev     string
	state   patchdef.State
	variant string
}

// atomSeedScripts are the seed's three ATOM scripts, each with the
// built-in that makes its fix and ATOM revisions along the history of the
// file it edits: the releases, and the commits where that code arrived,
// changed form or was fixed upstream.
var atomSeedScripts = []struct {
	id, script string
	revisions  []atomRevision
}{
	{"atom-mooncake-consumer-slot", "patch_mooncake_consumer_slot.py", []atomRevision{
		{"v0.1.2", patchdef.NotApplicable, ""},    // no Mooncake connector
		{"d372640ae", patchdef.NotApplicable, ""}, // 2026-05-14, the connector (#690), no staging pool yet
		{"a7ef44aed", patchdef.Pending, ""},       // 2026-05-22, the staging pool index (#812)
		{"v0.1.3", patchdef.Pending, ""},
		{"v0.1.4", patchdef.Pending, ""},
		{"v0.1.5", patchdef.Pending, ""},
		{"v0.1.6-rc0", patchdef.Pending, ""},
		{"17547715f", patchdef.Pending, ""},  // 2026-07-29, the last before #1552
		{"4b49af816", patchdef.Upstream, ""}, // 2026-07-30, #1552 binds it for every request
		{"ffdf3bb5d", patchdef.Upstream, ""}, // main
	}},
	{"atom-gdn-pd-state-transfer", "patch_gdn_pd_state_transfer.py", []atomRevision{
		{"v0.1.2", patchdef.NotApplicable, ""},    // no per-request GDN state
		{"99f0990ec", patchdef.NotApplicable, ""}, // 2026-04-29, the builder's layout, no PD connector
		{"d372640ae", patchdef.NotApplicable, ""}, // the connector without its slot path
		{"a7ef44aed", patchdef.Pending, ""},
		{"v0.1.3", patchdef.Pending, ""},
		{"v0.1.4", patchdef.Pending, ""},
		{"v0.1.5", patchdef.Pending, ""},
		{"v0.1.6-rc0", patchdef.Pending, ""},
		{"17547715f", patchdef.Pending, ""},
		{"410a61e8f", patchdef.Drift, ""}, // 2026-07-29, GDNStateMixin (#1718): not derived
		{"ffdf3bb5d", patchdef.Drift, ""},
	}},
	{"atom-minimax-m2-qknorm-rope", "patch_minimax_m2_qknorm_rope.py", []atomRevision{
		{"ac8b013f2", patchdef.NotApplicable, ""},           // 2026-03-24, no fused QK-norm all-reduce
		{"90b292ae4", patchdef.Partial, ""},                 // #774, four days without a release: a batch limit of 64, which no variant has
		{"v0.1.3", patchdef.Applied, "qknorm-allreduce"},    // the same
		{"v0.1.4", patchdef.Applied, "qknorm-allreduce"},    // the same
		{"e3c97b9d5", patchdef.Pending, "qknorm-allreduce"}, // #999 drops the batch limit
		{"8b834d3e2", patchdef.Pending, "qknorm-allreduce"}, // #1170 passes dtype
		{"v0.1.5", patchdef.Pending, "qknorm-allreduce"},
		{"v0.1.6-rc0", patchdef.Pending, "qknorm-allreduce"},
		{"3db4bd9e2", patchdef.Pending, "qknorm-allreduce"},      // the last before #1222
		{"8e6349c5d", patchdef.Pending, "qknorm-allreduce-rope"}, // #1222, the kernel fused with RoPE
		{"ffdf3bb5d", patchdef.Pending, "qknorm-allreduce-rope"}, // main
	}},
}

// TestSeedATOMScriptsOnRevisions runs the seed's ATOM scripts (atom/, as
// of its cea8053, unchanged since its first commit) on the real files of
// ATOM revisions, both ways, as TestSeedDSARowsScriptOnRevisions does for
// SGLang: on each revision the built-in reads the state listed; where it
// is pending the script changes the engine, its result reads as the fix
// applied by the seed's script, and a start on it writes nothing; a start
// alone changes at least the script's files, with the fix applied and
// source that compiles, and the script then changes nothing. Where the
// definition is not pending a start writes nothing. INFERA_SEED_GIT and
// INFERA_ATOM_GIT name git directories of the seed and of ROCm/ATOM;
// skipped without them, git or python3.
func TestSeedATOMScriptsOnRevisions(t *testing.T) {
	seedGit, atomGit := os.Getenv("INFERA_SEED_GIT"), os.Getenv("INFERA_ATOM_GIT")
	python, perr := exec.LookPath("python3")
	_, gerr := exec.LookPath("git")
	if seedGit == "" || atomGit == "" || perr != nil || gerr != nil {
		t.Skip("needs INFERA_SEED_GIT (a git directory of AMD-AGI/Infera), INFERA_ATOM_GIT (one of ROCm/ATOM), git and python3")
	}
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	tree := func(t *testing.T, rev string) string {
		return revisionSite(t, atomGit, rev, "atom/", "atom", atomFiles)
	}

	for _, s := range atomSeedScripts {
		t.Run(s.id, func(t *testing.T) {
			src, ok := gitShow(seedGit, "cea8053", "deploy/docker/patches/atom/"+s.script)
			require.True(t, ok, "the seed's %s at cea8053", s.script)
			scriptPath := filepath.Join(t.TempDir(), s.script)
			require.NoError(t, os.WriteFile(scriptPath, []byte(src), 0o644))
			one := &patchdef.Set{Defs: []*patchdef.Definition{set.Lookup(s.id)}}
			require.NotNil(t, one.Defs[0], s.id)
			// The scripts exit 0 whatever they find; a traceback is a failure.
			run := func(t *testing.T, site string) string {
				cmd := exec.Command(python, scriptPath)
				cmd.Env = append(os.Environ(), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1")
				cmd.Dir = "/"
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s", out)
				require.NotContains(t, string(out), "Traceback")
				return string(out)
			}
			result := func(t *testing.T, set *patchdef.Set, site string, dry bool) Result { // set: one definition, so a start writes only its files
				for _, r := range applySet(set, locateTree(t, set, site), options{DryRun: dry}) {
					if r.ID == s.id {
						return r
					}
				}
				t.Fatalf("no result for %s", s.id)
				return Result{}
			}

			scripted, variants := 0, map[string]int{}
			for _, c := range s.revisions {
				t.Run(c.rev, func(t *testing.T) {
					site := tree(t, c.rev)
					r := result(t, one, site, true)
					require.Equal(t, c.state, r.State, r.Why)
					if c.variant != "" {
						require.Equal(t, c.variant, r.Variant)
					}
					if c.state == patchdef.Applied {
						assert.Contains(t, r.Why, "by the seed's script "+s.script)
					}
					if c.state != patchdef.Pending {
						before := snapshot(t, site)
						r = result(t, one, site, false)
						assert.Equal(t, "none", r.Action, r.Why)
						assert.Empty(t, changed(site, before, snapshot(t, site)), "a start changed a revision on which %s is %s", s.id, c.state)
						return
					}
					variants[c.variant]++

					// The script alone: it changes the engine, its result is
					// the fix applied, by the seed's script, and a start writes
					// nothing.
					before := snapshot(t, site)
					out := run(t, site)
					byScript := changed(site, before, snapshot(t, site))
					require.NotEmpty(t, byScript, "%s changes nothing where %s is pending: %s", s.script, s.id, out)
					scripted++
					r = result(t, one, site, true)
					assert.Equal(t, patchdef.Applied, r.State, "after %s (%s): %s", s.script, out, r.Why)
					assert.Contains(t, r.Why, "by the seed's script "+s.script)
					after := snapshot(t, site)
					r = result(t, one, site, false)
					assert.Equal(t, patchdef.Applied, r.State, r.Why)
					assert.Equal(t, "none", r.Action, "a start on the script's result writes nothing")
					assert.Empty(t, changed(site, after, snapshot(t, site)), "a start changed the script's result")

					// A start alone: at least the script's files, the fix
					// applied, source that compiles; the script then changes
					// nothing.
					site = tree(t, c.rev)
					before = snapshot(t, site)
					r = result(t, one, site, false)
					require.Equal(t, patchdef.Applied, r.State, r.Why)
					require.Equal(t, "applied", r.Action)
					ours := snapshot(t, site)
					byStart := changed(site, before, ours)
					require.NotEmpty(t, byStart)
					for _, f := range byScript {
						assert.Contains(t, byStart, f, "%s changes %s, a start does not", s.script, f)
					}
					compiles(t, python, site, byStart)
					out = run(t, site)
					assert.Empty(t, changed(site, ours, snapshot(t, site)), "%s changed what a start wrote: %s", s.script, out)
					r = result(t, one, site, true)
					assert.Equal(t, patchdef.Applied, r.State, r.Why)
				})
			}
			// The test cannot pass by finding nothing to do: the script
			// changes the engine somewhere, and every variant is pending on
			// a revision.
			assert.NotZero(t, scripted, "%s changed no revision", s.script)
			t.Logf("%s changes %d of %d ATOM revisions; pending by variant: %v", s.script, scripted, len(s.revisions), variants)
			for _, v := range one.Defs[0].Variants {
				assert.NotZero(t, variants[v.Name], "no revision is pending for variant %s", v.Name)
			}
		})
	}
}
