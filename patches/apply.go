package patches

import (
	"slices"
	"time"

	"github.com/infera/infera-exec/patches/patchdef"
)

// Result is what happened to one patch.
type Result struct {
	ID       string         `json:"id"`
	Summary  string         `json:"summary"`
	Source   string         `json:"source"`
	Package  string         `json:"package"`
	Version  string         `json:"version,omitempty"`
	Required bool           `json:"required"`
	Variant  string         `json:"variant,omitempty"` // the variant that decided the state
	State    patchdef.State `json:"state"`             // after this run
	Before   patchdef.State `json:"before"`            // as found
	Action   string         `json:"action"`            // applied, would-apply, none, failed
	Why      string         `json:"why,omitempty"`
	Missing  bool           `json:"package_missing,omitempty"` // the package is not importable
	Edits    []EditResult   `json:"edits,omitempty"`
	// NotImported: the patch is shadowed because a module it edits is
	// not loaded from the edited file (a package directory or an
	// extension module of that name beside it, or a parent that is no
	// package); LoadsInstead names what loads. No start can fix that.
	NotImported  bool   `json:"not_imported,omitempty"`
	LoadsInstead string `json:"loads_instead,omitempty"`
	// Recorded: decided from the record of an earlier verified run, every
	// file's identity unchanged since; no file was read.
	Recorded bool `json:"recorded,omitempty"`
	// Replayed: written with the content the record kept, on files that
	// hold again what the recorded run read (a new container layer of
	// the same image), without planning; see replay.go.
	Replayed bool `json:"replayed,omitempty"`
	// Caveat and Upstream are the definition's: what to know about
	// keeping the fix on, and where it stands upstream.
	Caveat   string                   `json:"caveat,omitempty"`
	Upstream *patchdef.UpstreamStatus `json:"upstream,omitempty"`
	// Shadow is the shadow tree the patch is in force from (the worker
	// imports its package from there; see shadow.go); "" in place.
	Shadow string `json:"shadow,omitempty"`
	// Unvouched: the state is the probing interpreter's view, not the
	// worker's (a shell-script worker, with INFERA_PYTHON not naming its
	// interpreter), and why, with how to make it certain. Not in force.
	Unvouched string `json:"unvouched,omitempty"`

	err    error // why a write was abandoned
	refuse error // the definition cannot be used as it is (78)
}

// Ok reports whether the patch is in a state the worker can run with.
func (r *Result) Ok() bool {
	if r.Unvouched != "" {
		return false // what the worker imports was not asked
	}
	return r.State == patchdef.Applied || r.State == patchdef.Upstream || r.State == patchdef.NotApplicable
}

// EditResult is one edit of a patch.
type EditResult struct {
	File string `json:"file"`
	Path string `json:"path,omitempty"`
	patchdef.Evaluation
	SHA256Before string   `json:"sha256_before,omitempty"`
	SHA256After  string   `json:"sha256_after,omitempty"`
	PycsRemoved  []string `json:"pycs_removed,omitempty"`
	// Wrote is where this run put the replacement (lines of the file as
	// written); At (the evaluation's) is where it looked before.
	Wrote []patchdef.LineRange `json:"wrote,omitempty"`
}

// planningHook lets tests see the run about to plan definition i.
var planningHook func(i int)

// options control a run.
type options struct {
	DryRun  bool            // decide states, write nothing
	Require map[string]bool // ids required in addition to required = true
	// LockTimeout bounds the wait for the package directories' locks, for
	// all of them together; 0 tries each once (INFERA_PATCH_LOCK_TIMEOUT).
	LockTimeout time.Duration
	// Stop, closed when the start is asked to stop, ends that wait at
	// once (nil: never).
	Stop <-chan struct{}
	// PyMinor is the worker's CPython 3.minor (the ABI family's), which
	// decides the extension-module suffixes that can shadow a patched
	// module; 0 = read it from the package's path (python3.X), else
	// unknown (see importer).
	PyMinor int
	// PycachePrefix is where the worker's interpreter keeps bytecode
	// instead of __pycache__ (sys.pycache_prefix, absolute) and the uid
	// it runs as; Root "" = none. A run with one is not recorded: the
	// record does not follow the prefix tree, so every start checks it.
	PycachePrefix pycachePrefix
	// StateDir is infera-exec's trusted state directory: where the state
	// verified by a run is recorded, so that a restart on unchanged files
	// reads none of them (see record.go). "" = always the full check.
	StateDir string
}

