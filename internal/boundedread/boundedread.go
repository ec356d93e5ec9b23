// Package boundedread answers whether a file infera-exec is about to read
// is a file at all, and reads it within a cap: a payload, an image or a
// host mount can put a FIFO (open blocks forever), a device (/dev/zero
// never ends) or a huge file where a small text file is expected. Every
// small input (CAPABILITIES, payload.toml, payload.index.json, .driver
// files, METADATA, the probe cache, the host provider) goes through File.
package boundedread

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Caps for the inputs infera-exec reads; each is far above what a real
// file of that kind holds.
const (
	SmallText = 1 << 20   // CAPABILITIES, .driver files, METADATA: 1 MiB
	Manifest  = 4 << 20   // payload.toml, the probe cache: 4 MiB
	Index     = 64 << 20  // payload.index.json: 64 MiB (a million entries)
	Library   = 256 << 20 // a shared library read whole (the host provider): 256 MiB
)

// Error is a file that was refused, and why; Path and Cap name it.
type Error struct {
	Path string
	Cap  int64
	Err  error
}

func (e *Error) Error() string {
	if errors.Is(e.Err, ErrTooLarge) {
		return fmt.Sprintf("%s: %v (the cap is %d bytes)", e.Path, e.Err, e.Cap)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}
func (e *Error) Unwrap() error { return e.Err }

// Reason is err without the path, for a caller whose message already
// names the file: "not a regular file (a FIFO)", "permission denied".
func Reason(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	if errors.Is(e.Err, ErrTooLarge) {
		return fmt.Errorf("%w (the cap is %d bytes)", e.Err, e.Cap)
	}
	return BareErr(e.Err)
}

var (
	// ErrNotRegular is wrapped when the path is a FIFO, device, socket or
	// directory.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge is wrapped when the file holds more than the cap.
	ErrTooLarge = errors.New("file is larger than infera-exec reads")
)

// File reads path whole, following symlinks, when it is a regular file of
// at most max bytes. The open never blocks (O_NONBLOCK: a FIFO opens at
// once and is then refused by fstat) and the read stops at max+1 bytes,
// so a file that grows while it is read is refused too. A missing file is
// returned as the os error, wrapped so errors.Is(err, fs.ErrNotExist).
func File(path string, max int64) ([]byte, error) {
	return read(path, max, 0)
}

// FileNoFollow is File for a path whose last component must not be a
// symbolic link (a file infera-exec wrote itself in its own directory).
func FileNoFollow(path string, max int64) ([]byte, error) {
	return read(path, max, unix.O_NOFOLLOW)
}

func read(path string, max int64, flags int) ([]byte, error) {
	f, err := Open(path, flags)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, path, max)
}

// Open opens path for reading without blocking and checks, on the open
// descriptor, that it is a regular file. flags are added to
// O_RDONLY|O_NONBLOCK|O_CLOEXEC (e.g. unix.O_NOFOLLOW).
func Open(path string, flags int) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		if flags&unix.O_NOFOLLOW != 0 && errors.Is(err, syscall.ELOOP) {
			return nil, &Error{Path: path, Err: errors.New("is a symbolic link; not following it")}
		}
		return nil, &Error{Path: path, Err: &fs.PathError{Op: "open", Path: path, Err: err}}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &Error{Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &Error{Path: path, Err: fmt.Errorf("%w: it is %s", ErrNotRegular, typeName(st.Mode))}
	}
	// Reads of a regular file never block; clear the flag so that the
	// descriptor behaves as any other.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &Error{Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ReadAll reads at most max bytes from f, refusing more. When f can say
// its size (an *os.File), the buffer is sized for it once: growing it by
// doubling would copy and clear a large file several times over.
func ReadAll(f io.Reader, path string, max int64) ([]byte, error) {
	size := int64(bytes.MinRead)
	if st, ok := f.(interface{ Stat() (os.FileInfo, error) }); ok {
		if fi, err := st.Stat(); err == nil && fi.Size() <= max {
			size += fi.Size()
			if fi.Size() == 0 {
				// /proc and sysfs files say 0: start at a page, which
				// holds most of them whole, instead of doubling from 512.
				size = 4 << 10
			}
		}
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, &Error{Path: path, Cap: max, Err: err}
	}
	if int64(buf.Len()) > max {
		return nil, &Error{Path: path, Cap: max, Err: ErrTooLarge}
	}
	return buf.Bytes(), nil
}

func typeName(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return fmt.Sprintf("file type %#o", m&unix.S_IFMT)
}
