package fileid

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/elfhdr"
)

// A fast path keyed on Identity alone does not survive a new overlay
// mount of the same image: the device number is the new mount's, and a
// copy-up or a new container layer gives new inode numbers and change
// times, though the bytes are the image's. What such a mount keeps is the
// path, the size, the mode and the modification time to the nanosecond
// (Portable); but user space can set a modification time, so equal
// portable identities say nothing of the content by themselves. Check
// therefore trusts an unchanged full Identity (ctime cannot be set from
// user space) and, when only the portable part is unchanged, reads what
// the path holds and compares its Sum with the one recorded.

// Portable is the part of id that a new mount of the same image keeps:
// size, mode, modification time, absence; of a directory, only its mode.
// A directory's size and mtime are its layer's: one copied up to a new
// container layer (the root, where the runtime adds its mount points and
// files) gets new ones with the same entries, and its entries (names and
// types) are what its Sum holds.
func (id Identity) Portable() Identity {
	if id.Mode&unix.S_IFMT == unix.S_IFDIR {
		return Identity{Mode: id.Mode}
	}
	return Identity{Size: id.Size, Mode: id.Mode, Mtime: id.Mtime, Absent: id.Absent}
}

// SmallFile is the size up to which a regular file's Sum is its SHA-256;
// a larger one, when read (see Large), is summed with CRC-32C, read at
// memory speed: it tells a rebuilt or upgraded file from the recorded
// one, not a collision crafted on purpose (whoever can write the
// interpreter runs code as the worker anyway).
const SmallFile = 1 << 20

// buildIDSum begins the sum of a large ELF file SumList took by its GNU
// build ID rather than its bytes (see Large).
const buildIDSum = "elf-build-id:"

// Large says how SumList sums a regular file over SmallFile.
//
// By its GNU build ID, read from its headers and notes: the linker
// computes it over what it linked, so a rebuilt or upgraded binary has
// another, and a new mount of the same image keeps it. Together with the
// size and modification time that Check and a key compare beside it, it
// tells a binary apart from any other but one edited after linking with
// its size and mtime put back (and whoever can write an interpreter or a
// library the worker loads runs code as the worker anyway).
type Large int

const (
	// ReadLarge: its bytes, read whole (CRC-32C; no sum over 64 MiB).
	ReadLarge Large = iota
	// LargeByBuildID: its GNU build ID when it is an ELF file with one,
	// else its bytes (an interpreter binary, megabytes).
	LargeByBuildID
	// LargeBuildIDOnly: its GNU build ID, and no sum (ok false) when it
	// has none (a library, which may be hundreds of megabytes).
	LargeBuildIDOnly
)

// maxSum caps what Sum reads: a larger file has no Sum, so what depends
// on it is checked again in full rather than read whole at every start.
const maxSum = 64 << 20

