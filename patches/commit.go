package patches

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/patchdef"

	"github.com/infera/infera-exec/internal/atomicfile"
)

// group is one transaction of a run: patches tied by the files they
// change, or read as an earlier patch of the run planned them (see
// plan.link). Its files are all written or, after a failure, all restored.
type group struct {
	pats    []int       // its patches, indexes into the run's definitions, in order
	files   []*diskFile // the files they change, in order of first change
	renamed []*diskFile // renamed into place by this run, in order

	err, restoreErr error
	twice           bool // another writer got in the way of both attempts
}

// groupsOf forms the groups of a run that writes: the connected components
// of the patches over the files that link them, in order of their first
// patch. Patches linked to no file need no commit.
func groupsOf(plans []*plan, v *view) []*group {
	parent := make([]int, len(plans))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if parent[i] != i {
			parent[i] = find(parent[i])
		}
		return parent[i]
	}
	owner := map[*diskFile]int{} // the first patch linked to the file
	for i, p := range plans {
		if p == nil {
			continue
		}
		for _, d := range p.links {
			o, ok := owner[d]
			if !ok {
				owner[d] = i
				continue
			}
			a, b := find(o), find(i)
			parent[max(a, b)] = min(a, b)
		}
	}
	byRoot := map[int]*group{}
	var out []*group
	for i, p := range plans {
		if p == nil || len(p.links) == 0 {
			continue
		}
		g := byRoot[find(i)]
		if g == nil {
			g = &group{}
			byRoot[find(i)] = g
			out = append(out, g)
		}
		g.pats = append(g.pats, i)
	}
	for _, d := range v.changed {
		g := byRoot[find(owner[d])]
		g.files = append(g.files, d)
	}
	return out
}

// commitGroups writes every group of a run, as Apply describes, and
// settles the groups that failed: a group another writer got in the way
// of is planned and committed afresh once; the patches of a group that
// still failed that wrote nothing themselves are decided again against
// the files as they are now on disk.
func commitGroups(groups []*group, set *patchdef.Set, plans []*plan, results []Result, buf []byte) {
	commit(groups, plans, buf)
	for _, g := range groups {
		if errors.Is(g.err, errChanged) {
			g = replan(g, set, plans, results, buf)
		}
		if g.err != nil {
			redecide(g, set, plans, results)
		}
	}
}

// replan reads the group's files afresh and plans and commits its patches
// again, as one group.
func replan(g *group, set *patchdef.Set, plans []*plan, results []Result, buf []byte) *group {
	v := newView(true, plans[g.pats[0]].fs.v.minor, plans[g.pats[0]].fs.v.needles)
	for _, i := range g.pats {
		r := &results[i]
		r.decideAgain()
		plans[i] = planOne(set.Defs[i], plans[i].pkg, v, false, r)
	}
	again := &group{pats: g.pats, files: v.changed}
	commit([]*group{again}, plans, buf)
	if errors.Is(again.err, errChanged) {
		again.twice = true
		for _, i := range again.pats {
			plans[i].twice = true
		}
	}
	return again
}

// redecide: the patches of a failed group that wrote nothing were decided
// on content that is not on disk; they are decided again on what is. One
// that now needs writing shares the group's failure.
func redecide(g *group, set *patchdef.Set, plans []*plan, results []Result) {
	v := newView(false, plans[g.pats[0]].fs.v.minor, plans[g.pats[0]].fs.v.needles)
	for _, i := range g.pats {
		if plans[i].kind == writes {
			continue
		}
		r := &results[i]
		r.decideAgain()
		plans[i] = planOne(set.Defs[i], plans[i].pkg, v, false, r)
		plans[i].err, plans[i].twice = g.err, g.twice
	}
}

