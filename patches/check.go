package patches

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/infera/infera-exec/patches/patchdef"
)

// CheckReport is --check ROOT: every definition evaluated against an
// unpacked image root filesystem or a site-packages directory, offline
// and without writing.
type CheckReport struct {
	Root     string    `json:"root"`
	Location *Location `json:"location"`
	Results  []Result  `json:"results"`
	Drift    bool      `json:"drift"`
	// Shadowed: some patch edits a module that is not loaded from the
	// edited file (a package directory or extension module beside it):
	// not in force whatever a start does.
	Shadowed bool `json:"shadowed"`
	// Wrote: --apply: the patches were written (Results are their states
	// after the write); Failed are those that were pending and could not
	// be written, with why.
	Wrote  bool      `json:"wrote,omitempty"`
	Failed []Failure `json:"failed,omitempty"`
}

// Failure is a patch --apply could not write.
type Failure struct {
	ID  string `json:"id"`
	Why string `json:"why"`
}

// CheckAnswering is Check after asking, through answers, whether the
// filesystems of root and payloadRoot answer in time: the walk would
// otherwise block on a dead mount.
func CheckAnswering(root, payloadRoot string, answers func(paths ...string) error) (*CheckReport, error) {
	if err := answers(root, payloadRoot); err != nil {
		return nil, &ConfigError{err}
	}
	return check(root, payloadRoot)
}

// ApplyAnswering is --apply ROOT: the built-in and the payload's
// definitions written into root at build time, offline, with the plans,
// states and transactions of a start (each package directory locked,
// within lockTimeout in all), then reported as Check reports. No record
// is kept: a start on an image built from root finds the patches applied
// in its files.
func ApplyAnswering(root, payloadRoot string, answers func(paths ...string) error, lockTimeout time.Duration) (*CheckReport, error) {
	if err := answers(root, payloadRoot); err != nil {
		return nil, &ConfigError{err}
	}
	set, loc, err := offline(root, payloadRoot)
	if err != nil {
		return nil, err
	}
	rep := &CheckReport{Root: root, Location: loc, Wrote: true, Results: applySet(set, loc, options{LockTimeout: lockTimeout})}
	rep.judge()
	for _, r := range rep.Results {
		if r.Action == "failed" || r.State == patchdef.Pending {
			why := r.Why
			if why == "" {
				why = "still " + string(r.State) + " after the write"
			}
			rep.Failed = append(rep.Failed, Failure{ID: r.ID, Why: why})
		}
	}
	return rep, nil
}

// judge sets Drift and Shadowed from the results.
func (rep *CheckReport) judge() {
	for _, r := range rep.Results {
		if r.State == patchdef.Drift || r.State == patchdef.Partial {
			rep.Drift = true
		}
		if r.NotImported {
			rep.Shadowed = true
		}
	}
}

// check evaluates the built-in and the payload's definitions against root
// without Python and without writing, so a payload build can catch an
// upstream change before anything is deployed.
func check(root, payloadRoot string) (*CheckReport, error) {
	set, loc, err := offline(root, payloadRoot)
	if err != nil {
		return nil, err
	}
	rep := &CheckReport{Root: root, Location: loc, Results: applySet(set, loc, options{DryRun: true})}
	rep.judge()
	return rep, nil
}

// WriteText prints the report as a table per package.
func (rep *CheckReport) WriteText(w io.Writer) {
	if rep.Wrote {
		fmt.Fprintf(w, "infera-exec --apply %s (the states after the write)\n", rep.Root)
	} else {
		fmt.Fprintf(w, "infera-exec --check %s (nothing is written)\n", rep.Root)
	}
	for _, n := range rep.Location.Notes {
		fmt.Fprintf(w, "note: not certain: %s; the lookup passed over it\n", n)
	}
	var names []string
	for n := range rep.Location.Packages {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		pkg := rep.Location.Packages[n]
		if pkg.Found {
			fmt.Fprintf(w, "\n%s %s at %s\n", n, orUnknown(pkg.Version), pkg.Dir)
			if pkg.Version == "" {
				fmt.Fprintf(w, "  (%s)\n", orUnknownWhy(pkg))
			}
			if len(pkg.Others) > 0 {
				fmt.Fprintf(w, "  (also present, not imported: %s)\n", strings.Join(pkg.Others, ", "))
			}
		} else {
			fmt.Fprintf(w, "\n%s: %s\n", n, pkg.Why)
		}
		for _, r := range rep.Results {
			if r.Package != n {
				continue
			}
			state := string(r.State)
			if r.Variant != "" {
				state += " (" + r.Variant + ")"
			}
			fmt.Fprintf(w, "  %-40s %-15s %s\n", r.ID, state, r.Summary)
			if r.Why != "" && r.State != patchdef.Pending {
				fmt.Fprintf(w, "  %-40s %-15s %s\n", "", "", r.Why)
			}
			switch {
			case rep.Wrote && r.Action == "applied":
				fmt.Fprintf(w, "  %-40s %-15s written by this --apply (it was %s)\n", "", "", r.Before)
			case r.State != patchdef.NotApplicable && r.State != patchdef.Skipped:
				writeEditSites(w, r.Edits)
			}
			if r.Caveat != "" && r.State != patchdef.NotApplicable {
				fmt.Fprintf(w, "  %-40s %-15s caveat: %s\n", "", "", r.Caveat)
			}
			if r.Upstream != nil && r.State != patchdef.NotApplicable {
				fmt.Fprintf(w, "  %-40s %-15s %s\n", "", "", r.Upstream)
			}
		}
	}
}

// writeEditSites says, per edit, where in its file it looked and what it
// found there (the anchor, our replacement, a marker at its site), or,
// for an edit that found none of them, its state and why.
func writeEditSites(w io.Writer, edits []EditResult) {
	for i, e := range edits {
		if e.State == patchdef.NotApplicable {
			continue
		}
		var at []string
		for _, r := range e.At {
			at = append(at, r.String())
		}
		where := strings.Join(at, ", ")
		if where == "" {
			where = "nothing found"
		}
		fmt.Fprintf(w, "  %-40s %-15s edit %d %s: %s: %s\n", "", "", i+1, e.File, e.State, where)
	}
}

// offline is what --check and --apply work on: the built-in and the
// payload's definitions, and where root's own Python layout puts their
// packages (the offline resolver, no interpreter), with the versions of
// their distributions.
func offline(root, payloadRoot string) (*patchdef.Set, *Location, error) {
	set, err := loadSet(payloadRoot)
	if err != nil {
		return nil, nil, &ConfigError{err}
	}
	loc, err := LocateOffline(root, set.Packages())
	if err != nil {
		return nil, nil, &ConfigError{err}
	}
	loc.fillDistVersions(set, root)
	return set, loc, nil
}
