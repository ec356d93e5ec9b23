package weights

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func write(t *testing.T, dir string, files map[string]int) {
	t.Helper()
	for name, size := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, make([]byte, size), 0o644))
	}
}

// safetensors are what the engine loads when both are shipped; .bin
// counts only without them; one level down when the directory has none.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]int{"a.safetensors": 100, "b.safetensors": 20, "pytorch_model.bin": 5000, "config.json": 10})
	s, err := Read(dir)
	require.NoError(t, err)
	assert.Equal(t, 2, s.Count)
	assert.Equal(t, uint64(120), s.Size)
	assert.Equal(t, "*.safetensors", s.Pattern)

	dir = t.TempDir()
	write(t, dir, map[string]int{"pytorch_model.bin": 5000, "x.pt": 7})
	s, err = Read(dir)
	require.NoError(t, err)
	assert.Equal(t, uint64(5000), s.Size)
	assert.Equal(t, "*.bin", s.Pattern)

	dir = t.TempDir()
	write(t, dir, map[string]int{"snap/m.pt": 7, ".git/x.bin": 9})
	s, err = Read(dir)
	require.NoError(t, err)
	assert.Equal(t, uint64(7), s.Size)
	assert.True(t, s.Subdirs)

	_, err = Read(filepath.Join(dir, "missing"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.True(t, IsGGUF("/m/q4.GGUF"))
}
