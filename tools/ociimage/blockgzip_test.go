package ociimage

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"io"
	"testing"

	"github.com/klauspost/compress/flate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// compressBlocks is blockGzip's output for in, written in pieces of
// step bytes, on workers compressors.
func compressBlocks(t *testing.T, in []byte, step, workers int) ([]byte, *blockGzip) {
	var out bytes.Buffer
	z := newBlockGzip(&out, flate.DefaultCompression, workers)
	for p := in; len(p) > 0; {
		k := min(step, len(p))
		_, err := z.Write(p[:k])
		require.NoError(t, err)
		p = p[k:]
	}
	require.NoError(t, z.Close())
	return out.Bytes(), z
}

// The layer's bytes are the image's identity: the same input gives the
// same output whatever the number of compressors and however the tar
// writer cut its writes, and Go's own compress/gzip reads it back as one
// member holding the input (umoci and skopeo read it in
// TestUmociUnpackAndInstall and TestSkopeoReadsBothForms).
func TestBlockGzipSameBytesReadBack(t *testing.T) {
	for _, size := range []int{0, 1, gzipDictSize, gzipBlockSize, gzipBlockSize + 1, 5*gzipBlockSize + 777} {
		in := bulk(size)
		want, z := compressBlocks(t, in, 512, 1)
		for _, c := range []struct{ step, workers int }{{1 << 20, 4}, {100_003, 3}, {512, 8}} {
			got, _ := compressBlocks(t, in, c.step, c.workers)
			assert.True(t, bytes.Equal(want, got), "%d bytes, writes of %d on %d workers: other bytes than on one worker", size, c.step, c.workers)
		}

		zr, err := gzip.NewReader(bytes.NewReader(want))
		require.NoError(t, err)
		zr.Multistream(false)
		back, err := io.ReadAll(zr)
		require.NoError(t, err, "%d bytes", size)
		assert.True(t, bytes.Equal(in, back), "%d bytes: compress/gzip reads back other bytes", size)
		rest, err := io.ReadAll(zr)
		require.NoError(t, err)
		assert.Empty(t, rest, "one member")

		diffID, digest, n := z.Sums()
		assert.Equal(t, sha256.Sum256(in), diffID, "%d bytes: diff ID", size)
		assert.Equal(t, sha256.Sum256(want), digest, "%d bytes: digest", size)
		assert.Equal(t, int64(len(want)), n)
		if size > 2*gzipBlockSize {
			assert.Less(t, len(want), size*3/4, "the blocks compress, with their dictionaries")
		}
	}
}

// A failing destination is the error of Close, and nothing hangs.
func TestBlockGzipWriterError(t *testing.T) {
	z := newBlockGzip(failWriter{}, flate.DefaultCompression, 2)
	_, _ = z.Write(bulk(3 * gzipBlockSize))
	assert.ErrorIs(t, z.Close(), io.ErrClosedPipe)
	assert.ErrorIs(t, z.Close(), io.ErrClosedPipe, "closing again says the same")
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// Once the destination has failed, Write says so: the tar writer stops
// instead of compressing the rest of the layer for nothing.
func TestBlockGzipWriteSeesFailure(t *testing.T) {
	z := newBlockGzip(failWriter{}, flate.DefaultCompression, 2)
	var err error
	chunk := bulk(gzipBlockSize)
	for i := 0; i < 64 && err == nil; i++ {
		_, err = z.Write(chunk)
	}
	assert.ErrorIs(t, err, io.ErrClosedPipe, "64 MiB written into a failed output without an error")
	assert.ErrorIs(t, z.Close(), io.ErrClosedPipe)
}
