package ociimage

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/flate"
)

// gzipBlockSize is how much of the layer's tar one block holds. Part of
// the image's identity: another size gives other bytes, so another
// digest.
const gzipBlockSize = 1 << 20

// gzipDictSize is how much of the block before each block is the
// block's dictionary: the whole window deflate can refer back to.
const gzipDictSize = 32 << 10

// gzipHeader is the member's header (RFC 1952): deflate, no flags, no
// modification time, no extra flags, operating system unknown, as
// compress/gzip writes it with a zero Header.
var gzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}

// blockGzip is a gzip writer that compresses on several cores and still
// writes the same bytes every time. It writes one gzip member whose
// deflate stream is a run of blocks, each the compression of
// gzipBlockSize bytes of input (the last: what is left) on its own, with
// the gzipDictSize bytes of input before it as its dictionary, ended by a
// sync flush (the last by the final block). A sync flush ends on a byte
// boundary, so the blocks join into one valid stream that any inflater
// reads as one (compress/gzip, zlib, so umoci, skopeo, containerd). Each
// block's bytes are a function of its input, its dictionary and the
// level alone: the output does not depend on how many blocks are
// compressed at once, nor on how the input was cut into Writes.
//
// At most 2*workers+2 blocks are in flight (1 MiB of input each, with its
// output): memory stays bounded whatever the layer's size. The
// writer also hashes what passes through it, on the goroutine that
// writes the output in order: SHA-256 of the input (the layer's diff ID)
// and of the output (its digest).
type blockGzip struct {
	level int
	buf   []byte // the block being filled
	dict  []byte // the last gzipDictSize bytes of the block before buf

	work    chan *gzBlock // to the compressors
	ordered chan *gzBlock // to the output goroutine, in input order
	done    chan struct{} // the output goroutine has returned
	wg      sync.WaitGroup

	// Owned by the output goroutine until done is closed.
	out            io.Writer
	crc            uint32
	in             int64
	outN           int64
	diffID, digest hash.Hash
	err            error
	closed         bool

	// failed is err once the output has failed, for Write to stop the
	// tar writer early.
	failed atomic.Pointer[error]
}

type gzBlock struct {
	in, dict []byte
	last     bool
	out      bytes.Buffer
	err      error
	ready    chan struct{}
}

var gzBuffers = newBufPool(gzipBlockSize)

func newBlockGzip(w io.Writer, level, workers int) *blockGzip {
	workers = max(workers, 1)
	z := &blockGzip{
		level: level, out: w,
		buf:     gzBuffers.get(),
		work:    make(chan *gzBlock, 2*workers),
		ordered: make(chan *gzBlock, 2*workers),
		done:    make(chan struct{}),
		diffID:  sha256.New(), digest: sha256.New(),
	}
	for range workers {
		z.wg.Add(1)
		go func() {
			defer z.wg.Done()
			for b := range z.work {
				b.err = compressBlock(b, level)
				close(b.ready)
			}
		}()
	}
	go z.output()
	return z
}

// compressBlock deflates b.in with b.dict as the dictionary into b.out,
// ended by a sync flush, or, for the last block, by the final block.
func compressBlock(b *gzBlock, level int) error {
	fw, err := flate.NewWriterDict(&b.out, level, b.dict)
	if err != nil {
		return err
	}
	if _, err := fw.Write(b.in); err != nil {
		return err
	}
	if b.last {
		return fw.Close()
	}
	return fw.Flush()
}

// output writes the header, every block's output in order, hashing the
// input and the output, then the trailer.
func (z *blockGzip) output() {
	defer close(z.done)
	write := func(p []byte) {
		if z.err != nil {
			return
		}
		var n int
		n, z.err = z.out.Write(p)
		z.outN += int64(n)
		z.digest.Write(p[:n])
		if z.err != nil {
			z.failed.Store(&z.err)
		}
	}
	write(gzipHeader)
	for b := range z.ordered {
		<-b.ready
		if z.err == nil && b.err != nil {
			z.err = b.err
			z.failed.Store(&b.err)
		}
		write(b.out.Bytes())
		z.diffID.Write(b.in)
		z.crc = crc32.Update(z.crc, crc32.IEEETable, b.in)
		z.in += int64(len(b.in))
		gzBuffers.put(b.in)
	}
	var trailer [8]byte
	binary.LittleEndian.PutUint32(trailer[:4], z.crc)
	binary.LittleEndian.PutUint32(trailer[4:], uint32(z.in)) // ISIZE: the input's size modulo 2^32
	write(trailer[:])
}

// Write takes p into the blocks. Its error is that of an earlier block
// or of the output, once one has failed (the output is written behind
// the input): Close reports the rest.
func (z *blockGzip) Write(p []byte) (int, error) {
	if z.closed {
		return 0, errors.New("blockGzip: write after close")
	}
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), gzipBlockSize-len(z.buf))
		z.buf = append(z.buf, p[:k]...)
		p = p[k:]
		if len(z.buf) == gzipBlockSize {
			z.submit(false)
		}
	}
	if err := z.failed.Load(); err != nil {
		return n, *err
	}
	return n, nil
}

// submit hands the block in buf to the compressors and the output, and
// starts the next one.
func (z *blockGzip) submit(last bool) {
	b := &gzBlock{in: z.buf, dict: z.dict, last: last, ready: make(chan struct{})}
	z.dict = append([]byte(nil), z.buf[max(len(z.buf)-gzipDictSize, 0):]...)
	if !last {
		z.buf = gzBuffers.get()
	}
	z.ordered <- b
	z.work <- b
}

// Close compresses what is left as the final block, waits for the output
// and writes the trailer. It returns the first error of any block or of
// the underlying writer. Closing again returns the same.
func (z *blockGzip) Close() error {
	if z.closed {
		return z.err
	}
	z.closed = true
	z.submit(true)
	close(z.ordered)
	close(z.work)
	z.wg.Wait()
	<-z.done
	return z.err
}

// Sums are, after Close, the SHA-256 of the input (the uncompressed
// layer: its diff ID) and of the output (the compressed layer: its
// digest), with the output's size.
func (z *blockGzip) Sums() (diffID, digest [sha256.Size]byte, size int64) {
	z.diffID.Sum(diffID[:0])
	z.digest.Sum(digest[:0])
	return diffID, digest, z.outN
}
