package ociimage

import "sync"

// bufPool hands out byte slices of one capacity for reuse. It keeps
// pointers to them, so that giving one back does not allocate.
type bufPool struct {
	pool sync.Pool
	size int
}

func newBufPool(size int) *bufPool { return &bufPool{size: size} }

// get is an empty slice with at least the pool's capacity.
func (p *bufPool) get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, p.size)
}

// put gives b back; its caller no longer uses it.
func (p *bufPool) put(b []byte) {
	b = b[:0]
	p.pool.Put(&b)
}
