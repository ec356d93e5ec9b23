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

// overlapSend is the non-final chunk's send in the overlap branch of
// SGLang's prefill scheduler, the line the chunk-wait-event fix is about.
const overlapSend = "self.send_kv_chunk(req, last_chunk=False, end_idx=req.tmp_end_idx)"

// On the SGLang releases the seed's images are built on (v0.5.16 for
// gfx942, v0.5.17 for gfx950) and on v0.5.18 (whose three files main
// d55f1c28e2 has byte for byte), prefill.py carries upstream's own
// `req.disagg_kv_sender._early_send_wait_event = ev` in
// maybe_send_cached_prefix_chunk. That line is the v0.2.2 script's
// marker, elsewhere: the edit must still be decided at its site, so a
// start patches the overlap send and reports applied only then.
func TestChunkWaitEventOnReleases(t *testing.T) {
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	trees := t.TempDir()
	require.NoError(t, fixture.Trees("testdata/trees", trees))
	for _, tree := range []string{"sglang-0.5.16", "sglang-0.5.17", "sglang-0.5.18"} {
		t.Run(tree, func(t *testing.T) {
			root := treeRoot(filepath.Join(trees, tree))
			prefill := filepath.Join(root, "sglang/srt/disaggregation/prefill.py")
			before, err := os.ReadFile(prefill)
			require.NoError(t, err)
			require.Contains(t, string(before), "req.disagg_kv_sender._early_send_wait_event = ev", "the tree carries upstream's line that equals the script's marker")

			r := chunkWaitEvent(t, set, root, false)
			require.Equal(t, patchdef.Applied, r.State, r.Why)
			require.Equal(t, "applied", r.Action)
			assert.Equal(t, "trace-ctx", r.Variant)
			last := r.Edits[len(r.Edits)-1]
			assert.Equal(t, prefill, last.Path)
			assert.NotEqual(t, last.SHA256Before, last.SHA256After, "prefill.py was written")

			// The overlap branch's send is preceded by an event recorded
			// on the forward stream and handed to the sender.
			after, err := os.ReadFile(prefill)
			require.NoError(t, err)
			lines := strings.Split(string(after), "\n")
			found := 0
			for i, l := range lines {
				if strings.TrimSpace(l) != overlapSend || i < 12 {
					continue
				}
				found++
				above := strings.Join(lines[i-12:i], "\n")
				assert.Contains(t, above, "if self.enable_overlap", "the send at line %d is the overlap branch's", i+1)
				assert.Contains(t, above, "chunk_done.record(self.forward_stream)", "line %d", i+1)
				assert.Contains(t, lines[i-1], "req.disagg_kv_sender._early_send_wait_event = chunk_done", "line %d", i+1)
			}
			assert.Equal(t, 1, found, "one overlap send")
			// The result names the lines written: the send is their last.
			require.Len(t, last.Wrote, 1)
			assert.Equal(t, overlapSend, strings.TrimSpace(lines[last.Wrote[0].To-1]), "the last line written, %v", last.Wrote)
			assert.Contains(t, fileLines(r.Edits, func(e *EditResult) []patchdef.LineRange { return e.Wrote }), prefill+" (lines ")
			if python, err := exec.LookPath("python3"); err == nil {
				out, err := exec.Command(python, "-m", "py_compile", prefill).CombinedOutput()
				assert.NoError(t, err, "%s", out)
			}

			// The next start finds it applied at its site and writes nothing.
			again := chunkWaitEvent(t, set, root, false)
			assert.Equal(t, patchdef.Applied, again.State, again.Why)
			assert.Equal(t, "none", again.Action)
		})
	}
}

