package overlay

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An index with the list gives it; an index written before the list
// existed (schema 1, entries only), or no index, gives the v0.2.2 list;
// both kinds of index stay readable.
func TestPayloadEnvNames(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "py312"), 0o755))
	names, fromIndex := PayloadEnvNames(root)
	assert.False(t, fromIndex)
	assert.Contains(t, names, "INFERA_KVD_SOCKET")

	_, err := WriteIndex(root)
	require.NoError(t, err)
	names, fromIndex = PayloadEnvNames(root)
	assert.False(t, fromIndex, "an index without the list: the built-in one")
	assert.Equal(t, LegacyEnvNames, names)
	_, _, err = ReadIndex(root)
	require.NoError(t, err)

	_, err = WriteIndexEnv(root, []string{"INFERA_X", "INFERA_A", "INFERA_X"})
	require.NoError(t, err)
	names, fromIndex = PayloadEnvNames(root)
	assert.True(t, fromIndex)
	assert.Equal(t, []string{"INFERA_A", "INFERA_X"}, names)
	ix, _, err := ReadIndex(root)
	require.NoError(t, err)
	assert.Equal(t, []string{"INFERA_A", "INFERA_X"}, ix.EnvNames)
}

func TestPythonEnvNames(t *testing.T) {
	src := []byte(`a = os.environ.get("INFERA_KVD_SOCKET")
b = os.getenv('INFERA_DRAIN_TIMEOUT', "30")
# INFERA_IN_A_COMMENT is not read
c = f"INFERA_{x}"
`)
	assert.Equal(t, []string{"INFERA_DRAIN_TIMEOUT", "INFERA_KVD_SOCKET"}, PythonEnvNames(src))
}
