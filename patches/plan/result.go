package plan

import "github.com/infera/infera-exec/patches/patchdef"

// Package is where an import name resolves for the worker.
type Package struct {
	Name    string   `json:"name"`
	Found   bool     `json:"found"`
	Dir     string   `json:"dir,omitempty"`     // the package directory edits are relative to
	Dirs    []string `json:"dirs,omitempty"`    // all portions of a namespace package
	Version string   `json:"version,omitempty"` // from *.dist-info/METADATA
	// VersionFrom is the metadata file the version was read from, or,
	// with VersionWhy, the one that could not be read.
	VersionFrom string `json:"version_from,omitempty"`
	VersionWhy  string `json:"version_why,omitempty"` // why Version is ""
	Why         string `json:"why,omitempty"`         // when not found
	// Offline lookups only: whether the name is a namespace package, and
	// the other copies of it on the path, which are not imported.
	Namespace bool     `json:"namespace,omitempty"`
	Others    []string `json:"others,omitempty"`
}

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
	// the same image), without planning; see record.Replay.
	Replayed bool `json:"replayed,omitempty"`
	// Caveat and Upstream are the definition's: what to know about
	// keeping the fix on, and where it stands upstream.
	Caveat   string                   `json:"caveat,omitempty"`
	Upstream *patchdef.UpstreamStatus `json:"upstream,omitempty"`
	// Shadow is the shadow tree the patch is in force from (the worker
	// imports its package from there; see package patches' shadow.go); "" in place.
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

// Refused is why the definition cannot be used as it is (a payload's
// marker that matches outside its edit's site: 78); nil when it can.
func (r *Result) Refused() error { return r.refuse }

// WriteErr is why the patch's write was abandoned (Action "failed"), or nil.
func (r *Result) WriteErr() error { return r.err }

// DecideAgain clears what a decision put in r, keeping what the
// definition and the package say, for Decide to decide it afresh.
func (r *Result) DecideAgain() {
	*r = Result{ID: r.ID, Summary: r.Summary, Source: r.Source, Package: r.Package,
		Required: r.Required, Action: "none", Version: r.Version}
}
