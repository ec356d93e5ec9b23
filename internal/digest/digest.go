// Package digest is the one way files and contents are fingerprinted in
// reports, indexes and comparisons: lower-case hex SHA-256.
package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
)

// Bytes is the SHA-256 of b.
func Bytes(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// File is the SHA-256 of the file at path, read as a stream.
func File(path string) (string, error) {
	f, err := os.Open(path)
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
