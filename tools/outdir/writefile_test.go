package outdir

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A write that fails leaves the old file byte for byte and no temporary
// file beside it; one that succeeds replaces it whole, mode 0644.
func TestWriteFileIsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "out.tar")
	require.NoError(t, os.WriteFile(file, []byte("old"), 0o600))

	err := WriteFile(file, func(w io.Writer) error {
		_, _ = io.WriteString(w, "half")
		return errors.New("broken")
	})
	require.EqualError(t, err, "broken")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "old", string(b))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "no temporary file left")

	require.NoError(t, WriteFile(file, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }))
	b, err = os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "new", string(b))
	fi, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	ents, err = os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, ents, 1)
}
