package patches

import (
	"errors"
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
func lockDirs(dirs []string, timeout time.Duration) (unlocked map[string]error, release func()) {
	sorted := slices.Clone(dirs)
	slices.Sort(sorted)
	deadline := time.Now().Add(timeout)
	var held []*os.File
	for _, dir := range sorted {
		f, err := lockDir(dir, deadline, timeout)
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
// again until deadline.
func lockDir(dir string, deadline time.Time, timeout time.Duration) (*os.File, error) {
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
		if left <= 0 {
			f.Close()
			waited := "did not wait (INFERA_PATCH_LOCK_TIMEOUT=0)"
			if timeout > 0 {
				waited = "waited " + timeout.String() + " (INFERA_PATCH_LOCK_TIMEOUT)"
			}
			return nil, fmt.Errorf("the package directory %s is locked (flock) by another process; %s", dir, waited)
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// writeFix is what an operator can do about an engine file that could not
// be written, for the causes that are the deployment's rather than the
// file's: "" for anything else.
func writeFix(err error) string {
	switch {
	case errors.Is(err, syscall.EROFS):
		return "the engine is on a read-only filesystem: apply the fix when the image is built (infera-exec --check ROOT lists what is pending) or mount the package directory writable"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Sprintf("uid %d may not write the engine's package directory: run the start as the engine's owner (the image's, usually root) or apply the fix when the image is built", os.Geteuid())
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "the filesystem holding the engine is full: the patch needs room for one more copy of the file while it is replaced"
	}
	return ""
}