// commit stages every changed file of every group (a few at a time: the
// kernel can batch their journal commits), renames each group's files
// into place, and reads back what it wrote, through buf (any size): an
// identity is known only for the bytes this run planned. Directories are
// not fsynced: a rename lost in a crash only means that the next start
// patches the file again. It records each
// group's outcome in its writers' plans.
func commit(groups []*group, plans []*plan, buf []byte) {
	// Temporary files left by a start killed mid-write go first (we hold
	// the lock), before this run stages its own beside them; the path of
	// a file staged early was cleaned before that stage began.
	stale := map[string]bool{}
	for _, g := range groups {
		for _, d := range g.files {
			stale[d.path] = stale[d.path] || d.early != nil
		}
	}
	var todo []*diskFile
	for _, g := range groups {
		for _, i := range g.pats {
			if p := plans[i]; p.kind == writes {
				for _, path := range p.fs.order {
					if !stale[path] {
						stale[path] = true
						atomicfile.RemoveStale(path)
					}
				}
			}
		}
		for _, d := range g.files {
			if d.cur == d.data {
				d.settleEarly()                 // not taken: discarded
				d.final, d.finalOK = d.id, true // changed and changed back: not written
				continue
			}
			todo = append(todo, d)
		}
	}
	inParallel(len(todo), func(k int) {
		d := todo[k]
		if d.settleEarly() {
			return
		}
		d.staged, d.stageErr = stageFile(d.path, d.cur, d.id)
	})
	for _, g := range groups {
		g.rename()
	}

	// No directory fsync: a rename lost in a crash leaves the file read,
	// and the next start patches it again (each file is its old or its
	// new complete content either way).

	for _, g := range groups {
		if g.err == nil {
			for _, d := range g.renamed {
				if id, ok := readsAs(d.path, d.cur, buf); ok {
					d.final, d.finalOK = id, true
				} else if g.err == nil {
					// Not restored: what is there now is another writer's.
					// Only what was read back counts as applied.
					g.err = fmt.Errorf("%s: read back after the write, it does not hold what was written (another writer got in, or the filesystem did not keep it); the next start decides it again", d.path)
				}
			}
		}
		for _, i := range g.pats {
			if p := plans[i]; p.kind == writes {
				p.err, p.restoreErr = g.err, g.restoreErr
			}
		}
	}
}

// rename puts the group's staged files in place, each only while it is
// still the file read; on the first failure (or when one could not be
// staged) the rest are discarded and the ones renamed are restored.
func (g *group) rename() {
	var staged []*diskFile
	for _, d := range g.files {
		if d.staged == nil && d.stageErr == nil {
			continue // not written
		}
		staged = append(staged, d)
		if d.stageErr != nil && g.err == nil {
			g.err = d.stageErr
		}
	}
	if g.err == nil {
		for _, d := range staged {
			if err := renameFile(d.staged); err != nil {
				g.err = err
				break
			}
			d.renamedID, _ = fileid.Lstat(d.path)
			g.renamed = append(g.renamed, d)
		}
	}
	if g.err != nil {
		for _, d := range staged {
			if d.staged != nil {
				d.staged.Discard() // no-op for the ones renamed
			}
		}
		g.restoreErr = restore(g.renamed)
	}
}

