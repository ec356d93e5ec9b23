// Package termination writes the message the kubelet shows for a
// container that ended: the file at the container's
// terminationMessagePath (/dev/termination-log unless the pod says
// otherwise), which the kubelet bind-mounts, fresh and empty, into every
// container it starts, and reads, at most 4096 bytes of it, once the
// container has exited. `kubectl describe pod` shows it as the last
// state's Message.
//
// The file is only ever opened, never created: a path that does not
// exist means no kubelet asked for a message (docker run, podman), and a
// file made in a directory others can write would be a file planted for
// us. What is opened must be a regular file with one link (the kubelet's
// file, or a file the operator mounted there), checked on the open
// descriptor before a byte of it changes.
package termination

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Max is what the kubelet reads of the file (and so the most written).
const Max = 4096

// Message is the text written for a start refused with code for reason:
// one line, "infera-exec: exit CODE: REASON", at most Max bytes (cut at
// a character's boundary).
func Message(code int, reason string) string {
	m := fmt.Sprintf("infera-exec: exit %d: %s", code, strings.Join(strings.Fields(reason), " "))
	if len(m) > Max-1 { // and the newline
		i := Max - 1
		for i > 0 && !utf8.RuneStart(m[i]) {
			i--
		}
		m = m[:i]
	}
	return m + "\n"
}

// Write replaces the file's content with Message(code, reason). A path
// that does not exist is not an error and writes nothing (written is
// false); any other reason the file cannot be used is.
func Write(path string, code int, reason string) (written bool, err error) {
	return use(path, func(fd int, _ *unix.Stat_t) error {
		if err := unix.Ftruncate(fd, 0); err != nil {
			return err
		}
		msg := Message(code, reason)
		n, err := unix.Pwrite(fd, []byte(msg), 0)
		if err == nil && n < len(msg) {
			err = fmt.Errorf("wrote %d of %d bytes", n, len(msg))
		}
		return err
	})
}

// Clear empties the file, when it holds anything: the message of an
// earlier start in the same container (a podman or docker restart keeps
// the file a kubelet would have made anew) must not be taken for the
// reason this start's worker ends. A path that does not exist is not an
// error.
func Clear(path string) (cleared bool, err error) {
	cleared = false
	_, err = use(path, func(fd int, st *unix.Stat_t) error {
		if st.Size == 0 {
			return nil
		}
		cleared = true
		return unix.Ftruncate(fd, 0)
	})
	return cleared, err
}

// use opens path for writing without following a link at its name,
// without creating it and without blocking (a FIFO with no reader),
// checks that it is a regular file with one link, and runs do on it.
func use(path string, do func(fd int, st *unix.Stat_t) error) (bool, error) {
	if path == "" {
		return false, nil
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return false, fmt.Errorf("termination log %s is a symbolic link; not following it", path)
		}
		return false, &fs.PathError{Op: "open termination log", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, &fs.PathError{Op: "stat termination log", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return false, fmt.Errorf("termination log %s is not a regular file (mode %#o); not writing to it", path, st.Mode&unix.S_IFMT)
	case st.Nlink != 1:
		return false, fmt.Errorf("termination log %s has %d links, not the one of a file of its own; not writing to it", path, st.Nlink)
	}
	if err := do(fd, &st); err != nil {
		return false, &fs.PathError{Op: "write termination log", Path: path, Err: err}
	}
	return true, nil
}
