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

// The SGLang fork branches that record a source_event of their own for
// hidden-state chunks only, and the one whose sender says whether a chunk
// was queued (testdata/ANCHORS.md names the revisions the trees hold
// unchanged): a start writes the chunk-wait-event fix with the
// variant for that branch's send path, the result compiles, every call
// of the sender's send passes the wait event, the overlap branch's send
// is preceded by an event recorded on the forward stream, and the next
// start finds the patch applied and writes nothing.
func TestChunkWaitEventOnSourceEventForks(t *testing.T) {
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	trees := t.TempDir()
	require.NoError(t, fixture.Trees("testdata/trees", trees))
	for _, c := range []struct {
		tree, variant string
		sourceEvent   bool // the branch's sender records a source_event of its own
	}{
		{"sglang-source-event", "source-event", true},
		{"sglang-source-event-split", "source-event-split", true},
		{"sglang-source-event-split-item", "source-event-split-item", true},
		{"sglang-source-event-final", "source-event-final", true},
		{"sglang-queued-bool", "queued-bool", false},
	} {
		t.Run(c.tree, func(t *testing.T) {
			root := treeRoot(filepath.Join(trees, c.tree))
			dis := filepath.Join(root, "sglang/srt/disaggregation")
			conn := filepath.Join(dis, "mooncake/conn.py")
			pristine, err := os.ReadFile(conn)
			require.NoError(t, err)
			assert.Equal(t, c.sourceEvent, strings.Contains(string(pristine), "def set_source_event("), "a source_event branch or not")
			require.NotContains(t, string(pristine), "_early_send_wait_event", "the branch's Mooncake sender never reads the early-send event")

			r := chunkWaitEvent(t, set, root, false)
			require.Equal(t, patchdef.Applied, r.State, r.Why)
			require.Equal(t, "applied", r.Action)
			assert.Equal(t, c.variant, r.Variant)

			after, err := os.ReadFile(conn)
			require.NoError(t, err)
			send := pyBlock(t, string(after), "    def send(")
			assert.Contains(t, send, `wait_event = getattr(self, "_early_send_wait_event", None)`)
			calls := strings.Count(send, "self.kv_mgr.add_transfer_request(")
			require.Equal(t, 2, calls, "send's non-final and final calls")
			assert.Equal(t, calls, strings.Count(send, "wait_event=wait_event,"), "every call passes the wait event")
			assert.Contains(t, pyBlock(t, string(after), "    def add_transfer_request("), "wait_event=wait_event,", "the work item carries it")
			assert.Contains(t, string(after), "kv_chunk.wait_event.synchronize()", "the transfer worker waits on it")

			prefill, err := os.ReadFile(filepath.Join(dis, "prefill.py"))
			require.NoError(t, err)
			lines := strings.Split(string(prefill), "\n")
			found := 0
			for i, l := range lines {
				if strings.TrimSpace(l) == overlapSend && i >= 12 && strings.Contains(strings.Join(lines[i-12:i], "\n"), "if self.enable_overlap") {
					found++
					assert.Contains(t, lines[i-1], "req.disagg_kv_sender._early_send_wait_event = chunk_done", "line %d", i+1)
				}
			}
			assert.Equal(t, 1, found, "one overlap send, with its event")

			if python, err := exec.LookPath("python3"); err != nil {
				t.Error("python3 is needed to compile the patched files")
			} else {
				for _, e := range r.Edits {
					out, err := exec.Command(python, "-c", "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')", e.Path).CombinedOutput()
					assert.NoError(t, err, "%s: %s", e.Path, out)
				}
			}

			again := chunkWaitEvent(t, set, root, false)
			assert.Equal(t, patchdef.Applied, again.State, again.Why)
			assert.Equal(t, c.variant, again.Variant)
			assert.Equal(t, "none", again.Action)
		})
	}
}

// pyBlock is the Python block of content opened by the first line that
// starts with head: that line and every following line indented deeper
// than it, or blank.
func pyBlock(t *testing.T, content, head string) string {
	t.Helper()
	lines := strings.Split(content, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, head) {
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " "))
		j := i + 1
		for ; j < len(lines); j++ {
			s := lines[j]
			if strings.TrimSpace(s) != "" && len(s)-len(strings.TrimLeft(s, " ")) <= indent && !strings.HasPrefix(strings.TrimSpace(s), ")") {
				break
			}
		}
		return strings.Join(lines[i:j], "\n")
	}
	t.Fatalf("no line starts with %q", head)
	return ""
}

// A vLLM fork's scheduler whose sending loop skips a report for a removed
// request by itself while its receiving loop still asserts (the tree holds
// the file unchanged; testdata/ANCHORS.md): a start writes the guard into
// the receiving loop alone, the file compiles, neither loop asserts on the
// request any more, and the next start writes nothing.
func TestSchedulerGuardOnReceivingLoopFork(t *testing.T) {
	set, err := loadSet(filepath.Join(t.TempDir(), "no-payload"))
	require.NoError(t, err)
	trees := t.TempDir()
	require.NoError(t, fixture.Trees("testdata/trees", trees))
	root := treeRoot(filepath.Join(trees, "vllm-sched-receiving"))
	sched := filepath.Join(root, "vllm/v1/core/sched/scheduler.py")
	const id = "vllm-scheduler-kv-xfer-finished-guard"
	result := func() Result {
		for _, r := range applySet(set, locateTree(t, set, root), options{}) {
			if r.ID == id {
				return r
			}
		}
		t.Fatal("no result for " + id)
		return Result{}
	}
	fn := func() string {
		data, err := os.ReadFile(sched)
		require.NoError(t, err)
		return pyBlock(t, string(data), "    def _update_from_kv_xfer_finished(")
	}
	require.Equal(t, 1, strings.Count(fn(), "assert req_id in self.requests"), "the receiving loop asserts, the sending loop does not")

	r := result()
	require.Equal(t, patchdef.Applied, r.State, r.Why)
	assert.Equal(t, "applied", r.Action)
	assert.Equal(t, "receiving-loop", r.Variant)
	after := fn()
	assert.NotContains(t, after, "assert req_id in self.requests")
	assert.Contains(t, after, "(recving); ignored")
	assert.Contains(t, after, "if req is None:", "the fork's own sending guard stays")
	if python, err := exec.LookPath("python3"); err != nil {
		t.Error("python3 is needed to compile the patched file")
	} else {
		out, err := exec.Command(python, "-c", "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')", sched).CombinedOutput()
		assert.NoError(t, err, "%s", out)
	}
	again := result()
	assert.Equal(t, patchdef.Applied, again.State, again.Why)
	assert.Equal(t, "none", again.Action)
}
