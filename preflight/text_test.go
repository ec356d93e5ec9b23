package preflight

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWriteTextFitsAndOrders(t *testing.T) {
	long := strings.Repeat("a fairly long sentence that goes on ", 6)
	var b strings.Builder
	WriteText(&b, []Result{
		{Name: "nofile", Status: Pass, Seen: "hard limit 1048576"},
		{Name: "shm", Status: Fail, Severity: Warn, Seen: "/dev/shm is 64 MiB", Why: long, Do: "mount a memory emptyDir at /dev/shm"},
		{Name: "placeholders", Status: Fail, Severity: Error, Seen: "<MODEL_DIR> in argument 4", Why: long, Do: "replace it"},
		{Name: "rdma", Status: Skipped, Seen: "not a prefill/decode worker"},
	})
	out := b.String()
	for _, l := range strings.Split(out, "\n") {
		assert.LessOrEqual(t, len(l), Width, "%q", l)
	}
	assert.True(t, strings.HasPrefix(out, "infera-exec doctor: 1 error, 1 warning, 0 notes, 1 passed, 1 skipped\n"))
	assert.Less(t, strings.Index(out, "ERROR  placeholders"), strings.Index(out, "WARN   shm"), "errors first")
	assert.Contains(t, out, "       skip: INFERA_PREFLIGHT_SKIP=placeholders\n")
	assert.Contains(t, out, "ok     nofile        hard limit 1048576\n")
	assert.Contains(t, out, "skip   rdma          not a prefill/decode worker\n")
}
