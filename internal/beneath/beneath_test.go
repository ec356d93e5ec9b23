package beneath

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// RemoveAll removes a tree with everything in it and never follows a link
// out of it: a link to a directory elsewhere goes, what it names stays.
func TestRemoveAllDoesNotFollowLinks(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	keep := filepath.Join(outside, "keep")
	require.NoError(t, os.WriteFile(keep, []byte("x"), 0o644))
	tree := filepath.Join(root, "tree")
	require.NoError(t, os.MkdirAll(filepath.Join(tree, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "a", "b", "f"), nil, 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(tree, "a", "out")))
	require.NoError(t, os.Chmod(filepath.Join(tree, "a", "b"), 0o500)) // read-only: made writable to be emptied

	fd, err := unix.Open(root, Flags, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &st))
	names, err := Names(fd, root)
	require.NoError(t, err)
	assert.Equal(t, []string{"tree"}, names)

	require.NoError(t, RemoveAll(fd, "tree", st.Dev))
	assert.NoDirExists(t, tree)
	assert.FileExists(t, keep, "the link's target is untouched")
	require.NoError(t, RemoveAll(fd, "tree", st.Dev), "an absent name is nothing to do")

	// A link at the name itself: the link goes.
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "link")))
	_, err = OpenAt(fd, "link")
	assert.True(t, err == unix.ELOOP || err == unix.ENOTDIR, "OpenAt does not follow a link: %v", err)
	require.NoError(t, RemoveAll(fd, "link", st.Dev))
	assert.FileExists(t, keep)
}
