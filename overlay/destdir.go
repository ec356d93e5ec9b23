package overlay

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

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

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openDirAt opens the directory name in dirfd without following a link.
func openDirAt(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, dirFlags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// lstatAt is fstatat without following a link at name.
func lstatAt(dirfd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

func isDirMode(m uint32) bool  { return m&unix.S_IFMT == unix.S_IFDIR }
func isRegMode(m uint32) bool  { return m&unix.S_IFMT == unix.S_IFREG }
func isLinkMode(m uint32) bool { return m&unix.S_IFMT == unix.S_IFLNK }

// namesAt lists the directory open at fd (a duplicate is read, so fd
// keeps its offset and stays open).
func namesAt(fd int, name string) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(dup)
	f := os.NewFile(uintptr(dup), name)
	defer f.Close()
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

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
		fd, err := openDirAt(parent, p)
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

// removeAllAt removes name from the directory dirfd, and everything in it
// when it is a directory, without following any link and without
// crossing into another filesystem (dev is the destination's). A
// directory of another uid is first made the remover's and closed to
// everyone else (as root), so that its owner cannot keep filling it.
func removeAllAt(dirfd int, name string, dev uint64) error {
	uerr := unix.Unlinkat(dirfd, name, 0)
	switch {
	case uerr == nil, uerr == unix.ENOENT:
		return nil
	case uerr != unix.EISDIR && uerr != unix.EPERM:
		return uerr
	}
	fd, err := openDirAt(dirfd, name)
	switch {
	case err == unix.ENOENT:
		return nil
	case err == unix.ENOTDIR || err == unix.ELOOP:
		return uerr // not a directory: why the unlink failed is the answer
	case err != nil:
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Dev != dev {
		return errors.New("another filesystem is mounted there")
	}
	if euid := uint32(unix.Geteuid()); st.Uid != euid && euid == 0 {
		unix.Fchown(fd, int(euid), -1)
	}
	unix.Fchmod(fd, 0o700)
	// A few rounds: an entry added while the directory was still another
	// uid's is picked up by the next listing.
	for round := 0; round < 3; round++ {
		names, err := namesAt(fd, name)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			break
		}
		for _, n := range names {
			if err := removeAllAt(fd, n, dev); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		}
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return err
	}
	return nil
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
	if err := removeAllAt(dirfd, name, dev); err != nil {
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
