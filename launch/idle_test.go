package launch

import (
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The threads a start leaves idle end: eight goroutines, each locked to a
// thread of its own at once, leave eight threads idle when they unlock
// and return (the runtime keeps them); on one processor shedThreads ends
// them, down to the few the runtime keeps running.
func TestShedThreads(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var held, release sync.WaitGroup
	held.Add(8)
	release.Add(1)
	var done sync.WaitGroup
	for i := 0; i < 8; i++ {
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			held.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	held.Wait()
	release.Done()
	done.Wait()
	before := threadCount()
	require.GreaterOrEqual(t, before, 9, "eight idle threads and the test's")

	runtime.GOMAXPROCS(1)
	shedThreads()
	after := threadCount()
	t.Logf("threads: %d idle after the locked goroutines, %d after shedThreads", before, after)
	assert.LessOrEqual(t, after, 6, "the idle threads ended (%d before)", before)
}
