package patches

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/infera/infera-exec/atomicfile"
	"github.com/infera/infera-exec/internal/digest"
)

// Result is what happened to one patch.
type Result struct {
	ID       string       `json:"id"`
	Summary  string       `json:"summary"`
	Source   string       `json:"source"`
	Package  string       `json:"package"`
	Version  string       `json:"version,omitempty"`
	Required bool         `json:"required"`
	Variant  string       `json:"variant,omitempty"` // the variant that decided the state
	State    State        `json:"state"`             // after this run
	Before   State        `json:"before"`            // as found
	Action   string       `json:"action"`            // applied, would-apply, none, failed
	Why      string       `json:"why,omitempty"`
	Missing  bool         `json:"package_missing,omitempty"` // the package is not importable
	Edits    []EditResult `json:"edits,omitempty"`
}

// Ok reports whether the patch is in a state the worker can run with.
func (r *Result) Ok() bool {
	return r.State == Applied || r.State == Upstream || r.State == NotApplicable
}

// EditResult is one edit of a patch.
type EditResult struct {
	File string `json:"file"`
	Path string `json:"path,omitempty"`
	Evaluation
	SHA256Before string   `json:"sha256_before,omitempty"`
	SHA256After  string   `json:"sha256_after,omitempty"`
	PycsRemoved  []string `json:"pycs_removed,omitempty"`
}

// writeFile replaces a file crash-safely, keeping its mode and owner; a
// variable so tests can make a write fail half-way through a patch.
var writeFile = atomicWrite

func atomicWrite(path string, data []byte) error {
	return atomicfile.WriteBytes(path, data, atomicfile.Options{KeepOwner: true})
}

// Options control a run.
type Options struct {
	DryRun      bool            // decide states, write nothing
	Require     map[string]bool // ids required in addition to required = true
	LockTimeout time.Duration
}

// Apply brings every definition of set to its target state in the
// packages of loc. Patches run in order; each is a transaction over its
// files: it is written only when every edit is pending or applied, all its
// files are written or none (a failed write restores the files already
// written), and a start that died between two files is finished by the
// next one, because "some applied, some pending" is itself pending.
func Apply(set *Set, loc *Location, opt Options) []Result {
	var results []Result
	locks := map[string]*os.File{}
	defer func() {
		for _, f := range locks {
			f.Close() // releases the flock
		}
	}()
	for _, d := range set.Defs {
		r := Result{ID: d.ID, Summary: d.Summary, Source: d.Source, Package: d.Package,
			Required: d.Required || opt.Require[d.ID], Action: "none"}
		pkg, ok := loc.Packages[d.Package]
		if !ok || !pkg.Found {
			r.State, r.Before, r.Missing = NotApplicable, NotApplicable, true
			r.Why = pkg.Why
			if r.Why == "" {
				r.Why = d.Package + " was not looked up"
			}
			results = append(results, r)
			continue
		}
		r.Version = pkg.Version
		if in, why := d.InScope(pkg.Version); !in {
			r.State, r.Before, r.Why = NotApplicable, NotApplicable, why
			results = append(results, r)
			continue
		}
		if !opt.DryRun {
			if _, held := locks[pkg.Dir]; !held {
				f, err := lockDir(pkg.Dir, opt.LockTimeout)
				if err != nil {
					r.State, r.Before, r.Action, r.Why = Drift, Drift, "failed", err.Error()
					results = append(results, r)
					continue
				}
				locks[pkg.Dir] = f
			}
		}
		applyOne(d, pkg, opt.DryRun, &r)
		results = append(results, r)
	}
	return results
}

type target struct {
	path     string // real path, inside the package
	original []byte
	content  string
	exists   bool
	mode     fs.FileMode
}

