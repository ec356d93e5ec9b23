package patches

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/heappages"
)

// identity is a file's identity (package fileid), the key of the record
// and the probe cache.
type identity = fileid.Identity

// Caps on the files infera-exec reads here: an engine source file, a
// dist-info METADATA, the probe cache and the patch record. Anything
// larger is not what it claims to be.
const (
	maxSourceBytes   = 16 << 20
	maxMetadataBytes = 4 << 20
	maxStateBytes    = 4 << 20
)

// readSource reads a whole engine source file, which must be a regular
// file no larger than limit. It opens without blocking (a FIFO planted in
// place of a file must not hang the start), checks the open file rather
// than the path, and returns the identity of what it read (a file that
// changed while it was read is an error) and the SHA-256 of its bytes,
// taken as they are read, each chunk while it is still in
// the cache, instead of a second pass over the whole content. The bytes
// go straight into one buffer of the size fstat gave (no growing copies);
// a file that is longer or shorter than that changed while it was read.
func readSource(path string, limit int64) (data []byte, id identity, sum string, err error) {
	id, err = stableRead(path, func(f *os.File, st *unix.Stat_t) error {
		if st.Size > limit {
			return &boundedread.Error{Path: path, Cap: limit, Err: boundedread.ErrTooLarge}
		}
		data = make([]byte, st.Size+1) // one byte more: a file that grew reads into it
		heappages.Fresh(data)          // fresh pages, all written now: huge ones where the kernel allows
		h := sha256.New()
		n := 0
		for {
			k, err := f.Read(data[n:min(n+sourceChunk, len(data))])
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
		return nil, identity{}, "", err
	}
	return data, id, sum, nil
}

// sourceChunk is how much readSource reads before it hashes: small enough
// that the bytes hashed are still in the CPU's cache.
const sourceChunk = 64 << 10

// readsAs reports whether the regular file at path holds exactly want,
// and its identity when it does: the read-back after a write. It compares
// through buf (any size) instead of reading the file whole, so that
// checking hundreds of kilobytes of engine source touches no fresh memory
// beyond buf; a file that changes while it is compared does not match.
func readsAs(path, want string, buf []byte) (identity, bool) {
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

// stableRead opens path as readSource does, runs read on it, and
// returns the file's identity, or an error when read fails or the
// identity changed while it ran.
func stableRead(path string, read func(f *os.File, before *unix.Stat_t) error) (identity, error) {
	f, id, err := stableOpen(path, read)
	if err != nil {
		return identity{}, err
	}
	f.Close()
	return id, nil
}

// stableOpen is stableRead that returns the file still open, for a
// caller that may read it again later (the replay restores from it).
func stableOpen(path string, read func(f *os.File, before *unix.Stat_t) error) (*os.File, identity, error) {
	f, err := boundedread.Open(path, 0)
	if err != nil {
		return nil, identity{}, err
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
		return nil, identity{}, err
	}
	return f, fileid.Of(&after), nil
}
