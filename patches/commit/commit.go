// Package commit writes the contents a run planned for engine files, one
// group at a time, all or nothing: every file of a group is staged beside
// itself (written complete, fsynced, with its mode and owner), renamed
// over the file only while it is still the file read, and read back; on
// the first failure the files of the group already renamed get back the
// content read. At every instant each file is its old or its new complete
// content.
package commit

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/source"
)

// File is one file to write: what was read (its content and identity)
// and what to write in its place; Run fills in the outcome.
type File struct {
	Path    string
	Read    string          // the content read
	ReadID  fileid.Identity // the identity it had while it was read
	Content string          // to write; equal to Read: nothing to write

	Renamed fileid.Identity // right after this run renamed it into place
	Final   fileid.Identity // on disk after the commit
	FinalOK bool            // Final is known to be the identity of Content

	staged   *atomicfile.Staged
	stageErr error
	early    *early // staged while the run was still planning (StageEarly)
}

// Group is one transaction: its files are all written or, after a
// failure, all restored. Clean names the paths (besides its files) whose
// leftovers of a killed start go before anything is staged.
type Group struct {
	Files []*File
	Clean []string

	Err, RestoreErr error

	renamed []*File // renamed into place by this run, in order
}

// ErrChanged: the file is no longer the one that was read and evaluated.
var ErrChanged = errors.New("changed by another writer since it was read")

// Run stages every changed file of every group (a few at a time: the
// kernel can batch their journal commits), renames each group's files
// into place, and reads back what it wrote, through buf (any size): an
// identity is known only for the bytes planned. Directories are not
// fsynced: a rename lost in a crash only means that the next start
// patches the file again. Each group's outcome is in its Err and
// RestoreErr, each file's in its Final and FinalOK.
func Run(groups []*Group, buf []byte) {
	// Temporary files left by a start killed mid-write go first (the
	// caller holds the lock), before this run stages its own beside them;
	// the path of a file staged early was cleaned before that stage began.
	stale := map[string]bool{}
	for _, g := range groups {
		for _, f := range g.Files {
			stale[f.Path] = stale[f.Path] || f.early != nil
		}
	}
	var todo []*File
	for _, g := range groups {
		for _, p := range g.Clean {
			if !stale[p] {
				stale[p] = true
				atomicfile.RemoveStale(p)
			}
		}
		for _, f := range g.Files {
			if f.Content == f.Read {
				f.Settle()                          // not taken: discarded
				f.Final, f.FinalOK = f.ReadID, true // changed and changed back: not written
				continue
			}
			todo = append(todo, f)
		}
	}
	InParallel(len(todo), func(k int) {
		f := todo[k]
		if f.Settle() {
			return
		}
		f.staged, f.stageErr = Stage(f.Path, f.Content, f.ReadID)
	})
	for _, g := range groups {
		g.rename()
	}

	// No directory fsync: a rename lost in a crash leaves the file read,
	// and the next start patches it again (each file is its old or its
	// new complete content either way).

	for _, g := range groups {
		if g.Err != nil {
			continue
		}
		for _, f := range g.renamed {
			if id, ok := source.Holds(f.Path, f.Content, buf); ok {
				f.Final, f.FinalOK = id, true
			} else if g.Err == nil {
				// Not restored: what is there now is another writer's.
				// Only what was read back counts as applied.
				g.Err = fmt.Errorf("%s: read back after the write, it does not hold what was written (another writer got in, or the filesystem did not keep it); the next start decides it again", f.Path)
			}
		}
	}
}

// rename puts the group's staged files in place, each only while it is
// still the file read; on the first failure (or when one could not be
// staged) the rest are discarded and the ones renamed are restored.
func (g *Group) rename() {
	var staged []*File
	for _, f := range g.Files {
		if f.staged == nil && f.stageErr == nil {
			continue // not written
		}
		staged = append(staged, f)
		if f.stageErr != nil && g.Err == nil {
			g.Err = f.stageErr
		}
	}
	if g.Err == nil {
		for _, f := range staged {
			if err := Rename(f.staged); err != nil {
				g.Err = err
				break
			}
			f.Renamed, _ = fileid.Lstat(f.Path)
			g.renamed = append(g.renamed, f)
		}
	}
	if g.Err != nil {
		for _, f := range staged {
			if f.staged != nil {
				f.staged.Discard() // no-op for the ones renamed
			}
		}
		g.RestoreErr = restore(g.renamed)
	}
}

// restore puts back the content read of the files this run renamed into
// place, last first, each only while it is still the file this run wrote.
func restore(renamed []*File) error {
	var errs []error
	for i := len(renamed) - 1; i >= 0; i-- {
		f := renamed[i]
		if err := Restore(f.Path, []byte(f.Read), f.Renamed); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Restore replaces a file crash-safely, keeping its mode and owner,
// provided the file is still the one with identity was: how a failed
// commit puts the original content back. A variable so tests can count
// the restores or make them fail.
var Restore = WriteBytes

// WriteBytes is Restore's own: atomicfile.WriteBytes over the file with
// identity was, and no other.
func WriteBytes(path string, data []byte, was fileid.Identity) error {
	return atomicfile.WriteBytes(path, data, atomicfile.Options{KeepOwner: true, BeforeRename: StillRead(path, was)})
}

// Stage writes the planned content of a file into a temporary file beside
// it, complete and fsynced, with its mode and owner, to be renamed over
// path only while path is still the file read (identity was); a variable
// so tests can make it fail or count the writes. It runs in several
// goroutines at once.
var Stage = func(path, content string, was fileid.Identity) (*atomicfile.Staged, error) {
	return StageFrom(path, strings.NewReader(content), &was)
}

// StageFrom is Stage of what r reads. The rename checks the identity that
// was holds when it comes, not when the file is staged.
func StageFrom(path string, r io.Reader, was *fileid.Identity) (*atomicfile.Staged, error) {
	return atomicfile.Stage(path, r, atomicfile.Options{KeepOwner: true, BeforeRename: func() error { return StillRead(path, *was)() }})
}

// Rename puts a staged file in place (see atomicfile.Staged.Commit); a
// variable so tests can fail a rename or stop the process between two.
var Rename = (*atomicfile.Staged).Commit

// BeforeRename lets tests act as another writer at the last moment.
var BeforeRename func(path string)

// StillRead is the last check before a rename: path is still the file
// whose identity was was, so another writer's change is never overwritten.
func StillRead(path string, was fileid.Identity) func() error {
	return func() error {
		if BeforeRename != nil {
			BeforeRename(path)
		}
		if now, ok := fileid.Lstat(path); !ok || now != was {
			return fmt.Errorf("%s: %w; not written", path, ErrChanged)
		}
		return nil
	}
}

// Stagers bounds how many files are staged (written and fsynced) at
// once: fsyncs wait on the disk, not the CPU, but each goroutine beyond
// a few is a thread and its stack for the runtime to start.
const Stagers = 4

// InParallel runs f(0..n-1) on at most Stagers goroutines.
func InParallel(n int, f func(int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(n, Stagers) {
		wg.Go(func() {
			for k := int(next.Add(1) - 1); k < n; k = int(next.Add(1) - 1) {
				f(k)
			}
		})
	}
	wg.Wait()
}