func applyOne(d *Definition, pkg Package, dry bool, r *Result) {
	files := map[string]*target{}
	var order []string
	if why, ok := guardsHold(d.Guards, pkg, files, &order); !ok {
		r.State, r.Before, r.Why = NotApplicable, NotApplicable, why
		return
	}
	variants := d.variants()
	cands := make([]candidate, len(variants))
	for i := range variants {
		cands[i] = evaluateVariant(&variants[i], d, pkg, files, &order)
	}
	c := pick(cands)
	v := c.variant
	r.Variant, r.Edits, r.Before, r.Why = v.Name, c.edits, c.state, c.why
	r.State = r.Before
	if r.Before != Pending {
		if r.Before == Applied && !dry {
			for i := range r.Edits {
				r.Edits[i].PycsRemoved = removePycs(r.Edits[i].Path, false)
			}
		}
		fillAfter(r, files)
		return
	}

	// Compute every new file in memory, then check that each edit is
	// applied in the result: edits that disturb one another are drift.
	for i := range v.Edits {
		if r.Edits[i].State == Pending {
			t := files[r.Edits[i].Path]
			t.content = apply(&v.Edits[i], t.content)
		}
	}
	for i := range v.Edits {
		if r.Edits[i].State == NotApplicable {
			continue
		}
		if ev := Evaluate(&v.Edits[i], files[r.Edits[i].Path].content); ev.State != Applied {
			r.State, r.Action = Drift, "none"
			r.Why = fmt.Sprintf("%s: after applying, edit %d is %s (%s): the edits of this patch disturb one another", v.Edits[i].File, i+1, ev.State, ev.Why)
			fillAfter(r, nil)
			return
		}
	}
	if dry {
		r.Action = "would-apply"
		fillAfter(r, files)
		return
	}

	var written []*target
	for _, p := range order {
		atomicfile.RemoveStale(p) // left by a start killed mid-write; we hold the lock
		t := files[p]
		if string(t.original) == t.content {
			continue
		}
		if err := writeFile(t.path, []byte(t.content)); err != nil {
			r.Action, r.Why = "failed", err.Error()
			if rerr := restore(written); rerr != nil {
				r.State = Drift
				r.Why += "; restoring the files already written failed: " + rerr.Error()
			}
			fillAfter(r, nil)
			return
		}
		written = append(written, t)
	}
	r.Action, r.State = "applied", Applied
	for i := range r.Edits {
		if r.Edits[i].State == NotApplicable {
			continue
		}
		r.Edits[i].PycsRemoved = removePycs(r.Edits[i].Path, true)
	}
	fillAfter(r, files)
}

// candidate is one variant as evaluated against the files.
type candidate struct {
	variant *Variant
	edits   []EditResult
	state   State
	why     string
	matched int // edits pending or applied: how close a drifting variant came
}

func evaluateVariant(v *Variant, d *Definition, pkg Package, files map[string]*target, order *[]string) candidate {
	c := candidate{variant: v}
	if in, why := inScope(v.constraint, v.Versions, d.Package, d.Distribution, pkg.Version); !in {
		c.state, c.why = NotApplicable, why
		return c
	}
	if why, ok := guardsHold(v.Guards, pkg, files, order); !ok {
		c.state, c.why = NotApplicable, why
		return c
	}
	var states []State
	for i := range v.Edits {
		e := &v.Edits[i]
		er := EditResult{File: e.File}
		t, err := resolve(pkg, e.File, files, order)
		switch {
		case err != nil:
			er.State, er.Why = Drift, err.Error()
		case !t.exists && e.Optional:
			er.Path, er.State, er.Why = t.path, NotApplicable, "optional file absent"
		case !t.exists:
			er.Path, er.State, er.Why = t.path, Drift, "file absent"
		default:
			er.Path = t.path
			er.Evaluation = Evaluate(e, t.content)
			er.SHA256Before = digest.Bytes(t.original)
		}
		if er.State == Pending || er.State == Applied {
			c.matched++
		}
		states = append(states, er.State)
		c.edits = append(c.edits, er)
	}
	c.state = Combine(states)
	c.why = firstWhy(c.edits, c.state)
	return c
}

// pick chooses the variant that decides the patch: one already in force
// (applied, or fixed upstream) first, then the first whose anchors all
// match; when none matches, not-applicable if every variant is out of
// scope, else drift, reported against the variant that came closest.
func pick(cands []candidate) candidate {
	for _, c := range cands {
		if c.state == Applied || c.state == Upstream {
			return c
		}
	}
	for _, c := range cands {
		if c.state == Pending {
			return c
		}
	}
	var drift *candidate
	for i := range cands {
		if cands[i].state == Drift && (drift == nil || cands[i].matched > drift.matched) {
			drift = &cands[i]
		}
	}
	if drift == nil {
		return cands[0] // every variant not-applicable; the first says why
	}
	if len(cands) == 1 {
		return *drift
	}
	out := *drift
	var others []string
	for _, c := range cands {
		if c.variant != drift.variant {
			others = append(others, fmt.Sprintf("%s is %s: %s", c.variant.Name, c.state, c.why))
		}
	}
	out.why = fmt.Sprintf("%s (no variant matches; closest: %s; %s)", drift.why, drift.variant.Name, strings.Join(others, "; "))
	return out
}

