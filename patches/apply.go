package patches

import (
	"slices"
	"time"

	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/plan"
)

// Result, EditResult and Package are the plan's (package plan), named here
// for this package's callers (the report, the tools).
type (
	Result     = plan.Result
	EditResult = plan.EditResult
	Package    = plan.Package
)

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
	// unknown (see package plan's importer).
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
	plans := make([]*plan.Patch, len(set.Defs))
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
	v := plan.NewView(!opt.DryRun, opt.PyMinor, set)
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
		unmet := plan.UnmetRequirement(set, d, results[:i])
		plans[i] = plan.Decide(d, pkgs[i], v, opt.DryRun || lockErr != nil || unmet != "", &results[i])
		plans[i].LockErr = lockErr
		plans[i].Unmet = unmet
		if !opt.DryRun {
			stageFinal(v, last, i)
		}
	}
	if !opt.DryRun {
		// One read buffer for the run's read-backs: its pages are touched
		// once.
		commitGroups(groupsOf(plans, v, set), set, plans, results, make([]byte, 64<<10))
		for _, d := range v.Changed() {
			d.Settle() // one the commit did not take: discarded
		}
		for _, d := range v.Changed() {
			if _, ok := d.Final(); ok && d.Planned() != d.Read() {
				seen.wrote = append(seen.wrote, d)
			}
		}
	}
	for i, p := range plans {
		if p == nil {
			continue
		}
		r := &results[i]
		prefix := opt.PycachePrefix
		prefix.PkgDir = p.Package().Dir
		p.Finish(r, opt.DryRun || p.LockErr != nil || p.Unmet != "", func(r *Result, of func(string) (identity, bool), wrote, dry bool) {
			checkBytecode(r, of, wrote, dry, prefix)
		})
		if p.Unmet != "" && r.Action == "would-apply" {
			// Decided as a dry run decides it, and never written.
			r.Action, r.Why = "none", "not applied: "+p.Unmet
		}
		if p.LockErr != nil {
			seen.incomplete = true
			switch {
			case r.Action == "would-apply":
				r.Action, r.Why = "failed", p.LockErr.Error()
			case r.State == patchdef.Shadowed && !r.NotImported:
				r.Why += "; not removed: " + p.LockErr.Error() // stale bytecode
			}
		}
		fs, rr := p.Files(), *r
		if !opt.DryRun && p.LockErr == nil {
			var inForce bool
			fs, rr, inForce = v.AsWritten(set.Defs[i], p, r)
			seen.incomplete = seen.incomplete || !inForce
			if seen.results == nil {
				seen.results = slices.Clone(results)
			}
			seen.results[i] = rr
		}
		seen.add(p.Package(), rr, fs)
	}
	return results, seen
}
