package procgroup

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunCompletes(t *testing.T) {
	cmd := Command(context.Background(), "sh", "-c", "echo out; echo err >&2")
	var out, errb Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, Run(context.Background(), cmd))
	assert.Equal(t, "out\n", out.String())
	assert.Equal(t, "err\n", errb.String())
}

// At the deadline the group is killed, a grandchild included, and Run
// returns without waiting for the command's own end.
func TestRunDeadline(t *testing.T) {
	timeout := 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := Command(ctx, "sh", "-c", "sleep 600 & sleep 600")
	var out Buffer
	cmd.Stdout = &out
	start := time.Now()
	Run(ctx, cmd)
	assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 600*time.Second)
	assert.Equal(t, "", out.String())
}

func TestRunStartFails(t *testing.T) {
	cmd := Command(context.Background(), "/nonexistent/program")
	assert.Error(t, Run(context.Background(), cmd))
}
