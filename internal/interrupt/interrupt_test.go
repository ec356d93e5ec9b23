package interrupt

import (
	"context"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A stop signal cancels the context and is remembered, with its code.
func TestSignalCancelsAndIsRemembered(t *testing.T) {
	ctx, w := Start(context.Background())
	defer w.Stop()
	assert.Nil(t, w.Signal())
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
	<-ctx.Done() // the event, not a timer
	assert.Equal(t, syscall.SIGTERM, w.Signal())
	assert.Equal(t, 143, Code(w.Signal()))
	assert.Equal(t, 130, Code(syscall.SIGINT))
}
