package patches

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/patchdef"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/digest"
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
	// Unvouched: the state is the probing interpreter's view, not the
	// worker's (a shell-script worker, with INFERA_PYTHON not naming its
	// interpreter), and why, with how to make it certain. Not in force.
	Unvouched string `json:"unvouched,omitempty"`

	err error // why a write was abandoned
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

// planningHook lets tests see the run about to plan definition i.
var planningHook func(i int)

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

// removeFile deletes cached bytecode; a variable so tests can make it fail.
var removeFile = os.Remove

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
	if opt.StateDir == "" || opt.DryRun {
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
		plans[i] = planOne(d, pkgs[i], v, opt.DryRun || lockErr != nil, &results[i])
		plans[i].lockErr = lockErr
		if v.compose {
			v.stageFinal(last, i)
		}
	}
	if !opt.DryRun {
		// One read buffer for the run's read-backs: its pages are touched
		// once.
		commitGroups(groupsOf(plans, v), set, plans, results, make([]byte, 64<<10))
		for _, d := range v.changed {
			d.settleEarly() // one the commit did not take: discarded
		}
		for _, d := range v.changed {
			if d.finalOK && d.cur != d.data {
				seen.wrote = append(seen.wrote, d)
			}
		}
	}
	for i, p := range plans {
		if p == nil {
			continue
		}
		r := &results[i]
		p.finish(r, opt.DryRun || p.lockErr != nil)
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
		if !t.disk.finalOK {
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
			if dk.changed && !dk.finalOK {
				continue // read from disk, if this patch reads it
			}
			w.disk[path] = &diskFile{path: path, data: dk.cur, id: dk.final, cur: dk.cur, text: dk.text, sums: v.sums}
			if !dk.changed {
				w.disk[path].id = dk.id
			}
		}
		v.written = w
	}
	r2 := Result{ID: r.ID, Package: r.Package, Action: "none"}
	p2 := planOne(d, p.pkg, v.written, true, &r2)
	if p2.kind != decided || r2.State != r.State || r2.Variant != r.Variant || len(r2.Edits) != len(r.Edits) {
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

type target struct {
	path     string // real path, inside the package
	original string
	content  string
	exists   bool
	mode     iofs.FileMode
	direct   bool     // path is the package directory joined with the file: no symlink on the way
	id       identity // as read, or after this run's verified write
	verified bool     // id is known to be the identity of content
	disk     *diskFile
	planned  bool // original is an earlier patch's plan, not yet on disk

	text, newText       *text    // searches of original and content
	needles             *needles // what they look for
	sumBefore, sumAfter string   // SHA-256 of original and content, once computed
}

func (t *target) indexed() *text {
	if t.text == nil {
		t.text = newText(t.content, t.needles)
	}
	return t.text
}

func (t *target) before() string {
	if t.sumBefore == "" {
		t.sumBefore = t.sum(t.original)
	}
	return t.sumBefore
}

func (t *target) after() string {
	if t.content == t.original {
		return t.before()
	}
	if t.sumAfter == "" {
		t.sumAfter = t.sum(t.content)
	}
	return t.sumAfter
}

// sum is the SHA-256 of s, a content of this file: once per run (see
// contentSums).
func (t *target) sum(s string) string {
	if t.disk != nil {
		return t.disk.sums.of(s)
	}
	return hashContent(s)
}

// files is what one patch read, by real path, in reading order.
type files struct {
	m     map[string]*target
	order []string
	v     *view
	// unread is set when a file could not be resolved or read: its
	// identity is not in m, so the record cannot vouch for the run.
	unread bool
	// probes and dirs are what was consulted to tell which file the
	// import system loads for each edited module (see importer).
	probes, dirs []string
}

// view is a run's reading of the engine files: each is read from disk
// once, and, when compose is set (a run that writes), a patch sees what
// the earlier patches of the run planned for it.
type view struct {
	compose bool
	disk    map[string]*diskFile // by real path
	changed []*diskFile          // planned to change, in order of first change
	real    map[string]realPath  // EvalSymlinks of each path asked, once per run
	minor   int                  // the worker's CPython 3.minor; 0 = unknown (see importer)
	written *view                // the files as written and read back (see asWritten), once asked
	needles *needles             // what the definitions look for (see text)
	types   *typeCache           // what stat(2) said of each path the importer probed (shared with written)
	sums    *contentSums         // the SHA-256 of each content hashed (shared with written)
}

// contentSums is the SHA-256 of each content a run has hashed, by where
// the content is in memory: what was read (hashed as it was read), each
// patch's planned content, the contents written. A content is hashed once
// per run, however many patches and views (asWritten's) ask for it: a
// string's bytes never change, so two strings that share their first
// byte's address and their length are the same bytes, and the key, a
// pointer, keeps them from being freed and the address reused while the
// cache lives. Equal contents elsewhere in memory are hashed again.
type contentSums struct {
	m map[contentKey]string
}

type contentKey struct {
	p *byte
	n int
}

func newContentSums() *contentSums { return &contentSums{m: map[contentKey]string{}} }

// hashContent is digest.String; a variable so tests can count the hashes.
var hashContent = digest.String

func keyOfContent(s string) contentKey { return contentKey{unsafe.StringData(s), len(s)} }

// of is digest.String(s), once per content and run.
func (c *contentSums) of(s string) string {
	if c == nil {
		return hashContent(s)
	}
	k := keyOfContent(s)
	sum, ok := c.m[k]
	if !ok {
		sum = hashContent(s)
		c.m[k] = sum
	}
	return sum
}

// note keeps sum, taken as s was read, as the SHA-256 of s.
func (c *contentSums) note(s, sum string) {
	if c != nil && sum != "" {
		c.m[keyOfContent(s)] = sum
	}
}

// realPath is what filepath.EvalSymlinks said of a path.
type realPath struct {
	path string
	err  error
}

func newView(compose bool, minor int, nd *needles) *view {
	return &view{compose: compose, minor: minor, needles: nd, disk: map[string]*diskFile{}, real: map[string]realPath{},
		types: newTypeCache(), sums: newContentSums()}
}

// evalSymlinks is filepath.EvalSymlinks, once per path and run: every
// variant and guard of every patch resolves the same few files, and each
// resolution is an lstat of every component of a deep path.
func (v *view) evalSymlinks(p string) (string, error) {
	r, ok := v.real[p]
	if !ok {
		r.path, r.err = filepath.EvalSymlinks(p)
		v.real[p] = r
	}
	return r.path, r.err
}

// diskFile is one engine file in a run: as read, as planned, as written.
type diskFile struct {
	path string
	data string       // as read
	id   identity     // of data
	cur  string       // after the patches planned so far
	text *text        // index of cur
	sums *contentSums // the run's: the SHA-256 of data, cur, and every content planned
	// changed: some patch of the run planned a new content (cur may
	// still equal data, when a later patch undid it).
	changed bool

	staged    *atomicfile.Staged
	stageErr  error
	early     *earlyStage // staged while later patches were planned (see stageFinal)
	renamedID identity    // right after this run renamed it into place
	final     identity    // on disk after the commit
	finalOK   bool        // final is known to be the identity of cur

	sumOf, sumCur string // fileid.SumBytes of a cur over fileid.SmallFile, once computed (sumOf: the cur it is of)
}

// sum is the content digest of cur, as the record keeps it (the same
// SHA-256 as the edits' hashes for any source under fileid.SmallFile).
func (d *diskFile) sum() string {
	if len(d.cur) <= fileid.SmallFile {
		return d.sums.of(d.cur)
	}
	if d.sumCur == "" || d.sumOf != d.cur {
		d.sumCur, d.sumOf = fileid.SumBytes([]byte(d.cur)), d.cur
	}
	return d.sumCur
}

// target is this file as the next patch of the run sees it.
func (d *diskFile) target(direct bool) *target {
	t := &target{path: d.path, content: d.cur, exists: true, mode: iofs.FileMode(d.id.Mode & 0o777),
		direct: direct, disk: d, text: d.text}
	if d.changed {
		// Its identity is known once the group is written (finish).
		t.original, t.planned = d.cur, true
	} else {
		t.original, t.id, t.verified = d.data, d.id, true
	}
	return t
}

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

// plan is one patch as decided in memory, and, once committed, how its
// write went.
type plan struct {
	pkg   Package
	fs    *files
	kind  kind
	links []*diskFile // files it changes, or read as planned by an earlier patch

	err, restoreErr error
	twice           bool  // another writer got in the way of both attempts
	lockErr         error // the package directory could not be locked: decided, not written
}

// planOne decides a patch against the view and, when it is pending in a
// run that writes, computes its files' new contents (into the view when
// it composes).
func planOne(d *patchdef.Definition, pkg Package, v *view, dry bool, r *Result) *plan {
	fs := &files{m: map[string]*target{}, v: v}
	p := &plan{pkg: pkg, fs: fs}
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
		if ev := patchdef.Evaluate(&vr.Edits[i], t.newText.count); ev.State != patchdef.Applied {
			r.State, r.Action = patchdef.Drift, "none"
			r.Why = fmt.Sprintf("%s: after applying, edit %d is %s (%s): the edits of this patch disturb one another", vr.Edits[i].File, i+1, ev.State, ev.Why)
			p.kind = disturbed
			return p
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
func (p *plan) link() {
	for _, path := range p.fs.order {
		t := p.fs.m[path]
		if t.planned || p.kind == writes && p.fs.v.compose && t.disk.changed && t.content != t.original {
			p.links = append(p.links, t.disk)
		}
	}
}

// importedFrom checks that every .py file the variant edits is the file
// the import system loads for its module: "" when each is; else what
// loads instead of the first that is not, and why.
func importedFrom(pkg Package, vr *patchdef.Variant, edits []EditResult, fs *files) (by, why string) {
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

// finish completes a patch's result once the files are written (or the
// write failed): bytecode, hashes, and the identities of what it consulted.
func (p *plan) finish(r *Result, dry bool) {
	files := p.fs.m
	// Bytecode is checked against the source now on disk.
	for _, t := range files {
		if d := t.disk; d != nil && d.changed {
			t.id, t.verified = d.final, d.finalOK
		}
	}
	wrote := p.kind == writes && p.err == nil
	switch p.kind {
	case decided:
		if r.Before == patchdef.Applied {
			checkBytecode(r, files, false, dry, p.fs.v.types)
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
			checkBytecode(r, files, true, false, p.fs.v.types)
			fillAfter(r, files)
			break
		}
		r.Action, r.Why, r.err = "failed", p.err.Error(), p.err
		if fix := writeFix(p.err); fix != "" {
			r.Why += "; " + fix
		}
		if p.restoreErr != nil {
			r.State = patchdef.Drift
			r.Why += "; restoring the files already written failed: " + p.restoreErr.Error()
		}
		fillAfter(r, nil)
		if p.twice {
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

// checkBytecode removes the cached bytecode that could run instead of the
// patched source (after a write: every .pyc of the module; otherwise the
// unchecked-hash ones) and makes the patch shadowed when some cannot be
// removed. A dry run removes nothing: bytecode that would have to go
// makes the patch shadowed there, saying that a start removes it. The
// paths removed are forgotten by types.
func checkBytecode(r *Result, files map[string]*target, wrote, dry bool, types *typeCache) {
	var shadows []string
	for i := range r.Edits {
		e := &r.Edits[i]
		if e.State == patchdef.NotApplicable || e.Path == "" {
			continue
		}
		t := files[e.Path]
		removed, stuck := removePycs(e.Path, wrote, dry, t)
		for _, m := range removed {
			types.forget(m)
		}
		e.PycsRemoved = removed
		shadows = append(shadows, stuck...)
	}
	if len(shadows) > 0 {
		r.State = patchdef.Shadowed
		if dry {
			r.Why = "stale bytecode would run instead of the patched source (a start removes it): " + strings.Join(shadows, "; ")
		} else {
			r.Why = "stale bytecode that could not be removed would run instead of the patched source: " + strings.Join(shadows, "; ")
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
}

func evaluateVariant(v *patchdef.Variant, d *patchdef.Definition, pkg Package, files *files) candidate {
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
			er.Evaluation = patchdef.Evaluate(e, t.indexed().count)
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
func guardsHold(guards []patchdef.Guard, pkg Package, files *files) (string, patchdef.State) {
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
			return fmt.Sprintf("%s has no %s: the code this fix is about does not exist here", g.File, g.What()), patchdef.NotApplicable
		}
	}
	return "", ""
}

// resolve finds file inside the package (the first portion that has it, for
// a namespace package) and reads it once per run (see view). A path that
// leaves the package directory through a symlink is refused: writing there
// would change a file the definition never named.
func resolve(pkg Package, file string, fs *files) (t *target, err error) {
	defer func() {
		if err != nil {
			fs.unread = true
		}
	}()
	dirs := pkg.Dirs
	if len(dirs) == 0 {
		dirs = []string{pkg.Dir}
	}
	var lastErr error
	for _, root := range dirs {
		realRoot, err := fs.v.evalSymlinks(root)
		if err != nil {
			lastErr = err
			continue
		}
		p := filepath.Join(root, filepath.FromSlash(file))
		real, err := fs.v.evalSymlinks(p)
		if errors.Is(err, iofs.ErrNotExist) {
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
		if t, ok := fs.m[real]; ok {
			return t, nil
		}
		d, ok := fs.v.disk[real]
		if !ok {
			data, id, sum, err := readSource(real, maxSourceBytes)
			if err != nil {
				return nil, err
			}
			// The string shares data's bytes: data is this read's own and
			// never written, and a copy would touch as many fresh pages
			// again (engine modules are hundreds of kilobytes).
			d = &diskFile{path: real, data: unsafe.String(unsafe.SliceData(data), len(data)), id: id, sums: fs.v.sums}
			d.cur = d.data
			d.sums.note(d.data, sum)
			d.text = newText(d.cur, fs.v.needles)
			fs.v.disk[real] = d
		}
		t := d.target(real == p && realRoot == root)
		t.needles = fs.v.needles
		fs.m[real] = t
		fs.order = append(fs.order, real)
		return t, nil
	}
	if lastErr != nil {
		return nil, lastErr
	}
	p := filepath.Join(dirs[0], filepath.FromSlash(file))
	if t, ok := fs.m[p]; ok {
		return t, nil
	}
	t = &target{path: p, direct: len(dirs) == 1, id: identity{Absent: true}, verified: true, needles: fs.v.needles}
	fs.m[p] = t
	return t, nil
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
		if err == nil || errors.Is(err, iofs.ErrNotExist) {
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
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, 0, false // a FIFO or device named *.pyc is not bytecode
	}
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

// lockDirs takes an exclusive flock on each package directory itself, in
// sorted order: two starts at once (two containers sharing an editable
// checkout, or a restart racing its predecessor) patch one after the
// other. Directories can be locked on read-only filesystems and nothing
// is created. The wait is bounded for all of them together: whoever holds
// a lock (any uid that can open the directory can), a start waits at most
// timeout, then goes on without it. unlocked says, for each directory not
// locked, why; release drops the locks taken.
//
// A stop (stop closed: the start was asked to stop) ends the wait at
// once; what each message says is the time actually waited.
func lockDirs(stop <-chan struct{}, dirs []string, timeout time.Duration) (unlocked map[string]error, release func()) {
	sorted := slices.Clone(dirs)
	slices.Sort(sorted)
	begun := time.Now()
	deadline := begun.Add(timeout)
	var held []*os.File
	for _, dir := range sorted {
		f, err := lockDir(stop, dir, begun, deadline, timeout)
		if err != nil {
			if unlocked == nil {
				unlocked = map[string]error{}
			}
			unlocked[dir] = err
			continue
		}
		held = append(held, f)
	}
	return unlocked, func() {
		for _, f := range held {
			f.Close() // releases the flock
		}
	}
}

// lockDir takes the flock of one directory, trying at least once and
// again until deadline or a stop; the wait began at begun.
func lockDir(stop <-chan struct{}, dir string, begun, deadline time.Time, timeout time.Duration) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot lock the package directory: %w", err)
	}
	pause := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("cannot lock the package directory %s: %w", dir, err)
		}
		left := time.Until(deadline)
		stopped := false
		select {
		case <-stop:
			stopped = true
		default:
		}
		if left <= 0 || stopped {
			f.Close()
			return nil, fmt.Errorf("the package directory %s is locked (flock) by another process; %s", dir, waitedFor(time.Since(begun), timeout, stopped))
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// waitedFor says how long a lock was waited for: waited, the time since
// the wait began, against the bound timeout; stopped when a stop ended it
// before the bound. A wait that ran its course is the bound itself (to
// within one pause), named as such.
func waitedFor(waited, timeout time.Duration, stopped bool) string {
	switch {
	case stopped:
		return fmt.Sprintf("stopped waiting after %s of %s (INFERA_PATCH_LOCK_TIMEOUT): the start was asked to stop", waited.Round(time.Millisecond), timeout)
	case timeout == 0:
		return "did not wait (INFERA_PATCH_LOCK_TIMEOUT=0)"
	}
	return "waited " + timeout.String() + " (INFERA_PATCH_LOCK_TIMEOUT)"
}

// writeFix is what an operator can do about an engine file that could not
// be written, for the causes that are the deployment's rather than the
// file's: "" for anything else.
func writeFix(err error) string {
	switch {
	case errors.Is(err, syscall.EROFS):
		return "the engine is on a read-only filesystem: apply the fix when the image is built (infera-exec --check ROOT lists what is pending) or mount the package directory writable"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Sprintf("uid %d may not write the engine's package directory: run the start as the engine's owner (the image's, usually root) or apply the fix when the image is built", os.Geteuid())
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "the filesystem holding the engine is full: the patch needs room for one more copy of the file while it is replaced"
	}
	return ""
}