// restore puts back the content read of the files this run renamed into
// place, last first, each only while it is still the file this run wrote.
func restore(renamed []*diskFile) error {
	var errs []error
	for i := len(renamed) - 1; i >= 0; i-- {
		d := renamed[i]
		if err := writeFile(d.path, []byte(d.data), d.renamedID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// earlyStage is a file staged while the run was still planning: after
// the last patch that may edit it (see stageFinal), its content was final.
type earlyStage struct {
	content string
	done    chan struct{}
	staged  *atomicfile.Staged
	err     error
}

// lastEditors is, for each file some definition may edit (any variant's
// edits, joined to its package's directory), the last definition that
// may: once that one is planned, the file's content is final.
func lastEditors(set *patchdef.Set, pkgs []Package) map[string]int {
	last := map[string]int{}
	for i, d := range set.Defs {
		if !pkgs[i].Found {
			continue
		}
		for _, v := range d.EditSets() {
			for _, e := range v.Edits {
				last[filepath.Join(pkgs[i].Dir, e.File)] = i
			}
		}
	}
	return last
}

// stageFinal starts staging, beside the planning of the patches after
// patch i, each file the run changes whose content no later patch may
// change (a few files at a time, as commit stages): the commit then finds
// them staged, or still being fsynced. A file whose path lastEditors does
// not know (the package reached through a link) waits for the commit.
// The commit takes an early stage only for the content it would write:
// any other is discarded (settleEarly).
func (v *view) stageFinal(last map[string]int, i int) {
	for _, d := range v.changed {
		if j, ok := last[d.path]; d.early != nil || d.cur == d.data || !ok || j > i {
			continue
		}
		atomicfile.RemoveStale(d.path) // under the lock, before this run stages beside it
		e := &earlyStage{content: d.cur, done: make(chan struct{})}
		d.early = e
		path, was := d.path, d.id
		go func() {
			defer close(e.done)
			earlySlots <- struct{}{}
			defer func() { <-earlySlots }()
			e.staged, e.err = stageFile(path, e.content, was)
		}()
	}
}

// earlySlots bounds the early stages running at once, as stagers bounds
// the commit's.
var earlySlots = make(chan struct{}, stagers)

// settleEarly waits for the file's early stage, if it has one, and
// reports whether it staged the content the file will be written with
// (d.staged and d.stageErr are then its outcome); any other is discarded.
func (d *diskFile) settleEarly() bool {
	e := d.early
	if e == nil {
		return false
	}
	d.early = nil
	<-e.done
	if e.content == d.cur && d.cur != d.data {
		d.staged, d.stageErr = e.staged, e.err
		return true
	}
	if e.staged != nil {
		e.staged.Discard()
	}
	return false
}

// stagers bounds how many files are staged (written and fsynced) at
// once: fsyncs wait on the disk, not the CPU, but each goroutine beyond
// a few is a thread and its stack for the runtime to start.
const stagers = 4

// inParallel runs f(0..n-1) on at most stagers goroutines.
func inParallel(n int, f func(int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(n, stagers) {
		wg.Go(func() {
			for k := int(next.Add(1) - 1); k < n; k = int(next.Add(1) - 1) {
				f(k)
			}
		})
	}
	wg.Wait()
}

// decideAgain clears what a decision put in r, keeping what the
// definition and the package say, for planOne to decide it afresh.
func (r *Result) decideAgain() {
	*r = Result{ID: r.ID, Summary: r.Summary, Source: r.Source, Package: r.Package,
		Required: r.Required, Action: "none", Version: r.Version}
}

// writeFile replaces a file crash-safely, keeping its mode and owner,
// provided the file is still the one read (identity was): how a failed
// commit puts the original content back. A variable so tests can count
// the restores or make them fail.
var writeFile = atomicWrite

// stageFile writes the planned content of a file into a temporary file
// beside it, complete and fsynced, with its mode and owner, to be renamed
// over path only while path is still the file read (identity was); a
// variable so tests can make it fail or count the writes. It runs in
// several goroutines at once.
var stageFile = func(path, content string, was identity) (*atomicfile.Staged, error) {
	return stageFrom(path, strings.NewReader(content), &was)
}

// stageFrom is stageFile of what r reads. The rename checks the identity
// that was holds when it comes, not when the file is staged.
func stageFrom(path string, r io.Reader, was *identity) (*atomicfile.Staged, error) {
	return atomicfile.Stage(path, r, atomicfile.Options{KeepOwner: true, BeforeRename: func() error { return stillRead(path, *was)() }})
}

// renameFile puts a staged file in place (see atomicfile.Staged.Commit);
// a variable so tests can fail a rename or stop the process between two.
var renameFile = (*atomicfile.Staged).Commit

// beforeRenameHook lets tests act as another writer at the last moment.
var beforeRenameHook func(path string)

// errChanged: the file is no longer the one that was read and evaluated.
var errChanged = errors.New("changed by another writer since it was read")

// stillRead is the last check before a rename: path is still the file
// whose identity was was, so another writer's change is never overwritten.
func stillRead(path string, was identity) func() error {
	return func() error {
		if beforeRenameHook != nil {
			beforeRenameHook(path)
		}
		if now, ok := fileid.Lstat(path); !ok || now != was {
			return fmt.Errorf("%s: %w; not written", path, errChanged)
		}
		return nil
	}
}

func atomicWrite(path string, data []byte, was identity) error {
	return atomicfile.WriteBytes(path, data, atomicfile.Options{KeepOwner: true, BeforeRename: stillRead(path, was)})
}
