package inheritfd

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childFDs is the descriptors a child process has open.
func childFDs(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("sh", "-c", "ls /proc/$$/fd").Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}

// A descriptor infera-exec was given reaches no helper child while held,
// and reaches the worker again once released.
func TestHoldKeepsInheritedDescriptorsFromChildren(t *testing.T) {
	var p [2]int
	require.NoError(t, syscall.Pipe(p[:])) // no O_CLOEXEC: as a parent passes one
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	fd := strconv.Itoa(p[0])
	require.Contains(t, childFDs(t), fd, "inherited without Hold")

	got := Hold()
	assert.Contains(t, got, p[0])
	assert.Contains(t, got, p[1])
	assert.NotContains(t, childFDs(t), fd, "a helper child does not get it")

	Release()
	assert.Contains(t, childFDs(t), fd, "the worker gets it again")
}
