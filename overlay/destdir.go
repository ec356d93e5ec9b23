package overlay

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/infera/infera-exec/internal/beneath"
	"github.com/infera/infera-exec/internal/boundedread"
	"golang.org/x/sys/unix"
)

// The install destination is worked on through descriptors: DEST is
// opened once, every directory below it is reached from there one
// component at a time with O_NOFOLLOW, and every change is made relative
// to the directory that holds it (openat, mkdirat, renameat, unlinkat,
// fchmod). A link planted anywhere in DEST is never followed, and a
// rename of DEST (or of its parents) while the install runs changes
// nothing about where the bytes go.

const dirFlags = beneath.Flags

// lstatAt is fstatat without following a link at name.
func lstatAt(dirfd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

func isDirMode(m uint32) bool  { return m&unix.S_IFMT == unix.S_IFDIR }
func isRegMode(m uint32) bool  { return m&unix.S_IFMT == unix.S_IFREG }
func isLinkMode(m uint32) bool { return m&unix.S_IFMT == unix.S_IFLNK }

// dirWalker reaches directories below a root descriptor, keeping open the
// chain of the last one reached, so that walking the sorted entries of an
// index opens each directory about once. With mkdir it creates what is
// missing (mode 0700 until the caller sets the final mode).
type dirWalker struct {
	root  int
	mkdir bool
	names []string
	fds   []int
}

// at returns a descriptor of the directory rel ("." or "" for the root),
// valid until the next call or close; it must not be closed.
func (w *dirWalker) at(rel string) (int, error) {
	var parts []string
	if rel != "" && rel != "." {
		parts = strings.Split(rel, "/")
	}
	common := 0
	for common < len(parts) && common < len(w.names) && parts[common] == w.names[common] {
		common++
	}
	for len(w.fds) > common {
		unix.Close(w.fds[len(w.fds)-1])
		w.fds, w.names = w.fds[:len(w.fds)-1], w.names[:len(w.names)-1]
	}
	for _, p := range parts[common:] {
		parent := w.root
		if len(w.fds) > 0 {
			parent = w.fds[len(w.fds)-1]
		}
		if w.mkdir {
			if err := unix.Mkdirat(parent, p, 0o700); err != nil && err != unix.EEXIST {
				return -1, err
			}
		}
		fd, err := beneath.OpenAt(parent, p)
		if err != nil {
			return -1, err
		}
		w.fds, w.names = append(w.fds, fd), append(w.names, p)
	}
	if len(w.fds) == 0 {
		return w.root, nil
	}
	return w.fds[len(w.fds)-1], nil
}

func (w *dirWalker) close() {
	for _, fd := range w.fds {
		unix.Close(fd)
	}
	w.fds, w.names = nil, nil
}

// createAt creates name in dirfd, exclusively and without following a
// link: an entry already there (of anyone) is an error, never written
// through.
func createAt(dirfd int, name string, perm uint32) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// replaceFileAt puts a new file with data at name in dirfd: whatever was
// there (a link planted by someone, a directory) is removed first, and
// the new file is created exclusively.
func replaceFileAt(dirfd int, name string, data []byte, dev uint64) error {
	if err := beneath.RemoveAll(dirfd, name, dev); err != nil {
		return err
	}
	f, err := createAt(dirfd, name, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// tmpName is a fresh name for a temporary entry beside name.
func tmpName(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// writeAtomicAt replaces name in dirfd with data (mode 0644): a temporary
// file created exclusively beside it, fsync, renameat. Readers see the
// old or the new content; a link at name is replaced, not followed.
func writeAtomicAt(dirfd int, name string, data []byte) error {
	var (
		f   *os.File
		tmp string
		err error
	)
	for i := 0; i < 10; i++ {
		tmp = tmpName("." + name + ".tmp-")
		if f, err = createAt(dirfd, tmp, 0o600); err != unix.EEXIST {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("replace %s: %w", name, err)
	}
	return nil
}

// readFileAt reads the regular file name in dirfd, bounded, without
// following a link.
func readFileAt(dirfd int, name string, max int64) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if !isRegMode(st.Mode) {
		return nil, fmt.Errorf("%s: %w", name, boundedread.ErrNotRegular)
	}
	return boundedread.ReadAll(f, name, max)
}

// splitRel is a slash path's directory and last name.
func splitRel(p string) (dir, name string) {
	return path.Dir(p), path.Base(p)
}
