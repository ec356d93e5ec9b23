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
	"golang.org/x/sys/unix"
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
	// Recorded: decided from the record of an earlier verified run, every
	// file's identity unchanged since; no file was read.
	Recorded bool `json:"recorded,omitempty"`

	err error // why a write was abandoned
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

// writeFile replaces a file crash-safely, keeping its mode and owner,
// provided the file is still the one read (identity was); a variable so
// tests can make a write fail half-way through a patch.
var writeFile = atomicWrite

// beforeRenameHook lets tests act as another writer at the last moment.
var beforeRenameHook func(path string)

// errChanged: the file is no longer the one that was read and evaluated.
var errChanged = errors.New("changed by another writer since it was read")

func atomicWrite(path string, data []byte, was Identity) error {
	return atomicfile.WriteBytes(path, data, atomicfile.Options{KeepOwner: true, BeforeRename: func() error {
		if beforeRenameHook != nil {
			beforeRenameHook(path)
		}
		if now, ok := lstatIdentity(path); !ok || now != was {
			return fmt.Errorf("%s: %w; not written", path, errChanged)
		}
		return nil
	}})
}

// removeFile deletes cached bytecode; a variable so tests can make it fail.
var removeFile = os.Remove

// Options control a run.
type Options struct {
	DryRun      bool            // decide states, write nothing
	Require     map[string]bool // ids required in addition to required = true
	LockTimeout time.Duration
	// StateDir is infera-exec's trusted state directory: where the state
	// verified by a run is recorded, so that a restart on unchanged files
	// reads none of them (see record.go). "" = always the full check.
	StateDir string
}

// Apply brings every definition of set to its target state in the
// packages of loc. Patches run in order; each is a transaction over its
// files: it is written only when every edit is pending or applied, all its
// files are written or none (a failed write restores the files already
// written), and a start that died between two files is finished by the
// next one, because "some applied, some pending" is itself pending.
func Apply(set *Set, loc *Location, opt Options) []Result {
	if opt.StateDir == "" || opt.DryRun {
		res, _ := apply(set, loc, opt)
		return res
	}
	return applyRecorded(set, loc, opt)
}

// apply is Apply without the record: it returns what it saw of every file
// it consulted, for the record.
func apply(set *Set, loc *Location, opt Options) ([]Result, *observed) {
	seen := &observed{}
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
					seen.incomplete = true
					continue
				}
				locks[pkg.Dir] = f
			}
		}
		files := applyOne(d, pkg, opt.DryRun, &r)
		if errors.Is(r.err, errChanged) {
			// Another writer was at work: read everything afresh, once.
			r = Result{ID: d.ID, Summary: d.Summary, Source: d.Source, Package: d.Package,
				Required: r.Required, Action: "none", Version: pkg.Version}
			files = applyOne(d, pkg, opt.DryRun, &r)
			if errors.Is(r.err, errChanged) {
				r.State, r.Action = Drift, "none"
				r.Why = "another writer changed the files while they were being patched, twice; nothing of theirs was overwritten: " + r.Why
			}
		}
		seen.add(pkg, r, files)
		results = append(results, r)
	}
	return results, seen
}

type target struct {
	path     string // real path, inside the package
	original []byte
	content  string
	exists   bool
	mode     fs.FileMode
	direct   bool     // path is the package directory joined with the file: no symlink on the way
	id       Identity // as read, or after this run's verified write
	verified bool     // id is known to be the identity of content

	text, newText       *text  // indexes of original and content
	sumBefore, sumAfter string // SHA-256 of original and content, once computed
}

func (t *target) indexed() *text {
	if t.text == nil {
		t.text = newText(t.content)
	}
	return t.text
}

func (t *target) before() string {
	if t.sumBefore == "" {
		t.sumBefore = digest.Bytes(t.original)
	}
	return t.sumBefore
}

func (t *target) after() string {
	if t.content == string(t.original) {
		return t.before()
	}
	if t.sumAfter == "" {
		t.sumAfter = digest.Bytes([]byte(t.content))
	}
	return t.sumAfter
}

// files is what one patch read, by real path, in reading order.
type files struct {
	m     map[string]*target
	order []string
}

func applyOne(d *Definition, pkg Package, dry bool, r *Result) *files {
	fs := &files{m: map[string]*target{}}
	files, order := fs.m, &fs.order
	if why, ok := guardsHold(d.Guards, pkg, files, order); !ok {
		r.State, r.Before, r.Why = NotApplicable, NotApplicable, why
		return fs
	}
	variants := d.variants()
	cands := make([]candidate, len(variants))
	for i := range variants {
		cands[i] = evaluateVariant(&variants[i], d, pkg, files, order)
	}
	c := pick(cands)
	v := c.variant
	r.Variant, r.Edits, r.Before, r.Why = v.Name, c.edits, c.state, c.why
	r.State = r.Before
	if r.Before != Pending {
		if r.Before == Applied {
			checkBytecode(r, files, false, dry)
		}
		fillAfter(r, files)
		return fs
	}

	// Compute every new file in memory, then check that each edit is
	// applied in the result: edits that disturb one another are drift.
	for i := range v.Edits {
		if r.Edits[i].State == Pending {
			t := files[r.Edits[i].Path]
			t.content = applyEdit(&v.Edits[i], t.content)
		}
	}
	for i := range v.Edits {
		if r.Edits[i].State == NotApplicable {
			continue
		}
		t := files[r.Edits[i].Path]
		if t.newText == nil {
			t.newText = newText(t.content)
		}
		if ev := evaluate(&v.Edits[i], t.newText); ev.State != Applied {
			r.State, r.Action = Drift, "none"
			r.Why = fmt.Sprintf("%s: after applying, edit %d is %s (%s): the edits of this patch disturb one another", v.Edits[i].File, i+1, ev.State, ev.Why)
			fillAfter(r, nil)
			return fs
		}
	}
	if dry {
		r.Action = "would-apply"
		fillAfter(r, files)
		return fs
	}

	var written []*target
	for _, p := range *order {
		atomicfile.RemoveStale(p) // left by a start killed mid-write; we hold the lock
		t := files[p]
		if string(t.original) == t.content {
			continue
		}
		if err := writeFile(t.path, []byte(t.content), t.id); err != nil {
			r.Action, r.Why, r.err = "failed", err.Error(), err
			if rerr := restore(written); rerr != nil {
				r.State = Drift
				r.Why += "; restoring the files already written failed: " + rerr.Error()
			}
			fillAfter(r, nil)
			return fs
		}
		written = append(written, t)
		t.id, t.verified = Identity{}, false
		// Read back what was renamed into place: its identity is recorded
		// only for the bytes this run wrote.
		if data, id, err := readRegular(t.path, maxSourceBytes); err == nil && string(data) == t.content {
			t.id, t.verified = id, true
		}
	}
	r.Action, r.State = "applied", Applied
	checkBytecode(r, files, true, false)
	fillAfter(r, files)
	return fs
}

