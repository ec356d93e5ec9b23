package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// names lists the directory's entries.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	require.NoError(t, os.Chmod(path, mode))
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	return fi.Mode()
}

func owner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestWriteReplacesContent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "lib.py")
	write(t, p, "old content that is longer than the new one\n", 0o644)

	require.NoError(t, Write(p, strings.NewReader("new\n"), Options{}))
	assert.Equal(t, "new\n", read(t, p))
	assert.Equal(t, []string{"lib.py"}, names(t, dir), "no temporary file left behind")
}

func TestWriteEmptyContent(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	write(t, p, "something", 0o644)
	require.NoError(t, Write(p, strings.NewReader(""), Options{}))
	assert.Equal(t, "", read(t, p))
}

func TestWriteBytes(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.bin")
	data := []byte{0, 1, 2, 0xff, '\n'}
	require.NoError(t, WriteBytes(p, data, Options{}))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, data, b)
	assert.Equal(t, []string{"f.bin"}, names(t, dir))
}

func TestWriteLarge(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "big")
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	require.NoError(t, Write(p, bytes.NewReader(data), Options{}))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, b))
}

func TestWriteKeepsMode(t *testing.T) {
	for _, m := range []os.FileMode{0o600, 0o644, 0o755, 0o640, 0o444, 0o700, os.ModeSetuid | 0o755, os.ModeSetgid | 0o750, os.ModeSticky | 0o644} {
		t.Run(m.String(), func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "f")
			write(t, p, "old", m)
			require.Equal(t, m, mode(t, p), "fixture mode")

			require.NoError(t, Write(p, strings.NewReader("new"), Options{}))
			assert.Equal(t, "new", read(t, p))
			assert.Equal(t, m, mode(t, p))
		})
	}
}

// A file nobody may read or write (mode 000, alone or with a set-id bit)
// keeps that mode: zero is a mode, not "unset".
func TestWriteKeepsModeZero(t *testing.T) {
	for _, m := range []os.FileMode{0, os.ModeSetuid, os.ModeSetgid | 0o010} {
		t.Run(m.String(), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "f")
			write(t, p, "old", m)
			require.Equal(t, m, mode(t, p), "fixture mode")
			require.NoError(t, Write(p, strings.NewReader("new"), Options{}))
			assert.Equal(t, m, mode(t, p))
			fi, err := os.Stat(p)
			require.NoError(t, err)
			assert.Equal(t, int64(3), fi.Size())
		})
	}
}

func TestWriteNewFileMode(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)

	dir := t.TempDir()
	p := filepath.Join(dir, "new")
	require.NoError(t, Write(p, strings.NewReader("x"), Options{}))
	assert.Equal(t, os.FileMode(0o644), mode(t, p), "a new file gets 0644, whatever the umask")
	assert.Equal(t, "x", read(t, p))

	q := filepath.Join(dir, "exe")
	require.NoError(t, Write(q, strings.NewReader("#!/bin/sh\n"), Options{Mode: 0o755}))
	assert.Equal(t, os.FileMode(0o755), mode(t, q))

	r := filepath.Join(dir, "secret")
	require.NoError(t, Write(r, strings.NewReader("s"), Options{Mode: 0o600}))
	assert.Equal(t, os.FileMode(0o600), mode(t, r))

	assert.ElementsMatch(t, []string{"new", "exe", "secret"}, names(t, dir))
}

func TestWriteOptionModeOverridesExisting(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	write(t, p, "old", 0o600)
	require.NoError(t, Write(p, strings.NewReader("new"), Options{Mode: 0o644}))
	assert.Equal(t, os.FileMode(0o644), mode(t, p))
	assert.Equal(t, "new", read(t, p))
}

func TestWriteReplacesInodeNotContent(t *testing.T) {
	// Readers that hold the old file (an open descriptor, a mapping, a
	// hard link) keep the old bytes: the file is replaced, never written
	// in place.
	dir := t.TempDir()
	p := filepath.Join(dir, "lib.so")
	write(t, p, "old library", 0o755)
	link := filepath.Join(dir, "hardlink")
	require.NoError(t, os.Link(p, link))
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	var before syscall.Stat_t
	require.NoError(t, syscall.Stat(p, &before))

	require.NoError(t, Write(p, strings.NewReader("new library"), Options{}))

	var after syscall.Stat_t
	require.NoError(t, syscall.Stat(p, &after))
	assert.NotEqual(t, before.Ino, after.Ino, "a new inode")
	assert.Equal(t, "new library", read(t, p))
	assert.Equal(t, "old library", read(t, link))
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	assert.Equal(t, "old library", string(b))
}