// applySet brings every definition of set to its target state in the
// packages of loc, under an exclusive flock on each package directory.
//
// It plans first: the definitions are decided in order, in memory, each
// file read from disk once per run, and a patch that edits a file an
// earlier patch of the run changed sees that planned content (so patches
// on one file compose as if each had been written before the next was
// read). A dry run decides every patch against the files as they are.
//
// Then it commits by group: patches linked by the files they change (or
// read after an earlier patch changed them) form one transaction. Every
// changed file of every group is written to a temporary file and fsynced
// (a few at a time), then each group's files are renamed into place, each
// only while it is still the file read, and read back (no directory is
// fsynced: a rename lost in a crash is patched again). A failed write or rename restores the group's files already
// renamed and fails the group's patches (one that had nothing to write
// is decided again on the files as they are); another writer at work makes
// the group be planned and committed afresh, once. At every instant each
// file is its old or its new complete content, and a start that died
// between two files of a group is finished by the next one, because
// "some applied, some pending" is itself pending.
func applySet(set *patchdef.Set, loc *Location, opt options) []Result {
	if opt.StateDir == "" || opt.DryRun || opt.PycachePrefix.Root != "" {
		res, _ := apply(set, loc, opt)
		return res
	}
	return applyRecorded(set, loc, opt)
}

// apply is Apply without the record: it returns what it saw of every file
// it consulted, for the record.
func apply(set *patchdef.Set, loc *Location, opt options) ([]Result, *observed) {
	seen := &observed{}
	results := make([]Result, len(set.Defs))
	plans := make([]*plan, len(set.Defs))
	pkgs := make([]Package, len(set.Defs))
	var dirs []string // the package directories this run may write in
	for i, d := range set.Defs {
		r := &results[i]
		*r = Result{ID: d.ID, Summary: d.Summary, Source: d.Source, Package: d.Package,
			Required: d.Required || opt.Require[d.ID], Action: "none", Caveat: d.Caveat, Upstream: d.Status}
		pkg, ok := loc.Packages[d.Package]
		if !ok || !pkg.Found {
			r.State, r.Before, r.Missing = patchdef.NotApplicable, patchdef.NotApplicable, true
			r.Why = pkg.Why
			if r.Why == "" {
				r.Why = d.Package + " was not looked up"
			}
			continue
		}
		r.Version = pkg.Version
		if st, why := d.Scope(pkg.Version, pkg.VersionWhy); st != "" {
			r.State, r.Before, r.Why = st, st, why
			continue
		}
		pkgs[i] = pkg
		if !slices.Contains(dirs, pkg.Dir) {
			dirs = append(dirs, pkg.Dir)
		}
	}
	// One lock per package directory and run, taken before anything is
	// read, within one bounded wait for all of them together.
	var unlocked map[string]error
	if !opt.DryRun {
		var release func()
		unlocked, release = lockDirs(opt.Stop, dirs, opt.LockTimeout)
		defer release()
	}
	v := newView(!opt.DryRun, opt.PyMinor, needlesOf(set))
	last := lastEditors(set, pkgs)
	for i, d := range set.Defs {
		if !pkgs[i].Found {
			continue
		}
		// A package whose lock could not be had is decided as a dry run
		// decides it: what is in force stays so; what would need writing
		// is not written.
		lockErr := unlocked[pkgs[i].Dir]
		if planningHook != nil {
			planningHook(i)
		}
		unmet := unmetRequirement(set, d, results[:i])
		plans[i] = planOne(d, pkgs[i], v, opt.DryRun || lockErr != nil || unmet != "", &results[i])
		plans[i].lockErr = lockErr
		plans[i].unmet = unmet
		if v.compose {
			v.stageFinal(last, i)
		}
	}
	if !opt.DryRun {
		// One read buffer for the run's read-backs: its pages are touched
		// once.
		commitGroups(groupsOf(plans, v, set), set, plans, results, make([]byte, 64<<10))
		for _, d := range v.changed {
			d.settle() // one the commit did not take: discarded
		}
		for _, d := range v.changed {
			if _, ok := d.final(); ok && d.cur != d.data {
				seen.wrote = append(seen.wrote, d)
			}
		}
	}
	for i, p := range plans {
		if p == nil {
			continue
		}
		r := &results[i]
		p.finish(r, opt.DryRun || p.lockErr != nil || p.unmet != "", opt.PycachePrefix)
		if p.unmet != "" && r.Action == "would-apply" {
			// Decided as a dry run decides it, and never written.
			r.Action, r.Why = "none", "not applied: "+p.unmet
		}
		if p.lockErr != nil {
			seen.incomplete = true
			switch {
			case r.Action == "would-apply":
				r.Action, r.Why = "failed", p.lockErr.Error()
			case r.State == patchdef.Shadowed && !r.NotImported:
				r.Why += "; not removed: " + p.lockErr.Error() // stale bytecode
			}
		}
		fs, rr := p.fs, *r
		if !opt.DryRun && p.lockErr == nil {
			var inForce bool
			fs, rr, inForce = v.asWritten(set.Defs[i], p, r)
			seen.incomplete = seen.incomplete || !inForce
			if seen.results == nil {
				seen.results = slices.Clone(results)
			}
			seen.results[i] = rr
		}
		seen.add(p.pkg, rr, fs)
	}
	return results, seen
}

