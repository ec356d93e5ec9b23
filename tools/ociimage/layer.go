package ociimage

import (
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
)

// builtLayer is the layer writeLayer wrote to path, with the digests it
// took of the bytes as it wrote them (blockGzip): the image's manifest
// and config need them, and reading the layer twice more to learn them
// (tarball.LayerFromOpener: the file, then the file inflated, on one
// core) cost about half as much CPU as compressing it. The layout and the
// archive copy the file's bytes as they are (Compressed).
type builtLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
}

var _ v1.Layer = (*builtLayer)(nil)

func (l *builtLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *builtLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *builtLayer) Size() (int64, error)                { return l.size, nil }
func (l *builtLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *builtLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

// Uncompressed is the layer's tar.
func (l *builtLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}
