package progress

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A line at most every Interval, counting what was done against the
// totals; none before the first Interval passes.
func TestMeterSaysAtMostEveryInterval(t *testing.T) {
	clock := time.Unix(1000, 0)
	var lines []string
	m := &Meter{What: "install", Files: 20000, Bytes: 1900e6, Say: func(l string) { lines = append(lines, l) }, Now: func() time.Time { return clock }}
	m.start, m.last = clock, clock
	for i := 0; i < 100; i++ {
		m.Add(100, 9.5e6)
		clock = clock.Add(Interval / 4)
	}
	// 100 adds over 25 intervals: a line every 4th add, the first after
	// one interval.
	assert.Len(t, lines, 24)
	assert.Equal(t, "install: 500 of 20000 files, 47.5 MB of 1900.0 MB (2s)", lines[0])
	assert.Equal(t, "install: 9700 of 20000 files, 921.5 MB of 1900.0 MB (48s)", lines[23])

	var quiet *Meter
	quiet.Add(1, 1) // a nil meter says nothing, and does not fail
}

// A Reporter's Meters use its clock and output; Done says the final
// summary whatever the interval; a nil Reporter is quiet.
func TestReporterStartsMetersAndDoneSummarizes(t *testing.T) {
	clock := time.Unix(1000, 0)
	var lines []string
	r := &Reporter{Say: func(l string) { lines = append(lines, l) }, Now: func() time.Time { return clock }}
	m := r.Start("index copy", 3, 3e6)
	m.Add(1, 1e6)
	assert.Empty(t, lines, "no line before the interval")
	clock = clock.Add(Interval)
	m.Add(1, 1e6)
	clock = clock.Add(time.Second)
	m.Add(1, 1e6)
	m.Done()
	assert.Equal(t, []string{"index copy: 2 of 3 files, 2.0 MB of 3.0 MB (2s)", "index copy done: 3 files, 3.0 MB in 3s"}, lines)

	var quiet *Reporter
	qm := quiet.Start("index", 1, 1)
	assert.Nil(t, qm)
	qm.Add(1, 1)
	qm.Done()
}

// One file larger than Interval allows still gets lines while it is
// copied, counting its bytes; a second pass over it (a check, then the
// copy) is not counted twice, and the file counted done is counted whole.
func TestPartialCountsTheFileInHand(t *testing.T) {
	clock := time.Unix(1000, 0)
	var lines []string
	m := &Meter{What: "install", Files: 2, Bytes: 1100e6, Say: func(l string) { lines = append(lines, l) }, Now: func() time.Time { return clock }}
	m.start, m.last = clock, clock
	chunk := make([]byte, 100e6/1000)
	write := func(w io.Writer, n int) {
		for range n {
			for range 1000 {
				w.Write(chunk)
			}
			clock = clock.Add(time.Second) // 100 MB a second
		}
	}
	write(m.Partial(1000e6), 4)  // a check that reads 400 MB and finds a difference
	write(m.Partial(1000e6), 10) // the copy: the first 400 MB again, then the rest
	m.Add(1, 1000e6)
	write(m.Partial(100e6), 2)
	assert.Equal(t, []string{
		"install: 0 of 2 files, 200.1 MB of 1100.0 MB (2s)",
		"install: 0 of 2 files, 400.0 MB of 1100.0 MB (4s)",
		"install: 0 of 2 files, 400.0 MB of 1100.0 MB (6s)", // the bytes read twice count once
		"install: 0 of 2 files, 400.1 MB of 1100.0 MB (8s)",
		"install: 0 of 2 files, 600.1 MB of 1100.0 MB (10s)",
		"install: 0 of 2 files, 800.1 MB of 1100.0 MB (12s)",
		"install: 1 of 2 files, 1000.0 MB of 1100.0 MB (14s)", // the file done counts whole
	}, lines)
	var nilMeter *Meter
	n, err := nilMeter.Partial(10).Write(chunk)
	assert.NoError(t, err)
	assert.Equal(t, len(chunk), n)
}