// SumBytes is the Sum of a regular file holding b.
func SumBytes(b []byte) string {
	if len(b) > SmallFile {
		return "crc32c:" + strconv.FormatUint(uint64(crc32.Checksum(b, castagnoli())), 16) + ":" + strconv.Itoa(len(b))
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// castagnoli is made on first use: only a content check of a large file
// needs it, and making it at package init cost every start (restarts
// included) about 0.2 ms.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// Sum digests what path holds, following links when follow is set: a
// regular file's bytes (as SumBytes), a directory's entry names and types,
// a symbolic link's target; following links, the real path is part of it
// (where a chain of links leads decides, e.g., an interpreter's prefix).
// It returns the identity the path had while it was read (the same before
// and after; ok false when it changed, or cannot be read). Files are read
// through buf (nil: a buffer of the call's own).
func Sum(path string, follow bool, buf *Buffer) (sum string, id Identity, ok bool) {
	sum, id, _, ok = SumList(path, follow, ReadLarge, buf)
	return sum, id, ok
}

// SumList is Sum that also returns, when path is a directory, the
// entries it digested (sorted by name, as os.ReadDir gives them): for a
// caller that looks through the directory too, which then reads it once.
//
// A regular file over SmallFile is summed as large says.
func SumList(path string, follow bool, large Large, buf *Buffer) (sum string, id Identity, entries []os.DirEntry, ok bool) {
	stat := unix.Lstat
	if follow {
		stat = unix.Stat
	}
	var st unix.Stat_t
	if err := stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return "", Identity{Absent: true}, nil, true
		}
		return "", Identity{}, nil, false
	}
	id = Of(&st)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := os.Readlink(path)
		if err != nil {
			return "", Identity{}, nil, false
		}
		sum = "link:" + target
	case unix.S_IFDIR:
		if l, have := buf.listed(path); have && l.Settled && l.Before == id {
			// Listed after it had this identity, settled (a change
			// since would show in it), which it still has (checked
			// again below): the entries it holds now.
			entries, sum = l.Entries, dirDigest(l.Entries)
			break
		}
		sum, entries, ok = dirSum(path)
		if !ok {
			return "", Identity{}, nil, false
		}
	case unix.S_IFREG:
		if large != ReadLarge && st.Size > SmallFile {
			if sum, ok = elfBuildIDSum(path, follow, &st); ok {
				break
			}
			if large == LargeBuildIDOnly {
				return "", Identity{}, nil, false
			}
		}
		sum, ok = fileSum(path, follow, &st, buf)
		if !ok {
			return "", Identity{}, nil, false
		}
	default:
		sum = "type:" + strconv.FormatUint(uint64(st.Mode&unix.S_IFMT), 8)
	}
	if follow {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return "", Identity{}, nil, false
		}
		if real != path {
			sum = "at:" + real + "\x00" + sum
		}
	}
	if after, ok := identity(path, stat); !ok || after != id {
		return "", Identity{}, nil, false
	}
	return sum, id, entries, true
}

// Buffer is a read buffer allocated on first use and then reused: a
// caller that may read many files, or none, passes one. Listed are the
// directories the caller has already listed (by path, as it asks for
// their sums): SumList of such a directory takes its Listing when the
// directory still has the identity it had before it was listed, instead
// of reading it again.
type Buffer struct {
	b      []byte
	Listed map[string]Listing
}

func (b *Buffer) listed(path string) (Listing, bool) {
	if b == nil {
		return Listing{}, false
	}
	l, ok := b.Listed[path]
	return l, ok
}

// Listing is a directory's entries, as os.ReadDir gives them (sorted by
// name), with the identity the directory had just before they were read.
// Settled: that identity was settled when it was taken (SettledAt), so
// any change to the directory since gives it another identity; a listing
// of a directory changed within the clock tick before it is not taken
// for its sum.
type Listing struct {
	Before  Identity
	Settled bool
	Entries []os.DirEntry
}

// List lists dir, following links, with its identity before (the zero
// Identity, which no directory has, when it could not be stat'ed).
func List(dir string) (Listing, error) {
	tick := Now()
	before, _ := Stat(dir)
	entries, err := os.ReadDir(dir)
	return Listing{Before: before, Settled: before.SettledAt(tick), Entries: entries}, err
}

func (b *Buffer) get() []byte {
	if b == nil {
		return make([]byte, 32<<10)
	}
	if b.b == nil {
		b.b = make([]byte, 64<<10)
	}
	return b.b
}

// elfBuildIDSum is the sum of the ELF file at path by its GNU build ID
// (see Large); ok false when it is no ELF file, has none, or is not
// the file st describes.
func elfBuildIDSum(path string, follow bool, st *unix.Stat_t) (string, bool) {
	f, ok := openAs(path, follow, st)
	if !ok {
		return "", false
	}
	defer f.Close()
	h, err := elfhdr.Read(f, st.Size)
	if err != nil {
		return "", false
	}
	id, ok := h.BuildID(f, st.Size)
	if !ok {
		return "", false
	}
	return buildIDSum + hex.EncodeToString(id), true
}

// openAs opens path for reading, without following a last link unless
// follow is set, when what it opened is the file st describes.
func openAs(path string, follow bool, st *unix.Stat_t) (*os.File, bool) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), path)
	var fst unix.Stat_t
	if unix.Fstat(fd, &fst) != nil || Of(&fst) != Of(st) {
		f.Close()
		return nil, false
	}
	return f, true
}