// The v0.2.2 script's line at the edit's site is the fix (applied, by the
// script); the same line in another function is not, and a file with the
// anchor at one site and our replacement at another is partial.
func TestChunkWaitEventDecidedAtItsSite(t *testing.T) {
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	d := set.Lookup("sglang-mooncake-chunk-wait-event")
	require.NotNil(t, d)
	e := d.Variants[0].Edits[len(d.Variants[0].Edits)-1]
	require.Equal(t, "srt/disaggregation/prefill.py", e.File)
	data, err := os.ReadFile("testdata/trees/sglang-0.5.16/site-packages/sglang/srt/disaggregation/prefill.py")
	require.NoError(t, err)
	pristine := string(data)
	require.Equal(t, patchdef.Pending, patchdef.Evaluate(&e, pristine, nil).State)
	// The marker as the format before sites had it, without its
	// indentation, is upstream's line at 1048 too: still pending, since
	// that line is not at the edit's site.
	bare := e
	bare.LegacyMarker = strings.TrimSpace(e.LegacyMarker)
	require.Contains(t, pristine, "            "+bare.LegacyMarker+"\n")
	ev := patchdef.Evaluate(&bare, pristine, nil)
	assert.Equal(t, patchdef.Pending, ev.State, ev.Why)

	head, tail := e.Context()
	require.NotEmpty(t, head)
	require.NotEmpty(t, tail)
	script := strings.Replace(pristine, e.Anchor, head+
		"                    ev = torch.cuda.Event()\n                    ev.record(self.forward_stream)\n"+
		"                    req.disagg_kv_sender._early_send_wait_event = ev\n"+tail, 1)
	ev = patchdef.Evaluate(&e, script, nil)
	assert.Equal(t, patchdef.Applied, ev.State)
	assert.Contains(t, ev.Why, "by the v0.2.2 script")
	assert.Contains(t, ev.At, patchdef.LineRange{From: 757, To: 757, Found: "legacy"})

	// Our replacement put into the cached-prefix path instead, the
	// overlap send left as it was: partial, never applied.
	elsewhere := strings.Replace(pristine, "        self.send_kv_chunk(req, last_chunk=False, end_idx=cached_end)\n",
		"        self.send_kv_chunk(req, last_chunk=False, end_idx=cached_end)\n"+e.Replacement, 1)
	ev = patchdef.Evaluate(&e, elsewhere, nil)
	assert.Equal(t, patchdef.Partial, ev.State, ev.Why)
	assert.Contains(t, ev.Why, "the anchor is still at lines 752-755")
}

// chunkWaitEvent runs the built-in set on root and returns the result of
// sglang-mooncake-chunk-wait-event.
func chunkWaitEvent(t *testing.T, set *patchdef.Set, root string, dry bool) Result {
	t.Helper()
	loc, err := LocateOffline(root, set.Packages())
	require.NoError(t, err)
	loc.fillDistVersions(set, root)
	for _, r := range applySet(set, loc, options{DryRun: dry}) {
		if r.ID == "sglang-mooncake-chunk-wait-event" {
			return r
		}
	}
	t.Fatal("no result for sglang-mooncake-chunk-wait-event")
	return Result{}
}

// A payload's definition written for the format before sites, whose
// legacy marker is upstream's own line elsewhere in prefill.py, is
// refused at start (78) naming the definition, the file and the line,
// and nothing of it is written; the built-in, whose marker carries its
// indentation, is not.
func TestPayloadMarkerOutsideItsSiteIsRefused(t *testing.T) {
	builtin, err := os.ReadFile("patchdef/builtin/sglang/mooncake-chunk-wait-event.toml")
	require.NoError(t, err)
	old := strings.Replace(string(builtin), "legacy_marker = '                    req.disagg_kv_sender._early_send_wait_event = ev'",
		"legacy_marker = 'req.disagg_kv_sender._early_send_wait_event = ev'", 1)
	require.NotEqual(t, string(builtin), old)
	payload := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(payload, "patches/sglang"), 0o755))
	def := filepath.Join(payload, "patches/sglang/mooncake-chunk-wait-event.toml")
	require.NoError(t, os.WriteFile(def, []byte(old), 0o644))
	set, err := loadSet(payload)
	require.NoError(t, err, "the definition itself is valid")

	trees := t.TempDir()
	require.NoError(t, fixture.Trees("testdata/trees", trees))
	root := treeRoot(filepath.Join(trees, "sglang-0.5.16"))
	before := snapshot(t, root)
	r := chunkWaitEvent(t, set, root, false)
	assert.Equal(t, patchdef.Drift, r.State)
	require.Error(t, r.Refused())
	assert.Contains(t, r.Refused().Error(), def)
	assert.Contains(t, r.Refused().Error(), "prefill.py, legacy_marker at line 1048: outside the edit's site")
	assert.Equal(t, before, snapshot(t, root), "nothing written")
}
