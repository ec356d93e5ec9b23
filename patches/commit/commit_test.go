package commit

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/fileid"
)

// file lays down path with content and returns its File, to be written
// with want.
func file(t *testing.T, path, content, want string) *File {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o640))
	id, ok := fileid.Lstat(path)
	require.True(t, ok)
	return &File{Path: path, Read: content, ReadID: id, Content: want}
}

func TestGroupIsWrittenWhole(t *testing.T) {
	dir := t.TempDir()
	a := file(t, filepath.Join(dir, "a.py"), "a = 1\n", "a = 2\n")
	b := file(t, filepath.Join(dir, "b.py"), "b = 1\n", "b = 2\n")
	same := file(t, filepath.Join(dir, "c.py"), "c = 1\n", "c = 1\n")
	g := &Group{Files: []*File{a, b, same}}
	Run([]*Group{g}, make([]byte, 3))
	require.NoError(t, g.Err)
	for _, f := range []*File{a, b, same} {
		got, err := os.ReadFile(f.Path)
		require.NoError(t, err)
		assert.Equal(t, f.Content, string(got))
		assert.True(t, f.FinalOK, f.Path)
		now, _ := fileid.Lstat(f.Path)
		assert.Equal(t, now, f.Final, f.Path)
	}
	st, err := os.Stat(a.Path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm(), "mode kept")
}

// A rename that fails puts back what the group had renamed, and the
// group fails; a group beside it is written.
func TestFailedRenameRestoresTheGroup(t *testing.T) {
	dir := t.TempDir()
	a := file(t, filepath.Join(dir, "a.py"), "a = 1\n", "a = 2\n")
	b := file(t, filepath.Join(dir, "b.py"), "b = 1\n", "b = 2\n")
	other := file(t, filepath.Join(dir, "o.py"), "o = 1\n", "o = 2\n")
	boom := errors.New("rename failed")
	rename := Rename
	Rename = func(s *atomicfile.Staged) error {
		if s.Path() == b.Path {
			return boom
		}
		return rename(s)
	}
	t.Cleanup(func() { Rename = rename })
	g, h := &Group{Files: []*File{a, b}}, &Group{Files: []*File{other}}
	Run([]*Group{g, h}, make([]byte, 64))
	assert.ErrorIs(t, g.Err, boom)
	assert.NoError(t, g.RestoreErr)
	assert.NoError(t, h.Err)
	for path, want := range map[string]string{a.Path: "a = 1\n", b.Path: "b = 1\n", other.Path: "o = 2\n"} {
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, want, string(got), path)
	}
	assert.False(t, a.FinalOK)
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	assert.Empty(t, left, "no temporary file left")
}

// Another writer between the read and the rename: nothing of theirs is
// overwritten, and the group says so.
func TestAnotherWriterIsNotOverwritten(t *testing.T) {
	dir := t.TempDir()
	a := file(t, filepath.Join(dir, "a.py"), "a = 1\n", "a = 2\n")
	BeforeRename = func(path string) { require.NoError(t, os.WriteFile(path, []byte("theirs\n"), 0o640)) }
	t.Cleanup(func() { BeforeRename = nil })
	g := &Group{Files: []*File{a}}
	Run([]*Group{g}, make([]byte, 64))
	assert.ErrorIs(t, g.Err, ErrChanged)
	got, err := os.ReadFile(a.Path)
	require.NoError(t, err)
	assert.Equal(t, "theirs\n", string(got))
}

// An early stage is taken only for the content written.
func TestEarlyStageOfAnotherContentIsDiscarded(t *testing.T) {
	dir := t.TempDir()
	a := file(t, filepath.Join(dir, "a.py"), "a = 1\n", "a = 2\n")
	a.StageEarly()
	assert.True(t, a.Staging())
	a.Content = "a = 3\n"
	g := &Group{Files: []*File{a}}
	Run([]*Group{g}, make([]byte, 64))
	require.NoError(t, g.Err)
	got, err := os.ReadFile(a.Path)
	require.NoError(t, err)
	assert.Equal(t, "a = 3\n", string(got))
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	assert.Empty(t, left, "the early stage was discarded")
}
