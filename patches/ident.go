package patches

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/infera/infera-exec/boundedread"
	"golang.org/x/sys/unix"
)

// Identity is what the kernel says about a file without reading it:
// device, inode, size, mode and the modification and change times in
// nanoseconds. Two equal identities of one path mean the same bytes,
// because every write moves mtime and ctime, and ctime cannot be set from
// user space (see Racy for the one exception: a write within the clock's
// granularity of the moment the identity was taken).
type Identity struct {
	Dev    uint64 `json:"dev,omitempty"`
	Ino    uint64 `json:"ino,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	Mtime  int64  `json:"mtime,omitempty"`
	Ctime  int64  `json:"ctime,omitempty"`
	Absent bool   `json:"absent,omitempty"` // the path did not exist
}

func identityOf(st *unix.Stat_t) Identity {
	return Identity{Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mode: st.Mode,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
}

// statIdentity follows symlinks: the identity of what the path names.
// A path that cannot be stat'ed for another reason than absence has no
// usable identity (ok false), so nothing keyed on it can be trusted.
func statIdentity(path string) (Identity, bool) {
	return identity(path, unix.Stat)
}

// lstatIdentity is the identity of the path itself (a symlink is not
// followed).
func lstatIdentity(path string) (Identity, bool) {
	return identity(path, unix.Lstat)
}

func identity(path string, stat func(string, *unix.Stat_t) error) (Identity, bool) {
	var st unix.Stat_t
	if err := stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return Identity{Absent: true}, true
		}
		return Identity{}, false
	}
	return identityOf(&st), true
}

// racyWindow is longer than any kernel's timestamp granularity (file
// times come from a coarse clock, one tick of up to 10 ms behind): a file
// whose ctime is older than now minus this cannot be written again
// without its ctime moving.
var racyWindow = 50 * time.Millisecond

// Racy reports whether a write right after the identity was taken could
// leave it unchanged: the file changed within the clock's granularity of
// now. A racy identity is not trusted; the next start reads the file.
func (id Identity) Racy(now time.Time) bool {
	return !id.Absent && now.UnixNano()-id.Ctime < racyWindow.Nanoseconds()
}

// Caps on the files infera-exec reads here: an engine source file, a
// dist-info METADATA, the probe cache and the patch record. Anything
// larger is not what it claims to be.
const (
	maxSourceBytes   = 16 << 20
	maxMetadataBytes = 4 << 20
	maxStateBytes    = 4 << 20
)

// readRegular reads a whole file that must be a regular file no larger
// than limit. It opens without blocking (a FIFO planted in place of a
// file must not hang the start), checks the open file rather than the
// path, and returns the identity of what it read; a file that changed
// while it was read is an error.
func readRegular(path string, limit int64) ([]byte, Identity, error) {
	f, err := boundedread.Open(path, 0)
	if err != nil {
		return nil, Identity{}, err
	}
	defer f.Close()
	fd := int(f.Fd())
	var before, after unix.Stat_t
	if err := unix.Fstat(fd, &before); err != nil {
		return nil, Identity{}, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	data, err := boundedread.ReadAll(f, path, limit)
	if err != nil {
		return nil, Identity{}, err
	}
	if err := unix.Fstat(fd, &after); err != nil {
		return nil, Identity{}, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	id := identityOf(&after)
	if id != identityOf(&before) || int64(len(data)) != after.Size {
		return nil, Identity{}, fmt.Errorf("%s changed while it was read", path)
	}
	return data, id, nil
}