// asWritten is what the record may keep of a patch's files. A file that
// a later patch of the run changed again is on disk with the later
// content, which this patch's result was not decided on (finish leaves
// its identity out): the patch is decided again, in memory, on the
// contents as written and read back, and when that gives the same result
// the identities of those contents are what the record keeps, as the
// restart's full check would have found them. Otherwise the files stay
// unverified, and the run is not recorded.
//
// A patch this run wrote is decided again the same way, so that what the
// record keeps of it (its edits' states, its file's hash before) is what
// a restart's full check would find, not the first start's "pending".
//
// inForce is false when a patch this run wrote is not in force as written:
// then nothing of the run is recorded.
func (v *view) asWritten(d *patchdef.Definition, p *plan, r *Result) (fs *files, rr Result, inForce bool) {
	wrote := p.kind == writes && r.Action == "applied"
	again := wrote
	for _, t := range p.fs.m {
		if t.verified || t.disk == nil || !t.disk.changed {
			continue
		}
		if _, ok := t.disk.final(); !ok {
			return p.fs, *r, true // unverified: not recorded
		}
		again = true
	}
	if !again {
		return p.fs, *r, true
	}
	if v.written == nil {
		w := newView(false, v.minor, v.needles)
		w.real, w.types, w.sums = v.real, v.types, v.sums
		for path, dk := range v.disk {
			final, ok := dk.final()
			if dk.changed && !ok {
				continue // read from disk, if this patch reads it
			}
			w.disk[path] = &diskFile{path: path, data: dk.cur, id: final, cur: dk.cur, text: dk.text, sums: v.sums}
			if !dk.changed {
				w.disk[path].id = dk.id
			}
		}
		v.written = w
	}
	r2 := Result{ID: r.ID, Package: r.Package, Action: "none"}
	p2 := planOne(d, p.pkg, v.written, true, &r2)
	// A patch its guards decided (undecided: nothing planned) is decided
	// again the same way: its guard files are among those it read.
	if p2.kind != decided && p2.kind != undecided || r2.State != r.State || r2.Variant != r.Variant || len(r2.Edits) != len(r.Edits) {
		return p.fs, *r, !wrote
	}
	rr = *r
	rr.Edits = slices.Clone(r.Edits)
	for j := range rr.Edits {
		rr.Edits[j].Evaluation = r2.Edits[j].Evaluation
		rr.Edits[j].SHA256Before = rr.Edits[j].SHA256After
	}
	return p2.fs, rr, true
}
