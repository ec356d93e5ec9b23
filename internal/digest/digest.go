// Package digest is the one way files and contents are fingerprinted in
// reports, indexes and comparisons: lower-case hex SHA-256.
package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"io"

	"github.com/infera/infera-exec/boundedread"
)

// Bytes is the SHA-256 of b.
func Bytes(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// File is the SHA-256 of the file at path, read as a stream.
func File(path string) (string, error) {
	// Without blocking, and only a regular file: a FIFO has no content to
	// fingerprint and would hold the caller forever.
	f, err := boundedread.Open(path, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
