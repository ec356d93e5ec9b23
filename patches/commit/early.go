package commit

import "github.com/infera/infera-exec/internal/atomicfile"

// early is a file staged while the run was still planning: its content
// was final then (no later patch may edit it).
type early struct {
	content string
	done    chan struct{}
	staged  *atomicfile.Staged
	err     error
}

// earlySlots bounds the early stages running at once, as Stagers bounds
// the commit's.
var earlySlots = make(chan struct{}, Stagers)

// StageEarly starts staging f's Content now, beside the planning of the
// patches that cannot change it (a few files at a time): Run then finds
// it staged, or still being fsynced. Run takes an early stage only for
// the content it writes: any other is discarded (Settle). The caller
// holds the lock: leftovers of a killed start go first.
func (f *File) StageEarly() {
	if f.early != nil {
		return
	}
	atomicfile.RemoveStale(f.Path)
	e := &early{content: f.Content, done: make(chan struct{})}
	f.early = e
	path, was := f.Path, f.ReadID
	go func() {
		defer close(e.done)
		earlySlots <- struct{}{}
		defer func() { <-earlySlots }()
		e.staged, e.err = Stage(path, e.content, was)
	}()
}

// Staging reports whether an early stage of f is under way.
func (f *File) Staging() bool { return f.early != nil }

// Settle waits for f's early stage, if it has one, and reports whether it
// staged the content f will be written with (then it is f's stage); any
// other is discarded.
func (f *File) Settle() bool {
	e := f.early
	if e == nil {
		return false
	}
	f.early = nil
	<-e.done
	if e.content == f.Content && f.Content != f.Read {
		f.staged, f.stageErr = e.staged, e.err
		return true
	}
	if e.staged != nil {
		e.staged.Discard()
	}
	return false
}
