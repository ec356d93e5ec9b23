// Package plan reads a package's files once and decides, per definition,
// variant and edit, the state at each edit's site and the content to
// write; it writes nothing (the caller commits what it planned, and
// removes stale bytecode through the Bytecode it passes to Finish).
package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/commit"
	"github.com/infera/infera-exec/patches/patchdef"
)

// kind is how far planning took a patch, and so what finishing it means.
type kind int

const (
	undecided  kind = iota // a guard does not hold: the state says it all
	decided                // not pending: nothing to write
	disturbed              // its edits disturb one another: drift
	wouldApply             // pending, in a dry run
	writes                 // pending: its files are to be written
	hidden                 // a module it edits loads from another file: nothing to write
)

// Patch is one patch as decided in memory, and, once committed, how its
// write went (the fields the caller sets: Err, RestoreErr, Twice from the
// commit; LockErr and Unmet from the run, which decide it as a dry run).
type Patch struct {
	pkg   Package
	fs    *Files
	kind  kind
	links []*DiskFile            // files it changes, or read as planned by an earlier patch
	wrote [][]patchdef.LineRange // by edit: the lines its replacement takes in the planned content

	Err, RestoreErr error
	Twice           bool   // another writer got in the way of both attempts
	LockErr         error  // the package directory could not be locked: decided, not written
	Unmet           string // a patch it requires is not in force: decided, not written
}

// Package is where the patch's package resolved.
func (p *Patch) Package() Package { return p.pkg }

// Files is what the patch read.
func (p *Patch) Files() *Files { return p.fs }

// View is the run's view the patch was decided in.
func (p *Patch) View() *View { return p.fs.v }

// Links are the files that tie the patch to the commit of a group: the
// ones it changes, and the ones it read as an earlier patch planned them.
func (p *Patch) Links() []*DiskFile { return p.links }

// Writes reports whether the patch is pending and its files are to be
// written.
func (p *Patch) Writes() bool { return p.kind == writes }

// Decide decides a patch against the view and, when it is pending in a
// run that writes, computes its files' new contents (into the view when
// it composes).
func Decide(d *patchdef.Definition, pkg Package, v *View, dry bool, r *Result) *Patch {
	fs := &Files{m: map[string]*target{}, v: v}
	p := &Patch{pkg: pkg, fs: fs}
	defer p.link()
	files := fs.m
	if why, st := guardsHold(d.Guards, pkg, fs); st != "" {
		r.State, r.Before, r.Why = st, st, why
		return p
	}
	variants := d.EditSets()
	cands := make([]candidate, len(variants))
	for i := range variants {
		cands[i] = evaluateVariant(&variants[i], d, pkg, fs)
		if err := cands[i].ambiguous; err != nil {
			r.State, r.Before, r.Why, r.refuse = patchdef.Drift, patchdef.Drift, err.Error(), err
			p.kind = undecided
			return p
		}
	}
	c := pick(cands)
	vr := c.variant
	r.Variant, r.Edits, r.Before, r.Why = vr.Name, c.edits, c.state, c.why
	r.State = r.Before
	if r.Before == patchdef.Pending || r.Before == patchdef.Applied || r.Before == patchdef.Upstream {
		// What the patch (or upstream's fix) is about must be the code
		// that runs: each edited module must load from the edited file.
		if by, why := importedFrom(pkg, vr, r.Edits, fs); why != "" {
			r.State, r.Why, r.NotImported, r.LoadsInstead = patchdef.Shadowed, why, true, by
			p.kind = hidden
			return p
		}
	}
	if r.Before != patchdef.Pending {
		p.kind = decided
		return p
	}

	// Compute every new file in memory, then check that each edit is
	// applied in the result: edits that disturb one another are drift.
	for i := range vr.Edits {
		if r.Edits[i].State == patchdef.Pending {
			t := files[r.Edits[i].Path]
			// The first edit of a file reads the content the evaluation
			// indexed: its line starts are not found again.
			tx := t.text
			if tx == nil || tx.s != t.content {
				tx = newText(t.content, t.needles)
			}
			t.content = tx.replaceAll(vr.Edits[i].Anchor, vr.Edits[i].Replacement)
		}
	}
	for i := range vr.Edits {
		if r.Edits[i].State == patchdef.NotApplicable {
			continue
		}
		t := files[r.Edits[i].Path]
		if t.newText == nil {
			t.newText = newText(t.content, t.needles)
		}
		ev := patchdef.Evaluate(&vr.Edits[i], t.content, t.newText.all)
		if ev.State != patchdef.Applied {
			r.State, r.Action = patchdef.Drift, "none"
			r.Why = fmt.Sprintf("%s: after applying, edit %d is %s (%s): the edits of this patch disturb one another", vr.Edits[i].File, i+1, ev.State, ev.Why)
			p.kind = disturbed
			return p
		}
		if r.Edits[i].State == patchdef.Pending {
			if p.wrote == nil {
				p.wrote = make([][]patchdef.LineRange, len(vr.Edits))
			}
			p.wrote[i] = Found(ev.At, "replacement")
		}
	}
	if dry {
		p.kind = wouldApply
		return p
	}
	p.kind = writes
	if v.compose {
		for _, path := range fs.order {
			t := files[path]
			if t.content == t.original {
				continue
			}
			dk := t.disk
			dk.cur, dk.text = t.content, t.newText
			if !dk.changed {
				dk.changed = true
				v.changed = append(v.changed, dk)
			}
		}
	}
	return p
}

