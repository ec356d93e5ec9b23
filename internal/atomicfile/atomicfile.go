// Package atomicfile replaces files so that every reader, and every process
// that survives a crash, sees either the old content or the new, never a
// torn mix, and so that processes that have the old file mapped keep their
// pages (writing into a mapped inode gives them SIGBUS).
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/infera/infera-exec/internal/boundedread"
)

// Options say what the new file looks like.
type Options struct {
	// Mode of the new file. When zero, an existing file's mode is kept
	// exactly (permission and set-id bits; 000 stays 000), and a new file
	// gets 0644.
	Mode os.FileMode
	// KeepOwner copies the uid/gid of the file being replaced. Failing to
	// do so as a non-root user is not an error: the file then belongs to
	// the writer, as any file it creates would.
	KeepOwner bool
	// NoSync skips both fsyncs: readers still see the old or the new file,
	// never a torn one, but after a power loss the file may be lost. For
	// diagnostics only, where a start should not wait for the disk.
	NoSync bool
	// BeforeRename, when set, runs after the new file is complete and
	// just before it replaces path; an error leaves path untouched. A
	// writer uses it to make sure path is still the file it read (another
	// writer's change would otherwise be silently overwritten).
	BeforeRename func() error
}

// Write replaces path with the bytes read from r: a temporary file in the
// same directory, fsync, chmod/chown, rename(2), fsync of the directory.
// On any error the temporary file is removed and path is untouched.
func Write(path string, r io.Reader, opt Options) error {
	s, err := Stage(path, r, opt)
	if err != nil {
		return err
	}
	if err := s.Commit(); err != nil {
		return err
	}
	if opt.NoSync {
		return nil
	}
	return SyncDir(filepath.Dir(path))
}

// Staged is the new content of a file, complete (and, unless NoSync,
// fsynced) in a temporary file beside it with its mode and owner, not yet
// in place. A writer replacing several files stages them all (their
// fsyncs can run at once), then commits each, then syncs each directory
// once: every file is still either its old or its new content at every
// instant, and nothing is renamed before every new content is durable.
type Staged struct {
	path, tmp string
	opt       Options
	done      bool // renamed or removed
}

// Stage writes the bytes read from r into a temporary file in path's
// directory, as Write does before its rename. On error nothing is left
// behind.
func Stage(path string, r io.Reader, opt Options) (s *Staged, err error) {
	dir := filepath.Dir(path)
	// mode is what the new file gets: opt.Mode when given, else the
	// replaced file's own, whatever it is (000 included), else 0644.
	mode, decided := opt.Mode, opt.Mode != 0
	var uid, gid = -1, -1
	if fi, statErr := os.Lstat(path); statErr == nil {
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("replace %s: not a regular file (%s)", path, fi.Mode().Type())
		}
		if !decided {
			mode, decided = fi.Mode().Perm()|(fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)), true
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && opt.KeepOwner {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	} else if !errors.Is(statErr, os.ErrNotExist) {
		return nil, fmt.Errorf("replace %s: %w", path, statErr)
	}
	if !decided {
		mode = 0o644
	}

	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("replace %s: create temporary file: %w", path, err)
	}
	tmpName := tmp.Name()
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	if _, err = io.Copy(tmp, r); err != nil {
		return nil, fmt.Errorf("replace %s: write %s: %w", path, tmpName, boundedread.ErrFor(tmpName, err))
	}
	if uid >= 0 {
		if chErr := tmp.Chown(uid, gid); chErr != nil && !errors.Is(chErr, os.ErrPermission) {
			return nil, fmt.Errorf("replace %s: chown %s to %d:%d: %w", path, tmpName, uid, gid, boundedread.ErrFor(tmpName, chErr))
		}
	}
	// chmod after chown: chown clears the set-id bits.
	if err = tmp.Chmod(mode); err != nil {
		return nil, fmt.Errorf("replace %s: chmod %s: %w", path, tmpName, boundedread.ErrFor(tmpName, err))
	}
	if !opt.NoSync {
		if err = tmp.Sync(); err != nil {
			return nil, fmt.Errorf("replace %s: fsync %s: %w", path, tmpName, boundedread.ErrFor(tmpName, err))
		}
	}
	if err = tmp.Close(); err != nil {
		return nil, fmt.Errorf("replace %s: close %s: %w", path, tmpName, boundedread.ErrFor(tmpName, err))
	}
	return &Staged{path: path, tmp: tmpName, opt: opt}, nil
}

// Path is the file the staged content replaces.
func (s *Staged) Path() string { return s.path }

// Commit runs BeforeRename and renames the staged file over its path. It
// does not sync the directory (SyncDir does, once per directory). On error
// the temporary file is removed and path is untouched.
func (s *Staged) Commit() (err error) {
	if s.done {
		return fmt.Errorf("replace %s: already committed or discarded", s.path)
	}
	s.done = true
	defer func() {
		if err != nil {
			os.Remove(s.tmp)
		}
	}()
	if s.opt.BeforeRename != nil {
		if err = s.opt.BeforeRename(); err != nil {
			return err
		}
	}
	if err = os.Rename(s.tmp, s.path); err != nil {
		return fmt.Errorf("replace %s: %w", s.path, err)
	}
	return nil
}

// Discard removes the staged file unless it was committed; path is
// untouched. Safe to call more than once.
func (s *Staged) Discard() {
	if !s.done {
		s.done = true
		os.Remove(s.tmp)
	}
}

// WriteBytes is Write for content already in memory.
func WriteBytes(path string, data []byte, opt Options) error {
	return Write(path, bytes.NewReader(data), opt)
}

// SyncDir fsyncs a directory so that a rename in it survives a crash.
// Filesystems that cannot fsync a directory (EINVAL) are not an error.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// RemoveStale deletes the temporary files a writer of path left behind when
// it was killed between creating and renaming them. Call it only while no
// other writer can be at work on path (under the caller's lock). A file
// is such a leftover by its name (.NAME.tmp-*) and by proof: a regular
// file owned by this process's user, or by path's own owner (a stage with
// KeepOwner takes the owner of the file it replaces); anything else there
// (a link, a directory, another user's file) stays.
func RemoveStale(path string) []string {
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+globEscape(filepath.Base(path))+".tmp-*"))
	if len(matches) == 0 {
		return nil
	}
	owners := map[uint32]bool{uint32(os.Geteuid()): true}
	if uid, ok := ownerOf(path); ok {
		owners[uid] = true
	}
	var removed []string
	for _, m := range matches {
		if uid, ok := ownerOf(m); !ok || !owners[uid] {
			continue
		}
		if os.Remove(m) == nil {
			removed = append(removed, m)
		}
	}
	return removed
}

// ownerOf is the owner of the regular file at path, not following a link.
func ownerOf(path string) (uint32, bool) {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

func globEscape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', '\\':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}
