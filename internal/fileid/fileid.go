// Package fileid answers "is this the same file as when it was verified":
// the identity the kernel gives a path without reading it, the key of
// every fast path infera-exec keeps (the patch record, the probe cache,
// the native tree load verdict).
package fileid

import (
	"errors"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Identity is device, inode, size, mode and the modification and change
// times in nanoseconds. Two equal identities of one path mean the same
// bytes, because every write moves mtime and ctime, and ctime cannot be
// set from user space (see Racy for the one exception: a write within the
// clock's granularity of the moment the identity was taken).
type Identity struct {
	Dev    uint64 `json:"dev,omitempty"`
	Ino    uint64 `json:"ino,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	Mtime  int64  `json:"mtime,omitempty"`
	Ctime  int64  `json:"ctime,omitempty"`
	Absent bool   `json:"absent,omitempty"` // the path did not exist
}

// Of is the identity of a stat result.
func Of(st *unix.Stat_t) Identity {
	return Identity{Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mode: st.Mode,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
}

// Stat follows symlinks: the identity of what the path names. A path
// that cannot be stat'ed for another reason than absence has no usable
// identity (ok false), so nothing keyed on it can be trusted.
func Stat(path string) (Identity, bool) { return identity(path, unix.Stat) }

// Lstat is the identity of the path itself (a symlink is not followed).
func Lstat(path string) (Identity, bool) { return identity(path, unix.Lstat) }

func identity(path string, stat func(string, *unix.Stat_t) error) (Identity, bool) {
	var st unix.Stat_t
	if err := stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return Identity{Absent: true}, true
		}
		return Identity{}, false
	}
	return Of(&st), true
}

// RacyWindow is longer than any kernel's timestamp granularity (file
// times come from a coarse clock, one tick of up to 10 ms behind): a file
// whose ctime is older than a moment minus this cannot have been written
// after that moment without its ctime moving.
var RacyWindow = 50 * time.Millisecond

// Racy reports whether the file may have changed at or after t without
// the identity showing it: its ctime is within the clock's granularity of
// t. Pass the moment the verified read began (or now, for an identity
// taken right after a write). A racy identity is not trusted.
func (id Identity) Racy(t time.Time) bool {
	return !id.Absent && t.UnixNano()-id.Ctime < RacyWindow.Nanoseconds()
}

// AppendKey appends every field of id, in a fixed order, for a digest
// that must change when any of them does (formatted without reflection:
// a restart computes one per consulted file).
func (id Identity) AppendKey(b []byte) []byte {
	b = strconv.AppendUint(b, id.Dev, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, id.Ino, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, id.Size, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(id.Mode), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, id.Mtime, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, id.Ctime, 10)
	b = append(b, ' ')
	return strconv.AppendBool(b, id.Absent)
}