type failingReader struct {
	chunks []string
	err    error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, r.err
	}
	n := copy(p, r.chunks[0])
	r.chunks[0] = r.chunks[0][n:]
	if r.chunks[0] == "" {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

func TestWriteFailureLeavesOriginal(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "engine.py")
	orig := []byte("original\x00content\nwith bytes \xff\n")
	require.NoError(t, os.WriteFile(p, orig, 0o600))
	require.NoError(t, os.Chmod(p, 0o640))
	var before syscall.Stat_t
	require.NoError(t, syscall.Stat(p, &before))

	boom := errors.New("reader broke midway")
	err := Write(p, &failingReader{chunks: []string{"partial ", "new content"}, err: boom}, Options{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, boom), "the reader's error is wrapped: %v", err)
	assert.Contains(t, err.Error(), "replace "+p)

	b, rerr := os.ReadFile(p)
	require.NoError(t, rerr)
	assert.Equal(t, orig, b, "original byte-for-byte unchanged")
	assert.Equal(t, os.FileMode(0o640), mode(t, p))
	var after syscall.Stat_t
	require.NoError(t, syscall.Stat(p, &after))
	assert.Equal(t, before.Ino, after.Ino, "the same inode")
	assert.Equal(t, []string{"engine.py"}, names(t, dir), "no temporary file left behind")
}

func TestWriteFailureOnNewFileCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "new")
	err := Write(p, &failingReader{chunks: []string{"abc"}, err: io.ErrUnexpectedEOF}, Options{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, io.ErrUnexpectedEOF))
	assert.Empty(t, names(t, dir))
}

func TestWriteMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "no", "such", "f")
	err := Write(p, strings.NewReader("x"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "create temporary file")
	assert.True(t, errors.Is(err, os.ErrNotExist))
	assert.Empty(t, names(t, dir))
}

func TestWriteRefusesDirectory(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "d")
	require.NoError(t, os.Mkdir(p, 0o755))
	write(t, filepath.Join(p, "inside"), "keep", 0o644)

	err := Write(p, strings.NewReader("x"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "replace "+p+": not a regular file")
	assert.True(t, mode(t, p).IsDir())
	assert.Equal(t, "keep", read(t, filepath.Join(p, "inside")))
	assert.Equal(t, []string{"d"}, names(t, dir))
}

func TestWriteRefusesSymlink(t *testing.T) {
	// Write uses Lstat: a symlink at the path is not followed and not
	// replaced; the link and its target stay as they were.
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	write(t, target, "target content", 0o644)
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(target, link))

	err := Write(link, strings.NewReader("new"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "replace "+link+": not a regular file")
	assert.True(t, mode(t, link)&os.ModeSymlink != 0, "the link is still a link")
	dest, err := os.Readlink(link)
	require.NoError(t, err)
	assert.Equal(t, target, dest)
	assert.Equal(t, "target content", read(t, target))
	assert.ElementsMatch(t, []string{"link", "target"}, names(t, dir))
}

func TestWriteRefusesDanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere"), link))

	err := Write(link, strings.NewReader("new"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a regular file")
	assert.Equal(t, []string{"link"}, names(t, dir), "the link target was not created")
}

func TestWriteRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(p, 0o644))
	err := Write(p, strings.NewReader("x"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a regular file")
	assert.True(t, mode(t, p)&os.ModeNamedPipe != 0)
}

func TestWriteKeepOwnerAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	dir := t.TempDir()

	t.Run("kept", func(t *testing.T) {
		p := filepath.Join(dir, "owned")
		write(t, p, "old", 0o644)
		require.NoError(t, os.Chown(p, 1234, 1234))

		require.NoError(t, Write(p, strings.NewReader("new"), Options{KeepOwner: true}))
		uid, gid := owner(t, p)
		assert.Equal(t, uint32(1234), uid)
		assert.Equal(t, uint32(1234), gid)
		assert.Equal(t, "new", read(t, p))
		assert.Equal(t, os.FileMode(0o644), mode(t, p))
	})
	t.Run("set-id bits survive the chown", func(t *testing.T) {
		p := filepath.Join(dir, "suid")
		write(t, p, "old", 0o755)
		require.NoError(t, os.Chown(p, 1234, 1234))
		require.NoError(t, os.Chmod(p, os.ModeSetuid|os.ModeSetgid|0o755))

		require.NoError(t, Write(p, strings.NewReader("new"), Options{KeepOwner: true}))
		uid, gid := owner(t, p)
		assert.Equal(t, uint32(1234), uid)
		assert.Equal(t, uint32(1234), gid)
		assert.Equal(t, os.ModeSetuid|os.ModeSetgid|0o755, mode(t, p))
	})
	t.Run("not kept without the option", func(t *testing.T) {
		p := filepath.Join(dir, "notkept")
		write(t, p, "old", 0o644)
		require.NoError(t, os.Chown(p, 1234, 1234))

		require.NoError(t, Write(p, strings.NewReader("new"), Options{}))
		uid, gid := owner(t, p)
		assert.Equal(t, uint32(os.Geteuid()), uid)
		assert.Equal(t, uint32(os.Getegid()), gid)
	})
	t.Run("new file belongs to the writer", func(t *testing.T) {
		p := filepath.Join(dir, "fresh")
		require.NoError(t, Write(p, strings.NewReader("new"), Options{KeepOwner: true}))
		uid, _ := owner(t, p)
		assert.Equal(t, uint32(0), uid)
	})
	assert.ElementsMatch(t, []string{"owned", "suid", "notkept", "fresh"}, names(t, dir))
}

