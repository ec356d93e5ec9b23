package capability

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/fileid"
)

// A small file is kept with its content sum (a new mount can check it by
// content); one over fileid.SmallFile with its identity alone (summing it
// would read it whole, more than the load check reads).
func TestConsultSumsSmallFilesOnly(t *testing.T) {
	dir := t.TempDir()
	small, large := filepath.Join(dir, "small.so"), filepath.Join(dir, "large.so")
	require.NoError(t, os.WriteFile(small, []byte("small"), 0o644))
	require.NoError(t, os.WriteFile(large, make([]byte, fileid.SmallFile+1), 0o644))

	c, ok := consult(small, nil)
	require.True(t, ok)
	require.Equal(t, fileid.SumBytes([]byte("small")), c.Sum)
	id, _ := fileid.Stat(small)
	require.Equal(t, id, c.ID)

	c, ok = consult(large, nil)
	require.True(t, ok)
	require.Empty(t, c.Sum, "a large file was summed")
	id, _ = fileid.Stat(large)
	require.Equal(t, id, c.ID)

	c, ok = consult(dir, nil) // a directory: its names
	require.True(t, ok)
	require.NotEmpty(t, c.Sum)
}