// guardsHold checks that the code a fix is about is there: every guard's
// file exists in the package and contains its text.
func guardsHold(guards []Guard, pkg Package, files map[string]*target, order *[]string) (string, bool) {
	for _, g := range guards {
		t, err := resolve(pkg, g.File, files, order)
		switch {
		case err != nil:
			return fmt.Sprintf("guard %s: %v", g.File, err), false
		case !t.exists:
			return fmt.Sprintf("%s is absent: the code this fix is about does not exist here", g.File), false
		case g.Contains != "" && !strings.Contains(t.content, g.Contains):
			return fmt.Sprintf("%s has no %q: the code this fix is about does not exist here", g.File, strings.TrimSpace(g.Contains)), false
		}
	}
	return "", true
}

// resolve finds file inside the package (the first portion that has it, for
// a namespace package) and reads it once per patch. A path that leaves the
// package directory through a symlink is refused: writing there would
// change a file the definition never named.
func resolve(pkg Package, file string, files map[string]*target, order *[]string) (*target, error) {
	dirs := pkg.Dirs
	if len(dirs) == 0 {
		dirs = []string{pkg.Dir}
	}
	var lastErr error
	for _, root := range dirs {
		realRoot, err := filepath.EvalSymlinks(root)
		if err != nil {
			lastErr = err
			continue
		}
		p := filepath.Join(root, filepath.FromSlash(file))
		real, err := filepath.EvalSymlinks(p)
		if errors.Is(err, fs.ErrNotExist) {
			if _, lerr := os.Lstat(p); lerr == nil {
				return nil, fmt.Errorf("%s is a dangling symlink", p)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if real != realRoot && !strings.HasPrefix(real, realRoot+string(filepath.Separator)) {
			return nil, fmt.Errorf("%s resolves to %s, outside the package directory %s; not following it", p, real, realRoot)
		}
		if t, ok := files[real]; ok {
			return t, nil
		}
		fi, err := os.Stat(real)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file", real)
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return nil, err
		}
		t := &target{path: real, original: data, content: string(data), exists: true, mode: fi.Mode()}
		files[real] = t
		*order = append(*order, real)
		return t, nil
	}
	if lastErr != nil {
		return nil, lastErr
	}
	p := filepath.Join(dirs[0], filepath.FromSlash(file))
	if t, ok := files[p]; ok {
		return t, nil
	}
	t := &target{path: p}
	files[p] = t
	return t, nil
}

func restore(written []*target) error {
	var errs []error
	for i := len(written) - 1; i >= 0; i-- {
		t := written[i]
		if err := writeFile(t.path, t.original); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func fillAfter(r *Result, files map[string]*target) {
	for i := range r.Edits {
		e := &r.Edits[i]
		if t, ok := files[e.Path]; ok && t.exists {
			e.SHA256After = digest.Bytes([]byte(t.content))
		} else {
			e.SHA256After = e.SHA256Before
		}
	}
}

func firstWhy(edits []EditResult, s State) string {
	for _, e := range edits {
		if e.State == s && e.Why != "" || s == Drift && e.State == Drift {
			if e.Path != "" {
				return e.Path + ": " + e.Why
			}
			return e.File + ": " + e.Why
		}
	}
	return ""
}

// removePycs deletes the cached bytecode of a patched module. After a
// write every cache file goes; otherwise only unchecked-hash pycs (PEP 552
// flags = 0b01), which Python never revalidates and which would keep
// running the unpatched code after a start that died before this step.
func removePycs(pyFile string, all bool) []string {
	if !strings.HasSuffix(pyFile, ".py") {
		return nil
	}
	dir, base := filepath.Split(pyFile)
	matches, _ := filepath.Glob(filepath.Join(dir, "__pycache__", strings.TrimSuffix(base, ".py")+".*.pyc"))
	var removed []string
	for _, m := range matches {
		if !all && !uncheckedHash(m) {
			continue
		}
		if os.Remove(m) == nil {
			removed = append(removed, m)
		}
	}
	return removed
}

func uncheckedHash(pyc string) bool {
	f, err := os.Open(pyc)
	if err != nil {
		return false
	}
	defer f.Close()
	var hdr [8]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return false
	}
	return binary.LittleEndian.Uint32(hdr[4:8]) == 0b01
}

// lockDir takes an exclusive flock on the package directory itself: two
// starts at once (two containers sharing an editable checkout, or a
// restart racing its predecessor) patch one after the other. Directories
// can be locked on read-only filesystems and nothing is created.
func lockDir(dir string, timeout time.Duration) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err != syscall.EWOULDBLOCK || time.Now().After(deadline) {
			f.Close()
			if err == syscall.EWOULDBLOCK {
				return nil, fmt.Errorf("lock %s: another start held it for %s", dir, timeout)
			}
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