func fileSum(path string, follow bool, st *unix.Stat_t, rb *Buffer) (string, bool) {
	if st.Size > maxSum {
		return "", false
	}
	f, ok := openAs(path, follow, st)
	if !ok {
		return "", false
	}
	defer f.Close()
	buf := rb.get()
	var h hash.Hash = sha256.New()
	large := st.Size > SmallFile
	var crc uint32
	var n int64
	for {
		k, err := f.Read(buf)
		if large {
			crc = crc32.Update(crc, castagnoli(), buf[:k])
		} else {
			h.Write(buf[:k])
		}
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil || n > st.Size {
			return "", false
		}
	}
	if n != st.Size {
		return "", false
	}
	if large {
		return "crc32c:" + strconv.FormatUint(uint64(crc), 16) + ":" + strconv.FormatInt(n, 10), true
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// dirSum digests a directory's entries: names and types, sorted.
func dirSum(path string) (string, []os.DirEntry, bool) {
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", nil, false
	}
	return dirDigest(entries), entries, true
}

// dirDigest is the sum of a directory holding entries (sorted by name).
func dirDigest(entries []os.DirEntry) string {
	h := sha256.New()
	for _, e := range entries {
		h.Write([]byte(e.Name()))
		h.Write([]byte{0, byte(e.Type() >> 24), '\n'})
	}
	return "dir:" + hex.EncodeToString(h.Sum(nil))
}

// Check reports whether path still holds what was recorded as want (its
// identity) and sum (its Sum, "" when none was kept): either its identity
// is unchanged, or its portable identity is and its Sum, read now, equals
// sum. It returns the identity seen, for renewing the record.
func Check(path string, follow bool, want Identity, sum string, buf *Buffer) (Identity, bool) {
	stat := unix.Lstat
	if follow {
		stat = unix.Stat
	}
	cur, ok := identity(path, stat)
	if !ok {
		return cur, false
	}
	if cur == want {
		return cur, true
	}
	if sum == "" || cur.Portable() != want.Portable() {
		return cur, false
	}
	id, ok := Confirm(path, follow, sum, buf)
	return id, ok && id.Portable() == want.Portable()
}

// Confirm reports whether path holds what sum (its Sum) was taken of,
// reading it now whatever its identity, and returns the identity it had
// while it was read: for an identity that cannot vouch for the bytes by
// itself (a new mount's, or one taken within its change time's clock
// tick, see SettledAt).
func Confirm(path string, follow bool, sum string, buf *Buffer) (Identity, bool) {
	if sum == "" {
		return Identity{}, false
	}
	// Summed now as it was then: by its build ID when that was kept.
	kept := sum
	if _, after, found := strings.Cut(sum, "\x00"); found {
		kept = after // after a followed link's "at:" prefix, whose path holds no NUL
	}
	large := ReadLarge
	if strings.HasPrefix(kept, buildIDSum) {
		large = LargeByBuildID
	}
	got, id, _, ok := SumList(path, follow, large, buf)
	return id, ok && got == sum
}

// Tick is a reading of the clock file times are taken from
// (CLOCK_REALTIME_COARSE), in nanoseconds since the epoch. A change made
// after the reading is stamped no earlier than it (a finer stamp, where
// the kernel gives one, is later still).
type Tick int64

// Now reads the clock file times come from.
func Now() Tick {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts) != nil {
		return 0 // nothing is settled against it
	}
	return Tick(ts.Nano())
}

// granularity is the coarsest timestamp granularity a filesystem could
// have stamped t with: the largest power of ten dividing its nanoseconds,
// or two seconds (FAT's) when they are zero.
func granularity(t int64) int64 {
	ns := t % 1e9
	if ns < 0 {
		ns += 1e9
	}
	if ns == 0 {
		return 2e9
	}
	g := int64(1)
	for ns%(g*10) == 0 {
		g *= 10
	}
	return g
}

// SettledAt reports whether any change to the file made after the clock
// read at gives it another change time than id's: at is past id's change
// time by its granularity. An identity observed by a read that began at
// such a tick vouches for the bytes read (an unsettled one may not: a
// second write within the same clock tick keeps every field equal).
func (id Identity) SettledAt(at Tick) bool {
	return id.Absent || int64(at) >= id.Ctime+granularity(id.Ctime)
}