// checkBytecode removes the cached bytecode that could run instead of the
// patched source (after a write: every .pyc of the module; otherwise the
// unchecked-hash ones) and makes the patch shadowed when some cannot be
// removed. A dry run removes nothing: bytecode that would have to go
// makes the patch shadowed there, saying that a start removes it.
func checkBytecode(r *Result, files map[string]*target, wrote, dry bool) {
	var shadows []string
	for i := range r.Edits {
		e := &r.Edits[i]
		if e.State == NotApplicable || e.Path == "" {
			continue
		}
		t := files[e.Path]
		removed, stuck := removePycs(e.Path, wrote, dry, t)
		e.PycsRemoved = removed
		shadows = append(shadows, stuck...)
	}
	if len(shadows) > 0 {
		r.State = Shadowed
		if dry {
			r.Why = "stale bytecode would run instead of the patched source (a start removes it): " + strings.Join(shadows, "; ")
		} else {
			r.Why = "stale bytecode that could not be removed would run instead of the patched source: " + strings.Join(shadows, "; ")
		}
	}
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
			er.Evaluation = evaluate(e, t.indexed())
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
		case g.Contains != "" && t.indexed().count(g.Contains) == 0:
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
		data, id, err := readRegular(real, maxSourceBytes)
		if err != nil {
			return nil, err
		}
		t := &target{path: real, original: data, content: string(data), exists: true, mode: fs.FileMode(id.Mode & 0o777),
			direct: real == p && realRoot == root, id: id, verified: true}
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
	t := &target{path: p, direct: len(dirs) == 1, id: Identity{Absent: true}, verified: true}
	files[p] = t
	return t, nil
}

func restore(written []*target) error {
	var errs []error
	for i := len(written) - 1; i >= 0; i-- {
		t := written[i]
		if err := writeFile(t.path, t.original, t.id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func fillAfter(r *Result, files map[string]*target) {
	for i := range r.Edits {
		e := &r.Edits[i]
		t, ok := files[e.Path]
		if !ok || !t.exists {
			continue
		}
		e.SHA256Before = t.before()
		e.SHA256After = e.SHA256Before
		if files != nil {
			e.SHA256After = t.after()
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
// stuck names the ones that could not be removed (or, dry, would have to
// be) and would run instead of the source: unchecked-hash ones, and
// timestamp ones whose recorded mtime and size match the source's.
func removePycs(pyFile string, all, dry bool, src *target) (removed, stuck []string) {
	if !strings.HasSuffix(pyFile, ".py") {
		return nil, nil
	}
	dir, base := filepath.Split(pyFile)
	matches, _ := filepath.Glob(filepath.Join(dir, "__pycache__", strings.TrimSuffix(base, ".py")+".*.pyc"))
	for _, m := range matches {
		flags, stamp, ok := pycHeader(m)
		unchecked := ok && flags == 0b01
		if !all && !unchecked {
			continue
		}
		if dry {
			if unchecked {
				stuck = append(stuck, m+" (unchecked-hash)")
			}
			continue
		}
		err := removeFile(m)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			removed = append(removed, m)
			continue
		}
		switch {
		case unchecked:
			stuck = append(stuck, fmt.Sprintf("%s (unchecked-hash, never revalidated): %v", m, err))
		case ok && flags == 0 && src != nil && src.verified && stamp == uint64(uint32(src.id.Mtime/1e9))|uint64(uint32(src.id.Size))<<32:
			stuck = append(stuck, fmt.Sprintf("%s (its mtime and size match the new source): %v", m, err))
		}
	}
	return removed, stuck
}

// pycHeader reads a .pyc's PEP 552 flags and, for a timestamp pyc, its
// source mtime (low 32 bits) and size (high 32 bits).
func pycHeader(pyc string) (flags uint32, stamp uint64, ok bool) {
	fd, err := unix.Open(pyc, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, false
	}
	defer unix.Close(fd)
	var hdr [16]byte
	n, err := unix.Pread(fd, hdr[:], 0)
	if err != nil || n < 8 {
		return 0, 0, false
	}
	if n == 16 {
		stamp = binary.LittleEndian.Uint64(hdr[8:16])
	}
	return binary.LittleEndian.Uint32(hdr[4:8]), stamp, true
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
