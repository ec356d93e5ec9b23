// Package progress answers "how far along is it?" for work that takes
// long enough to look stuck (an install of 20,000 files, an image of
// gigabytes): a line at most every Interval with the files and bytes done
// of the total, so that kubectl logs on an init container is never silent
// for minutes.
package progress

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Interval is how often a Meter says how far along it is, at most.
const Interval = 2 * time.Second

// Meter counts work done against a total and reports it through Say.
// A nil *Meter counts nothing and says nothing (quiet).
type Meter struct {
	What         string // "install", "index", ...
	Files, Bytes int64  // the totals; 0: unknown
	Say          func(line string)
	Now          func() time.Time // nil: time.Now; a seam for tests

	mu                   sync.Mutex
	start, last          time.Time
	doneFiles, doneBytes int64
	partial              int64 // bytes of the file in hand, through Partial
}

// New is a Meter for what, with the totals known up front.
func New(what string, files, bytes int64, say func(string)) *Meter {
	m := &Meter{What: what, Files: files, Bytes: bytes, Say: say}
	m.start = m.now()
	m.last = m.start
	return m
}

func (m *Meter) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Add counts files and bytes done, and says so when Interval has passed
// since the last line.
func (m *Meter) Add(files, bytes int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.doneFiles += files
	m.doneBytes += bytes
	if files > 0 {
		m.partial = 0 // the file in hand is done: counted whole
	}
	m.tick()
}

// tick says how far along it is when Interval has passed since the last
// line; m.mu is held.
func (m *Meter) tick() {
	if now := m.now(); now.Sub(m.last) >= Interval {
		m.last = now
		m.Say(m.line(now))
	}
}

func (m *Meter) line(now time.Time) string {
	s := fmt.Sprintf("%s: %d", m.What, m.doneFiles)
	if m.Files > 0 {
		s += fmt.Sprintf(" of %d", m.Files)
	}
	s += fmt.Sprintf(" files, %s", mb(m.doneBytes+m.partial))
	if m.Bytes > 0 {
		s += " of " + mb(m.Bytes)
	}
	return s + fmt.Sprintf(" (%s)", now.Sub(m.start).Round(time.Second))
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// Partial is a writer that counts the bytes of the file in hand (size
// bytes) as a copy or a hash writes them through it, so that one large
// file still gets its lines; the file is counted whole, and its partial
// count dropped, by the Add that counts it done. A nil Meter's counts
// nothing.
func (m *Meter) Partial(size int64) io.Writer {
	if m == nil {
		return io.Discard
	}
	return &partial{m: m, size: size}
}

type partial struct {
	m          *Meter
	size, seen int64
}

// Write never fails: counting must not stop the work it counts.
func (p *partial) Write(b []byte) (int, error) {
	p.seen = min(p.seen+int64(len(b)), p.size)
	p.m.mu.Lock()
	p.m.partial = max(p.m.partial, p.seen) // a second pass over the file (check, then copy) is not counted twice
	p.m.tick()
	p.m.mu.Unlock()
	return len(b), nil
}

// Done says what was done and how long it took: the final line, said
// whatever the interval.
func (m *Meter) Done() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Say(fmt.Sprintf("%s done: %d files, %s in %s", m.What, m.doneFiles, mb(m.doneBytes), m.now().Sub(m.start).Round(time.Second)))
}

// Reporter makes the Meters of one command: where their lines go, and
// the clock that spaces them. A nil *Reporter makes nil Meters (quiet).
type Reporter struct {
	Say func(line string)
	Now func() time.Time // nil: time.Now; a seam for tests
}

// Start is a Meter for what, with the totals known up front (0: unknown).
func (r *Reporter) Start(what string, files, bytes int64) *Meter {
	if r == nil || r.Say == nil {
		return nil
	}
	m := &Meter{What: what, Files: files, Bytes: bytes, Say: r.Say, Now: r.Now}
	m.start = m.now()
	m.last = m.start
	return m
}
