// Package beneath works below a directory descriptor without following
// links: a directory reached one component at a time with O_NOFOLLOW,
// listed, or removed with everything in it, so that a link or a rename by
// another uid in a directory it can write never redirects a root write or
// removal.
package beneath

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Flags open a directory for reading without following a link at its
// name.
const Flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// OpenAt opens the directory name in dirfd without following a link.
func OpenAt(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, Flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// Names lists the directory open at fd (a duplicate is read, so fd
// keeps its offset and stays open).
func Names(fd int, name string) ([]string, error) {
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

// RemoveAll removes name from the directory dirfd, and everything in it
// when it is a directory, without following any link and without
// crossing into another filesystem (dev is the one it works in). A
// directory of another uid is first made the remover's and closed to
// everyone else (as root), so that its owner cannot keep filling it.
func RemoveAll(dirfd int, name string, dev uint64) error {
	uerr := unix.Unlinkat(dirfd, name, 0)
	switch {
	case uerr == nil, uerr == unix.ENOENT:
		return nil
	case uerr != unix.EISDIR && uerr != unix.EPERM:
		return uerr
	}
	fd, err := OpenAt(dirfd, name)
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
		names, err := Names(fd, name)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			break
		}
		for _, n := range names {
			if err := RemoveAll(fd, n, dev); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		}
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return err
	}
	return nil
}
