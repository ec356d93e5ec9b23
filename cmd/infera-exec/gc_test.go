package main

import (
	"runtime/debug"
	"testing"
)

// The start runs with the collector off and a bounded heap; what the
// process started with comes back for the long life of --init.
func TestCollectLaterRestores(t *testing.T) {
	pct := debug.SetGCPercent(73)
	lim := debug.SetMemoryLimit(1 << 40)
	defer debug.SetGCPercent(pct)
	defer debug.SetMemoryLimit(lim)

	restore := collectLater()
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("during the start the collector is at %d%%, not off", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 256<<20 {
		t.Errorf("during the start the memory limit is %d, not 256 MiB", got)
	}
	restore()
	if got := debug.SetGCPercent(-1); got != 73 {
		t.Errorf("after restore the collector is at %d%%, not 73%%", got)
	}
	debug.SetGCPercent(73)
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("after restore the memory limit is %d", got)
	}

	// A lower GOMEMLIMIT is kept.
	debug.SetMemoryLimit(64 << 20)
	restore = collectLater()
	if got := debug.SetMemoryLimit(-1); got != 64<<20 {
		t.Errorf("a lower limit became %d", got)
	}
	restore()
}
