package progress

import (
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
