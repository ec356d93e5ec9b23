package abi

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A FIFO planted as pyvenv.cfg is not read: the name decides, and the
// start does not hang on the open.
func TestVenvVersionIgnoresAFIFO(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bin", "python3")
	require.NoError(t, os.MkdirAll(filepath.Dir(exe), 0o755))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pyvenv.cfg"), 0o644))
	done := make(chan bool)
	go func() { _, _, _, ok := venvVersion(exe); done <- ok }()
	select {
	case ok := <-done:
		assert.False(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("venvVersion blocked on a FIFO pyvenv.cfg")
	}
}
