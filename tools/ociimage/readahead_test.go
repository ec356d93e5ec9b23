package ociimage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/overlay"
)

// readAheadTree writes files of the given sizes and returns their entries,
// as an index holds them.
func readAheadTree(t *testing.T, sizes []int) (string, []overlay.Entry) {
	root := tempDir(t)
	var entries []overlay.Entry
	for i, n := range sizes {
		data := bulk(n)
		rel := fmt.Sprintf("f%03d", i)
		require.NoError(t, os.WriteFile(filepath.Join(root, rel), data, 0o644))
		sum := sha256.Sum256(data)
		entries = append(entries, overlay.Entry{Path: rel, Type: "file", Mode: "0644", Size: int64(n), SHA256: hex.EncodeToString(sum[:])})
	}
	return root, entries
}

// The writer gets every file's bytes in the index's order, whole, however
// many are read at once and whatever their sizes.
func TestReadAheadInOrder(t *testing.T) {
	sizes := []int{0, 1, readChunk - 1, readChunk, readChunk + 1, 3*readChunk + 5, 10, 0, 7}
	for i := 0; i < 40; i++ {
		sizes = append(sizes, 100+i*997)
	}
	root, entries := readAheadTree(t, sizes)
	ra := newReadAhead(root, entries)
	defer ra.Stop()
	for _, e := range entries {
		s, ok := ra.Next()
		require.True(t, ok, "stream of %s", e.Path)
		require.Equal(t, e.Path, s.e.Path)
		h := sha256.New()
		require.NoError(t, s.copyTo(h))
		assert.Equal(t, e.SHA256, hex.EncodeToString(h.Sum(nil)), e.Path)
	}
	_, ok := ra.Next()
	assert.False(t, ok, "no stream after the last file")
}

// A file that is no longer what the index says when the layer reads it
// (changed after the check, same size; grown; shrunk; gone) is refused,
// by name; the rest of the read-ahead stops without hanging.
func TestReadAheadRefusesChangedFile(t *testing.T) {
	for name, change := range map[string]func(string) error{
		"same size": func(p string) error { return os.WriteFile(p, bulk(readChunk + 11)[1:], 0o644) },
		"grown":     func(p string) error { return os.WriteFile(p, bulk(readChunk+11), 0o644) },
		"shrunk":    func(p string) error { return os.Truncate(p, 5) },
		"gone":      os.Remove,
	} {
		t.Run(name, func(t *testing.T) {
			sizes := make([]int, 30)
			for i := range sizes {
				sizes[i] = 2*readChunk + i
			}
			sizes[3] = readChunk + 10
			root, entries := readAheadTree(t, sizes)
			require.NoError(t, change(filepath.Join(root, entries[3].Path)))
			ra := newReadAhead(root, entries)
			var err error
			for i := 0; i <= 3 && err == nil; i++ {
				s, ok := ra.Next()
				require.True(t, ok)
				err = s.copyTo(io.Discard)
				if i < 3 {
					require.NoError(t, err, entries[i].Path)
				}
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), entries[3].Path)
			ra.Stop() // returns: no reader is left blocked
		})
	}
}
