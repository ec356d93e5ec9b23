package termination

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMessageIsOneLineWithinWhatTheKubeletReads(t *testing.T) {
	assert.Equal(t, "infera-exec: exit 78: no tree py311 in /overlay; set X\n", Message(78, "no tree py311\tin /overlay;\nset X"))
	assert.Equal(t, "infera-exec: exit 69: a b\n", Message(69, "a\n b"), "a run of blanks and newlines is one space")
	long := Message(78, strings.Repeat("é", 3000))
	assert.Len(t, long, Max-1, "cut at a character's boundary below 4096 bytes, é being two")
	assert.True(t, utf8.ValidString(long))
	assert.True(t, strings.HasSuffix(long, "é\n"))
}

// Only a regular file of one link that exists is written; nothing is
// created, no link is followed, a FIFO does not block, and a file that
// is refused keeps its content.
func TestWriteOnlyToAFileOfItsOwn(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "termination-log")
	require.NoError(t, os.WriteFile(file, []byte("an earlier, longer message that must go entirely\n"), 0o666))
	ok, err := Write(file, 78, "INFERA_EXEC_CHDIR /nope does not exist")
	require.NoError(t, err)
	assert.True(t, ok)
	got, _ := os.ReadFile(file)
	assert.Equal(t, "infera-exec: exit 78: INFERA_EXEC_CHDIR /nope does not exist\n", string(got))

	cleared, err := Clear(file)
	require.NoError(t, err)
	assert.True(t, cleared)
	got, _ = os.ReadFile(file)
	assert.Empty(t, got, "a start that execs leaves the file empty")
	cleared, err = Clear(file)
	require.NoError(t, err)
	assert.False(t, cleared, "an empty file is left alone")

	missing := filepath.Join(dir, "absent")
	ok, err = Write(missing, 78, "x")
	assert.NoError(t, err, "no file: no kubelet asked for one")
	assert.False(t, ok)
	assert.NoFileExists(t, missing, "never created")

	victim := filepath.Join(dir, "victim")
	keep := []byte("not ours\n")
	require.NoError(t, os.WriteFile(victim, keep, 0o644))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(victim, link))
	hard := filepath.Join(dir, "hard")
	require.NoError(t, os.Link(victim, hard))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o666))
	for _, c := range []struct{ path, why string }{
		{link, "symbolic link"},
		{hard, "2 links"},
		{fifo, "no such device or address"}, // O_NONBLOCK: no reader, no wait
		{dir, "is a directory"},
	} {
		ok, err := Write(c.path, 78, "x")
		assert.False(t, ok, c.path)
		if assert.Error(t, err, c.path) {
			assert.Contains(t, err.Error(), c.why)
		}
		_, err = Clear(c.path)
		assert.Error(t, err, c.path)
		got, _ := os.ReadFile(victim)
		assert.Equal(t, keep, got, "%s: the file behind it is left as it was", c.path)
	}
}
