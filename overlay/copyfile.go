package overlay

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// How a payload file is copied and checked. The rule is "verify the
// bytes you install": the digest compared with the index is of the copy
// that is renamed into place, never of another read of the source.
//
// copy_file_range(2) first: the kernel copies from page cache to page
// cache without the bytes passing through the installer (and on XFS or
// btrfs shares the extents: no data is written at all). It hands the
// installer none of the bytes, so the copy is then read back from the
// destination file itself (page-cache hot after a copy; after a reflink,
// the one read of the data the install makes) and hashed. Where the
// kernel cannot copy between the two files (another filesystem on an
// older kernel, a filesystem without the call), the file is copied
// through one buffer and the buffer hashed on its way: the bytes hashed
// are the bytes written. Measured on ext4 (docs/performance.md), the two
// cost the same: two memory copies and one hash of every byte each.

// copyBuffer is the size of each worker's buffer: the read-back's and the
// fallback copy's unit.
const copyBuffer = 1 << 20

// copyVerified copies src into dst (an empty file open for reading and
// writing) and returns how many bytes dst then holds, at most size+1 (a
// source longer than size is not copied further), and the SHA-256 of
// dst's content read back from dst (or, copied through buf, of the bytes
// written). progress counts the bytes as they are hashed.
func copyVerified(dst, src *os.File, size int64, buf []byte, progress io.Writer) (int64, string, error) {
	n, err := copyRange(dst, src, size+1)
	if errors.Is(err, errNoCopyRange) {
		return copyThrough(dst, src, size+1, buf, progress)
	}
	if err != nil {
		return n, "", err
	}
	h := sha256.New()
	var off int64
	for off < n {
		m, err := dst.ReadAt(buf[:min(int64(len(buf)), n-off)], off)
		if m > 0 {
			h.Write(buf[:m])
			progress.Write(buf[:m])
			off += int64(m)
		}
		if err != nil {
			if err == io.EOF {
				break // shorter than copied: the digest says so
			}
			return off, "", err
		}
	}
	return off, hex.EncodeToString(h.Sum(nil)), nil
}

// errNoCopyRange: the kernel cannot copy between these two files.
var errNoCopyRange = errors.New("copy_file_range not available")

// copyRange copies up to limit bytes from the start of src to the start
// of dst with copy_file_range, until src ends. errNoCopyRange when the
// kernel refuses the first call for these files (nothing copied).
func copyRange(dst, src *os.File, limit int64) (int64, error) {
	var roff, woff int64
	for roff < limit {
		n, err := unix.CopyFileRange(int(src.Fd()), &roff, int(dst.Fd()), &woff, int(min(limit-roff, 1<<30)), 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if roff == 0 {
				switch err {
				case unix.EXDEV, unix.EINVAL, unix.EOPNOTSUPP, unix.ENOSYS, unix.EBADF, unix.EPERM, unix.ETXTBSY, unix.EIO:
					// Not these files (EIO: some network filesystems
					// refuse the call that way); the buffered copy says
					// what really is wrong, if anything.
					return 0, errNoCopyRange
				}
			}
			return roff, err
		}
		if n == 0 {
			break
		}
	}
	return roff, nil
}

// copyThrough copies up to limit bytes from src to dst (both at offset
// 0) through buf, hashing each buffer before it is written.
func copyThrough(dst, src *os.File, limit int64, buf []byte, progress io.Writer) (int64, string, error) {
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return 0, "", err
	}
	h := sha256.New()
	var n int64
	for n < limit {
		m, err := src.Read(buf[:min(int64(len(buf)), limit-n)])
		if m > 0 {
			h.Write(buf[:m])
			progress.Write(buf[:m])
			if _, werr := dst.WriteAt(buf[:m], n); werr != nil {
				return n, "", werr
			}
			n += int64(m)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, "", err
		}
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
