package patches

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"
)

// lockDirs takes an exclusive flock on each package directory itself, in
// sorted order: two starts at once (two containers sharing an editable
// checkout, or a restart racing its predecessor) patch one after the
// other. Directories can be locked on read-only filesystems and nothing
// is created. The wait is bounded for all of them together: whoever holds
// a lock (any uid that can open the directory can), a start waits at most
// timeout, then goes on without it. unlocked says, for each directory not
// locked, why; release drops the locks taken.
//
// A stop (stop closed: the start was asked to stop) ends the wait at
// once; what each message says is the time actually waited.
func lockDirs(stop <-chan struct{}, dirs []string, timeout time.Duration) (unlocked map[string]error, release func()) {
	sorted := slices.Clone(dirs)
	slices.Sort(sorted)
	begun := time.Now()
	deadline := begun.Add(timeout)
	var held []*os.File
	for _, dir := range sorted {
		f, err := lockDir(stop, dir, begun, deadline, timeout)
		if err != nil {
			if unlocked == nil {
				unlocked = map[string]error{}
			}
			unlocked[dir] = err
			continue
		}
		held = append(held, f)
	}
	return unlocked, func() {
		for _, f := range held {
			f.Close() // releases the flock
		}
	}
}

// lockDir takes the flock of one directory, trying at least once and
// again until deadline or a stop; the wait began at begun.
func lockDir(stop <-chan struct{}, dir string, begun, deadline time.Time, timeout time.Duration) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot lock the package directory: %w", err)
	}
	pause := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("cannot lock the package directory %s: %w", dir, err)
		}
		left := time.Until(deadline)
		stopped := false
		select {
		case <-stop:
			stopped = true
		default:
		}
		if left <= 0 || stopped {
			f.Close()
			return nil, fmt.Errorf("the package directory %s is locked (flock) by another process; %s", dir, waitedFor(time.Since(begun), timeout, stopped))
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// waitedFor says how long a lock was waited for: waited, the time since
// the wait began, against the bound timeout; stopped when a stop ended it
// before the bound. A wait that ran its course is the bound itself (to
// within one pause), named as such.
func waitedFor(waited, timeout time.Duration, stopped bool) string {
	switch {
	case stopped:
		return fmt.Sprintf("stopped waiting after %s of %s (INFERA_PATCH_LOCK_TIMEOUT): the start was asked to stop", waited.Round(time.Millisecond), timeout)
	case timeout == 0:
		return "did not wait (INFERA_PATCH_LOCK_TIMEOUT=0)"
	}
	return "waited " + timeout.String() + " (INFERA_PATCH_LOCK_TIMEOUT)"
}
