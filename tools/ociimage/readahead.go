package ociimage

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/infera/infera-exec/overlay"
)

// Read-ahead bounds: readChunk bytes a read, readChunks chunks queued
// per file, readWorkers() files read at once. What is read but not yet in
// the tar stays below readWorkers()*(readChunks+1)*readChunk bytes (40 MB
// on 8 workers).
const (
	readChunk  = 1 << 20
	readChunks = 4
)

func readWorkers() int { return min(max(runtime.GOMAXPROCS(0), 2), 8) }

var readBuffers = newBufPool(readChunk)

// readAhead reads the payload's files for the layer's sequential tar
// writer, several at once: each file is opened, read in chunks and
// hashed on a goroutine of its own, at most readWorkers() files at a
// time, in the order the writer takes them. Next hands the writer the
// next file's stream; a stream's error (set when its chunks end) says
// whether the bytes were exactly the index's (size and SHA-256). Stop
// ends the reading early and waits for it; it must be called once.
type readAhead struct {
	queue chan *fileStream
	stop  chan struct{}
	wg    sync.WaitGroup
}

// fileStream is one file's bytes, in order, then its verdict.
type fileStream struct {
	e      overlay.Entry
	path   string
	chunks chan []byte
	err    error // valid once chunks is closed
}

// errStopped ends a read that Stop cut short.
var errStopped = errors.New("stopped")

// newReadAhead starts reading root's files among entries (type file), in
// order.
func newReadAhead(root string, entries []overlay.Entry) *readAhead {
	workers := readWorkers()
	r := &readAhead{queue: make(chan *fileStream, workers), stop: make(chan struct{})}
	sem := make(chan struct{}, workers)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(r.queue)
		for _, e := range entries {
			s := &fileStream{e: e, path: filepath.Join(root, filepath.FromSlash(e.Path)), chunks: make(chan []byte, readChunks)}
			// A file holds a slot until it is read to its end; the files
			// holding slots are the writer's one and those after it, so
			// the writer's file always has one.
			select {
			case sem <- struct{}{}:
			case <-r.stop:
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer func() { <-sem }()
				s.err = s.read(r.stop)
				close(s.chunks)
			}()
			select {
			case r.queue <- s:
			case <-r.stop:
				return
			}
		}
	}()
	return r
}

// read sends the file's bytes, as its index says they are, in chunks,
// and says whether they were: exactly e.Size bytes with e.SHA256.
func (s *fileStream) read(stop <-chan struct{}) error {
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("layer entry %s: %w", s.e.Path, err)
	}
	defer f.Close()
	h := sha256.New()
	changed := fmt.Errorf("payload file %s changed while the image was built: it no longer matches the index", s.path)
	for left := s.e.Size; left > 0; {
		buf := readBuffers.get()[:min(left, readChunk)]
		if _, err := io.ReadFull(f, buf); err != nil {
			readBuffers.put(buf)
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return changed
			}
			return fmt.Errorf("layer entry %s: %w", s.e.Path, err)
		}
		h.Write(buf)
		left -= int64(len(buf))
		select {
		case s.chunks <- buf:
		case <-stop:
			readBuffers.put(buf)
			return errStopped
		}
	}
	var more [1]byte
	if m, _ := f.Read(more[:]); m != 0 || hex.EncodeToString(h.Sum(nil)) != s.e.SHA256 {
		return changed
	}
	return nil
}

// Next is the next file's stream, in the order of entries.
func (r *readAhead) Next() (*fileStream, bool) {
	s, ok := <-r.queue
	return s, ok
}

// Stop ends every read still under way, drops what they read and waits
// for them.
func (r *readAhead) Stop() {
	close(r.stop)
	for s := range r.queue {
		for b := range s.chunks {
			readBuffers.put(b)
		}
	}
	r.wg.Wait()
}

// copyTo writes the stream's bytes to w, returning each chunk to the
// pool, and then the stream's verdict. After an error of w it drains the
// rest.
func (s *fileStream) copyTo(w io.Writer) error {
	var werr error
	for b := range s.chunks {
		if werr == nil {
			_, werr = w.Write(b)
		}
		readBuffers.put(b)
	}
	if werr != nil {
		return fmt.Errorf("layer entry %s: %w", s.e.Path, werr)
	}
	return s.err
}