// link lists the files that tie the patch to the commit of a group: the
// ones it changes, and the ones it read as an earlier patch planned them.
func (p *Patch) link() {
	for _, path := range p.fs.order {
		t := p.fs.m[path]
		if t.planned || p.kind == writes && p.fs.v.compose && t.disk.changed && t.content != t.original {
			p.links = append(p.links, t.disk)
		}
	}
}

// AsWritten is what the record may keep of a patch's files. A file that
// a later patch of the run changed again is on disk with the later
// content, which this patch's result was not decided on (Finish leaves
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
func (v *View) AsWritten(d *patchdef.Definition, p *Patch, r *Result) (fs *Files, rr Result, inForce bool) {
	wrote := p.kind == writes && r.Action == "applied"
	again := wrote
	for _, t := range p.fs.m {
		if t.verified || t.disk == nil || !t.disk.changed {
			continue
		}
		if _, ok := t.disk.Final(); !ok {
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
			final, ok := dk.Final()
			if dk.changed && !ok {
				continue // read from disk, if this patch reads it
			}
			w.disk[path] = &DiskFile{path: path, data: dk.cur, id: final, cur: dk.cur, text: dk.text, sums: v.sums}
			if !dk.changed {
				w.disk[path].id = dk.id
			}
		}
		v.written = w
	}
	r2 := Result{ID: r.ID, Package: r.Package, Action: "none"}
	p2 := Decide(d, p.pkg, v.written, true, &r2)
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

// importedFrom checks that every .py file the variant edits is the file
// the import system loads for its module: "" when each is; else what
// loads instead of the first that is not, and why.
func importedFrom(pkg Package, vr *patchdef.Variant, edits []EditResult, fs *Files) (by, why string) {
	minor := fs.v.minor
	if minor == 0 {
		minor = minorFromPath(pkg.Dir)
	}
	im := newImporter(minor, fs.v.types)
	defer func() {
		for _, p := range im.probes {
			if !slices.Contains(fs.probes, p) {
				fs.probes = append(fs.probes, p)
			}
		}
		for _, d := range im.dirs {
			if !slices.Contains(fs.dirs, d) {
				fs.dirs = append(fs.dirs, d)
			}
		}
	}()
	for i := range vr.Edits {
		e := &edits[i]
		if e.State == patchdef.NotApplicable || e.Path == "" || !strings.HasSuffix(vr.Edits[i].File, ".py") {
			continue
		}
		if by, why := im.shadow(pkg, vr.Edits[i].File, e.Path); why != "" {
			return by, why
		}
	}
	return "", ""
}

// Bytecode checks the cached bytecode that could run instead of the
// edited sources of r (after a write, wrote: every .pyc of each module;
// otherwise the unchecked-hash ones), removing it unless dry, and records
// in r what it removed and what is stuck (source gives the identity of
// each edited file on disk, and whether it is known). It is the caller's:
// plan removes nothing.
type Bytecode func(r *Result, source func(path string) (id fileid.Identity, verified bool), wrote, dry bool)

// Finish completes a patch's result once the files are written (or the
// write failed): bytecode (through bytecode), hashes, and the identities
// of what it consulted.
func (p *Patch) Finish(r *Result, dry bool, bytecode Bytecode) {
	files := p.fs.m
	// Bytecode is checked against the source now on disk.
	for _, t := range files {
		if d := t.disk; d != nil && d.changed {
			t.id, t.verified = d.Final()
		}
	}
	wrote := p.kind == writes && p.Err == nil
	switch p.kind {
	case decided:
		if r.Before == patchdef.Applied {
			checkBytecode(r, files, false, dry, p.fs.v.types, bytecode)
		}
		fillAfter(r, files)
	case disturbed:
		fillAfter(r, nil)
	case hidden:
		fillAfter(r, files)
	case wouldApply:
		r.Action = "would-apply"
		fillAfter(r, files)
	case writes:
		if wrote {
			r.Action, r.State = "applied", patchdef.Applied
			for i := range r.Edits {
				if i < len(p.wrote) {
					r.Edits[i].Wrote = p.wrote[i]
				}
			}
			checkBytecode(r, files, true, false, p.fs.v.types, bytecode)
			fillAfter(r, files)
			break
		}
		r.Action, r.Why, r.err = "failed", p.Err.Error(), p.Err
		if fix := commit.Fix(p.Err); fix != "" {
			r.Why += "; " + fix
		}
		if p.RestoreErr != nil {
			r.State = patchdef.Drift
			r.Why += "; restoring the files already written failed: " + p.RestoreErr.Error()
		}
		fillAfter(r, nil)
		if p.Twice {
			r.State, r.Action = patchdef.Drift, "none"
			r.Why = "another writer changed the files while they were being patched, twice; nothing of theirs was overwritten: " + r.Why
		}
	}
	// The record takes a file's identity only when the file on disk is the
	// content this result is about: what the patch read or, once written,
	// what it wrote; not a content an earlier or later patch replaced.
	for _, t := range files {
		d := t.disk
		if d == nil || !d.changed {
			continue
		}
		if wrote && t.content != d.cur || !wrote && t.original != d.cur {
			t.id, t.verified = identity{}, false
		}
	}
}

// checkBytecode has bytecode check the cached bytecode that could run
// instead of the patched source (after a write: every .pyc of the module;
// otherwise the unchecked-hash ones), against the files as the patch knows
// them, and makes the patch shadowed when some cannot be removed (see
// Bytecode). The paths removed are forgotten by types.
func checkBytecode(r *Result, files map[string]*target, wrote, dry bool, types *typeCache, bytecode Bytecode) {
	bytecode(r, func(path string) (identity, bool) {
		t := files[path]
		if t == nil {
			return identity{}, false
		}
		return t.id, t.verified
	}, wrote, dry)
	for i := range r.Edits {
		for _, m := range r.Edits[i].PycsRemoved {
			types.forget(m)
		}
	}
}

// candidate is one variant as evaluated against the files.
type candidate struct {
	variant *patchdef.Variant
	edits   []EditResult
	state   patchdef.State
	why     string
	matched int // edits pending or applied: how close a drifting variant came
	// ambiguous: a marker of a payload definition matches the file
	// outside its edit's site; the definition is refused (78).
	ambiguous error
}

func evaluateVariant(v *patchdef.Variant, d *patchdef.Definition, pkg Package, files *Files) candidate {
	c := candidate{variant: v}
	if st, why := v.Scope(d.Distribution, pkg.Version, pkg.VersionWhy); st != "" {
		c.state, c.why = st, why
		return c
	}
	if why, st := guardsHold(v.Guards, pkg, files); st != "" {
		c.state, c.why = st, why
		return c
	}
	var states []patchdef.State
	for i := range v.Edits {
		e := &v.Edits[i]
		er := EditResult{File: e.File}
		t, err := resolve(pkg, e.File, files)
		switch {
		case err != nil:
			er.State, er.Why = patchdef.Drift, err.Error()
		case !t.exists && e.Optional:
			er.Path, er.State, er.Why = t.path, patchdef.NotApplicable, "optional file absent"
		case !t.exists:
			er.Path, er.State, er.Why = t.path, patchdef.Drift, "file absent"
		default:
			er.Path = t.path
			er.Evaluation = patchdef.Evaluate(e, t.content, t.indexed().all)
			if c.ambiguous == nil && !strings.HasPrefix(d.Source, "builtin:") {
				// A payload's marker that matches this file where the
				// fix is not (the built-ins are held to it in CI).
				if stray := e.StrayMarkers(t.content, t.indexed().all); len(stray) > 0 {
					c.ambiguous = fmt.Errorf("patch definition %s (%s): variant %q edit %d: in %s, %s: outside the edit's site, where it would read as the fix the day the site moves; give the marker its indentation or more of the fix's own lines, or name the site (site = ...)",
						d.Source, d.ID, v.Name, i+1, t.path, strings.Join(stray, ", "))
				}
			}
		}
		if er.State == patchdef.Pending || er.State == patchdef.Applied {
			c.matched++
		}
		states = append(states, er.State)
		c.edits = append(c.edits, er)
	}
	c.state = patchdef.Combine(states)
	c.why = firstWhy(c.edits, c.state)
	if c.state == patchdef.Partial {
		c.why = partialWhy(c.edits)
	}
	return c
}

// pick chooses the variant that decides the patch: one already in force
// (applied, or fixed upstream) first, then the first whose anchors all
// match; when none matches, not-applicable if every variant is out of
// scope, else drift, reported against the variant that came closest.
func pick(cands []candidate) candidate {
	for _, c := range cands {
		if c.state == patchdef.Applied || c.state == patchdef.Upstream {
			return c
		}
	}
	for _, c := range cands {
		if c.state == patchdef.Pending {
			return c
		}
	}
	var drift *candidate
	for i := range cands {
		if cands[i].state == patchdef.Partial && (drift == nil || drift.state != patchdef.Partial || cands[i].matched > drift.matched) {
			drift = &cands[i]
		}
	}
	for i := range cands {
		if drift != nil && drift.state == patchdef.Partial {
			break
		}
		if cands[i].state == patchdef.Drift && (drift == nil || cands[i].matched > drift.matched) {
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
// file exists in the package and contains its text. It returns "" when
// they hold, NotApplicable when the code is not there, and Drift when a
// guard's file cannot be read (too large, unreadable, a link out of the
// package): the code may well be there, so the patch is undecided, never
// quietly not-applicable.
func guardsHold(guards []patchdef.Guard, pkg Package, files *Files) (string, patchdef.State) {
	for _, g := range guards {
		t, err := resolve(pkg, g.File, files)
		switch {
		case err != nil:
			return fmt.Sprintf("guard %s: %v", g.File, err), patchdef.Drift
		case g.Absent:
			if t.exists && g.Holds(t.indexed().count) {
				return fmt.Sprintf("%s has %s: this variant is for releases without it", g.File, g.What()), patchdef.NotApplicable
			}
		case !t.exists:
			return fmt.Sprintf("%s is absent: the code this fix is about does not exist here", g.File), patchdef.NotApplicable
		case !g.Holds(t.indexed().count):
			return fmt.Sprintf("%s has no %s%s", g.File, g.What(), noCode), patchdef.NotApplicable
		}
	}
	return "", ""
}

// noCode ends the why of a guard whose text is not in its file.
const noCode = ": the code this fix is about does not exist here"

// Brief is a not-applicable why in a few words, for a text line: a
// guard's "FILE has no TEXT: ..." is "FILE lacks the code this fix is
// about", the text it looks for left to the why (the record's detail,
// the report); another why is its own brief.
func Brief(why string) string {
	if i := strings.Index(why, " has no "); i > 0 && strings.HasSuffix(why, noCode) {
		return why[:i] + " lacks the code this fix is about"
	}
	return why
}

// partialWhy names the files where the fix is in force and those it
// is not, with what was found there.
func partialWhy(edits []EditResult) string {
	var done, left []string
	for _, e := range edits {
		p := e.Path
		if p == "" {
			p = e.File
		}
		switch e.State {
		case patchdef.Applied:
			if !slices.Contains(done, p) {
				done = append(done, p)
			}
		case patchdef.Drift:
			left = append(left, p+": "+e.Why)
		}
	}
	return fmt.Sprintf("applied in %s but not in force: left unpatched %s", strings.Join(done, ", "), strings.Join(left, "; "))
}

func firstWhy(edits []EditResult, s patchdef.State) string {
	for _, e := range edits {
		if e.State == s && e.Why != "" || s == patchdef.Drift && e.State == patchdef.Drift {
			if e.Path != "" {
				return e.Path + ": " + e.Why
			}
			return e.File + ": " + e.Why
		}
	}
	return ""
}

// Found is the ranges of at that hold what (anchor, replacement, ...).
func Found(at []patchdef.LineRange, what ...string) []patchdef.LineRange {
	var out []patchdef.LineRange
	for _, r := range at {
		if slices.Contains(what, r.Found) {
			out = append(out, r)
		}
	}
	return out
}

// UnmetRequirement says why d must not be written in this run: a patch it
// requires (the set orders requirements first, so its result is among
// done) is neither applied, upstream, nor about to be written ("" when
// all are).
func UnmetRequirement(set *patchdef.Set, d *patchdef.Definition, done []Result) string {
	for _, id := range d.Requires {
		var r *Result
		for k := range done {
			if done[k].ID == id {
				r = &done[k]
			}
		}
		switch {
		case r == nil && set.Lookup(id) == nil:
			return "requires " + id + ", which is skipped in this run"
		case r == nil:
			return "requires " + id + ", which is not decided before it"
		case r.State == patchdef.Applied, r.State == patchdef.Upstream, r.State == patchdef.Pending && r.Action != "failed":
			continue
		}
		why := "requires " + id + ", which is " + string(r.State)
		if r.Why != "" {
			why += " (" + r.Why + ")"
		}
		return why
	}
	return ""
}
