// Package source reads engine source files as one stable regular file
// each: opened without blocking, bounded, and with the fileid.Identity the file
// had throughout the read (a file that changed meanwhile is an error),
// whole (Read), compared with what it should hold (Holds), or hashed
// (Open, Hashes).
package source

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/heappages"
	"golang.org/x/sys/unix"
)

// Read reads a whole engine source file, which must be a regular
// file no larger than limit. It opens without blocking (a FIFO planted in
// place of a file must not hang the start), checks the open file rather
// than the path, and returns the fileid.Identity of what it read (a file that
// changed while it was read is an error) and the SHA-256 of its bytes,
// taken as they are read, each chunk while it is still in
// the cache, instead of a second pass over the whole content. The bytes
// go straight into one buffer of the size fstat gave (no growing copies);
// a file that is longer or shorter than that changed while it was read.
func Read(path string, limit int64) (data []byte, id fileid.Identity, sum string, err error) {
	id, err = stableRead(path, func(f *os.File, st *unix.Stat_t) error {
		if st.Size > limit {
			return &boundedread.Error{Path: path, Cap: limit, Err: boundedread.ErrTooLarge}
		}
		data = make([]byte, st.Size+1) // one byte more: a file that grew reads into it
		heappages.Fresh(data)          // fresh pages, all written now: huge ones where the kernel allows
		h := sha256.New()
		n := 0
		for {
			k, err := f.Read(data[n:min(n+Chunk, len(data))])
			h.Write(data[n : n+k])
			n += k
			if err == io.EOF || k == 0 && err == nil {
				break
			}
			if err != nil {
				return &fs.PathError{Op: "read", Path: path, Err: err}
			}
			if n == len(data) {
				break
			}
		}
		if int64(n) != st.Size {
			return fmt.Errorf("%s changed while it was read", path)
		}
		data = data[:n:n]
		sum = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err != nil {
		return nil, fileid.Identity{}, "", err
	}
	return data, id, sum, nil
}

// Chunk is how much Read reads before it hashes: small enough
// that the bytes hashed are still in the CPU's cache.
const Chunk = 64 << 10

// Holds reports whether the regular file at path holds exactly want,
// and its fileid.Identity when it does: the read-back after a write. It compares
// through buf (any size) instead of reading the file whole, so that
// checking hundreds of kilobytes of engine source touches no fresh memory
// beyond buf; a file that changes while it is compared does not match.
func Holds(path, want string, buf []byte) (fileid.Identity, bool) {
	errDiffers := errors.New("differs")
	id, err := stableRead(path, func(f *os.File, st *unix.Stat_t) error {
		if st.Size != int64(len(want)) {
			return errDiffers
		}
		off := 0
		for {
			n, err := f.Read(buf)
			if n > len(want)-off || string(buf[:n]) != want[off:off+n] {
				return errDiffers
			}
			off += n
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
		if off != len(want) {
			return errDiffers
		}
		return nil
	})
	return id, err == nil
}

// stableRead opens path as Read does, runs read on it, and
// returns the file's fileid.Identity, or an error when read fails or the
// fileid.Identity changed while it ran.
func stableRead(path string, read func(f *os.File, before *unix.Stat_t) error) (fileid.Identity, error) {
	f, id, err := stableOpen(path, read)
	if err != nil {
		return fileid.Identity{}, err
	}
	f.Close()
	return id, nil
}

// stableOpen is stableRead that returns the file still open, for a
// caller that may read it again later (the replay restores from it).
func stableOpen(path string, read func(f *os.File, before *unix.Stat_t) error) (*os.File, fileid.Identity, error) {
	f, err := boundedread.Open(path, 0)
	if err != nil {
		return nil, fileid.Identity{}, err
	}
	fd := int(f.Fd())
	var before, after unix.Stat_t
	err = unix.Fstat(fd, &before)
	if err != nil {
		err = &fs.PathError{Op: "fstat", Path: path, Err: err}
	} else if err = read(f, &before); err == nil {
		if err = unix.Fstat(fd, &after); err != nil {
			err = &fs.PathError{Op: "fstat", Path: path, Err: err}
		} else if fileid.Of(&after) != fileid.Of(&before) {
			err = fmt.Errorf("%s changed while it was read", path)
		}
	}
	if err != nil {
		f.Close()
		return nil, fileid.Identity{}, err
	}
	return f, fileid.Of(&after), nil
}

// Open opens path as Read does (stableOpen), hashes it through
// buf, within MaxBytes, and returns it open, with the fileid.Identity it
// had while it was read and its SHA-256.
func Open(path string, buf []byte) (*os.File, fileid.Identity, string, error) {
	h := sha256.New()
	f, id, err := stableOpen(path, func(f *os.File, st *unix.Stat_t) error {
		if st.Size > MaxBytes {
			return &boundedread.Error{Path: path, Cap: MaxBytes, Err: boundedread.ErrTooLarge}
		}
		// A LimitedReader, which has no WriteTo: the copy goes through
		// buf (the file's own WriteTo would make a buffer of its own).
		_, err := io.CopyBuffer(h, io.LimitReader(f, st.Size+1), buf)
		return err
	})
	if err != nil {
		return nil, fileid.Identity{}, "", err
	}
	return f, id, hex.EncodeToString(h.Sum(nil)), nil
}

// Hashes reports whether the regular file at path has the SHA-256 sum,
// read through buf, and its fileid.Identity when it has.
func Hashes(path, sum string, buf []byte) (fileid.Identity, bool) {
	f, id, got, err := Open(path, buf)
	if err != nil {
		return fileid.Identity{}, false
	}
	f.Close()
	return id, got == sum
}

// MaxBytes caps an engine source file: anything larger is not what it
// claims to be.
const MaxBytes = 16 << 20
