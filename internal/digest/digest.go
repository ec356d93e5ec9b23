// Package digest is the one way files and contents are fingerprinted in
// reports, indexes and comparisons: lower-case hex SHA-256.
package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"io"

	"github.com/infera/infera-exec/internal/boundedread"
)

// Bytes is the SHA-256 of b.
func Bytes(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// String is the SHA-256 of s, hashed through a small buffer: engine
// sources are hundreds of kilobytes, and a []byte(s) copy of each would
// cost more (in fresh pages) than the hash.
func String(s string) string {
	h := sha256.New()
	var buf [16 << 10]byte
	for len(s) > 0 {
		n := copy(buf[:], s)
		h.Write(buf[:n])
		s = s[n:]
	}
	return hex.EncodeToString(h.Sum(nil))
}

// File is the SHA-256 of the file at path, read as a stream.
func File(path string) (string, error) { return FileThrough(path, io.Discard) }

// FileThrough is File, writing the bytes it reads through w as well (a
// progress count).
func FileThrough(path string, w io.Writer) (string, error) {
	// Without blocking, and only a regular file: a FIFO has no content to
	// fingerprint and would hold the caller forever.
	f, err := boundedread.Open(path, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(h, w), f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
