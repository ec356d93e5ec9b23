package patches

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/patches/patchdef"
)

// Every built-in's markers (upstream, legacy, and our replacement) match
// every pristine test tree only at the edit's site: a tree where a patch
// is pending (EXPECTED) must not carry a marker of any of its variants
// anywhere else in the edited file (patchdef's AmbiguousIn, the check
// the built-in generator and `infera-payload index` make too). A marker
// that does is text upstream has in another place, which would decide
// the edit the day the site moves (as the chunk-wait-event script's line
// did on SGLang v0.5.16).
func TestMarkersMatchOnlyAtTheirSites(t *testing.T) {
	set, trees := builtinTrees(t)
	checked := 0
	for _, tree := range trees {
		want := readExpected(t, filepath.Join(tree, "EXPECTED"))
		for _, d := range set.Defs {
			w, ok := want[d.ID]
			if !ok || w.state != patchdef.Pending {
				continue
			}
			found, n, err := d.AmbiguousIn(treeRoot(tree))
			require.NoError(t, err)
			checked += n
			for _, a := range found {
				t.Errorf("tree %s: %s", filepath.Base(tree), a)
			}
		}
	}
	assert.Greater(t, checked, 300, "edits checked against pristine trees")
}

// The check can fail: the chunk-wait-event script's statement without
// its indentation is upstream's line in maybe_send_cached_prefix_chunk.
func TestAmbiguousMarkerIsFound(t *testing.T) {
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	v := set.Lookup("sglang-mooncake-chunk-wait-event").Variants[0]
	e := v.Edits[len(v.Edits)-1]
	data, err := os.ReadFile("testdata/trees/sglang-0.5.16/site-packages/sglang/srt/disaggregation/prefill.py")
	require.NoError(t, err)
	assert.Empty(t, e.Ambiguous(string(data)))
	e.LegacyMarker = "req.disagg_kv_sender._early_send_wait_event = ev"
	assert.Equal(t, []string{"legacy_marker at line 1048"}, e.Ambiguous(string(data)))
}