func TestSyncDir(t *testing.T) {
	require.NoError(t, SyncDir(t.TempDir()))
	err := SyncDir(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fsync directory")
	assert.True(t, errors.Is(err, os.ErrNotExist))
}

// Staged files are complete beside their paths and invisible until
// committed; a discarded one leaves nothing, and the path untouched.
func TestStageCommitDiscard(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.py"), filepath.Join(dir, "b.py")
	write(t, a, "old a\n", 0o640)
	write(t, b, "old b\n", 0o644)
	sa, err := Stage(a, strings.NewReader("new a\n"), Options{})
	require.NoError(t, err)
	sb, err := Stage(b, strings.NewReader("new b\n"), Options{})
	require.NoError(t, err)
	assert.Len(t, names(t, dir), 4, "two staged temporaries beside the files")
	assert.Equal(t, "old a\n", read(t, a), "staging does not touch the file")

	require.NoError(t, sa.Commit())
	sb.Discard()
	sb.Discard()
	assert.Equal(t, "new a\n", read(t, a))
	assert.Equal(t, os.FileMode(0o640), mode(t, a).Perm(), "the mode is kept")
	assert.Equal(t, "old b\n", read(t, b))
	assert.ElementsMatch(t, []string{"a.py", "b.py"}, names(t, dir))
	assert.Error(t, sa.Commit(), "a staged file is committed once")
	sa.Discard()
	assert.Equal(t, "new a\n", read(t, a), "discarding after the commit keeps it")

	// BeforeRename refusing leaves the path and removes the temporary.
	sc, err := Stage(b, strings.NewReader("new b\n"), Options{BeforeRename: func() error { return errors.New("changed") }})
	require.NoError(t, err)
	assert.EqualError(t, sc.Commit(), "changed")
	assert.Equal(t, "old b\n", read(t, b))
	assert.ElementsMatch(t, []string{"a.py", "b.py"}, names(t, dir))
}

// A failed read of the source keeps the source's path in the message; only
// errors about the temporary file, which the message names, lose theirs.
func TestWriteSourceErrorNamesTheSource(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	src := &fs.PathError{Op: "read", Path: "/payload/lib/x.so", Err: syscall.EIO}
	err := Write(p, &failingReader{chunks: []string{"abc"}, err: src}, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "read /payload/lib/x.so: input/output error")
	assert.ErrorIs(t, err, syscall.EIO)
	assert.Empty(t, names(t, dir))
}

// RemoveStale removes a writer's leftovers by name and by proof: regular
// files of this user or of the replaced file's owner. A link, a directory
// or another user's file with such a name stays.
func TestRemoveStaleOnlyWhatAWriterLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to other uids (chown); run the tests as root, as CI does")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "m.py")
	require.NoError(t, os.WriteFile(path, []byte("x\n"), 0o644))
	require.NoError(t, os.Chown(path, 1000, 1000))
	stale := func(name string, uid int) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		require.NoError(t, os.Chown(p, uid, uid))
		return p
	}
	ours := stale(".m.py.tmp-1", 0)
	owners := stale(".m.py.tmp-2", 1000) // staged with KeepOwner, then killed
	theirs := stale(".m.py.tmp-3", 4242)
	link := filepath.Join(dir, ".m.py.tmp-4")
	require.NoError(t, os.Symlink(path, link))
	sub := filepath.Join(dir, ".m.py.tmp-5")
	require.NoError(t, os.Mkdir(sub, 0o755))

	assert.ElementsMatch(t, []string{ours, owners}, RemoveStale(path))
	for _, p := range []string{theirs, link, sub, path} {
		_, err := os.Lstat(p)
		assert.NoError(t, err, "%s stays", p)
	}
}
