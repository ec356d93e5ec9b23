package patches

import (
	"encoding/json"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/plan"
	"github.com/infera/infera-exec/patches/record"

	"github.com/infera/infera-exec/internal/digest"
)

// The record is what makes a restart cheap. Right after a run has read
// and verified every file a definition set consults (or written and read
// back the ones it patched), it keeps, in infera-exec's own state
// directory, each patch's result and the identity of every one of those
// files (see Identity), and of the __pycache__ directory of every module
// it edits. A later start with the same key (the definitions' digest, the
// probe's fingerprint: interpreter, environment, sys.path inputs; the
// packages' directories and versions) whose files all still have those
// identities has, byte for byte, the files that were verified: it takes
// the results from the record and reads no engine file. Anything else
// (a changed file, inode or mode, a new or removed file, another
// interpreter or sys.path, other definitions, a record or directory that
// is not ours alone) runs the full check, never a shortcut to "applied".

// observed is what a run saw, for the record; incomplete when something
// cannot be vouched for by identities (a namespace package, a path
// through a symlink, a failed or shadowed patch, a file read while it
// changed).
type observed struct {
	files      []record.File
	seen       map[string]bool
	incomplete bool
	// results are what the record keeps when they differ from the run's
	// (a patch the run wrote, as a restart would find it); nil: the run's.
	results []Result
	// wrote are the files the run wrote and read back.
	wrote []*plan.DiskFile
}

func (o *observed) add(pkg Package, r Result, fs *plan.Files) {
	if r.Action == "failed" || r.State == patchdef.Shadowed || r.State == patchdef.Pending || r.Refused() != nil {
		o.incomplete = true
	}
	if fs == nil {
		return
	}
	if fs.Unread() {
		o.incomplete = true
	}
	if fs.Len() > 0 && len(pkg.Dirs) > 1 {
		o.incomplete = true
		return
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	fs.Each(func(p string, direct, verified bool, id identity, sum func() string) {
		if !direct || !verified {
			o.incomplete = true
			return
		}
		if !o.seen[p] {
			o.seen[p] = true
			f := record.File{Path: p, ID: id}
			if sum != nil {
				// A verified identity is the one of the content the run
				// planned last: what it read, or wrote and read back.
				f.Sum = sum()
			}
			o.files = append(o.files, f)
		}
	})
	// What decided that each edited module loads from the edited file:
	// the type of every path the import system would try before it (a
	// package directory, an extension module, present or absent), as the
	// run's importer saw it (see plan.Files.TypeOf), and, for an interpreter of
	// unknown minor, the directories searched.
	for _, p := range fs.Probes() {
		if o.seen[p] {
			continue
		}
		o.seen[p] = true
		id, ok := fs.TypeOf(p)
		if !ok {
			o.incomplete = true
			continue
		}
		o.files = append(o.files, record.File{Path: p, ID: id, Type: true})
	}
	for _, d := range fs.Dirs() {
		if o.seen[d] {
			continue
		}
		o.seen[d] = true
		sum, id, ok := fileid.Sum(d, false, nil)
		if !ok {
			o.incomplete = true
		}
		o.files = append(o.files, record.File{Path: d, ID: id, Sum: sum})
	}
	for _, e := range r.Edits {
		if e.State == patchdef.NotApplicable || !strings.HasSuffix(e.Path, ".py") {
			continue
		}
		pc := filepath.Join(filepath.Dir(e.Path), "__pycache__")
		if !o.seen[pc] {
			o.seen[pc] = true
			id, ok := fileid.Lstat(pc)
			if !ok {
				o.incomplete = true
			}
			o.files = append(o.files, record.File{Path: pc, ID: id, PyCache: true})
		}
	}
}

// recordKey is everything besides file identities that the results
// depend on; "" when the location cannot be fingerprinted (no record).
func recordKey(set *patchdef.Set, loc *Location) string {
	if loc.Fingerprint == "" || set.Digest == "" {
		return ""
	}
	h := &strings.Builder{}
	h.WriteString("record v" + record.Version + "\x00defs " + set.Digest + "\x00probe " + loc.Fingerprint + "\x00")
	names := make([]string, 0, len(loc.Packages))
	for n := range loc.Packages {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := loc.Packages[n]
		dirs := make([]string, len(p.Dirs))
		for i, d := range p.Dirs {
			dirs[i] = strconv.Quote(d)
		}
		// As fmt's "pkg %s %t %q %q %q", without its reflection.
		h.WriteString("pkg " + n + " " + strconv.FormatBool(p.Found) + " " + strconv.Quote(p.Dir) + " [" + strings.Join(dirs, " ") + "] " + strconv.Quote(p.Version) + "\x00")
	}
	return digest.Bytes([]byte(h.String()))
}

// applyRecorded is Apply with the record: the recorded results when they
// still hold (or written again by replay), else the full run, recorded
// when it can be vouched for.
func applyRecorded(set *patchdef.Set, loc *Location, opt options) []Result {
	key := recordKey(set, loc)
	if key == "" {
		res, _ := apply(set, loc, opt)
		return res
	}
	file := filepath.Join(opt.StateDir, "patches-"+key[:16]+".json")
	res, b := fromRecord(file, key, set, loc, opt)
	if b == recordHolds {
		return res
	}
	start := fileid.Now()
	res, seen := apply(set, loc, opt)
	if seen.incomplete {
		return res
	}
	kept := res
	if seen.results != nil {
		kept = seen.results
	}
	results, err := json.Marshal(withoutPycs(kept))
	if err != nil {
		return res
	}
	rec := record.Record{Version: record.Version, Key: key, Files: seen.files, Results: results}
	keepReplay(&rec, file, res, seen.wrote, b == pristineAgain)
	record.Write(file, rec, start)
	return res
}

// keepReplay adds to rec what the run wrote (wrote, with res its
// results), for a start on the same files as they were read to write
// them again (record.KeepReplay; with blob, what it needs to). It adds
// nothing when some file an applied patch edits is neither among them
// nor a file the record names: the record could not vouch for it.
func keepReplay(rec *record.Record, file string, res []Result, wrote []*plan.DiskFile, blob bool) {
	if len(wrote) == 0 {
		return
	}
	written := map[string]bool{}
	for _, d := range wrote {
		written[d.Path()] = true
	}
	at := map[string]int{}
	for i, f := range rec.Files {
		at[f.Path] = i
	}
	// A file an applied patch edits and the run did not write (that edit
	// was in place already, as a v0.2.2 script left it) is a file the
	// record vouches for by itself.
	for _, r := range res {
		if r.Action != "applied" {
			continue
		}
		for _, e := range r.Edits {
			if i, ok := at[e.Path]; e.State != patchdef.NotApplicable && !written[e.Path] && (!ok || rec.Files[i].Type) {
				return
			}
		}
	}
	ws := make([]record.Written, len(wrote))
	for i, d := range wrote {
		readSum, sum := d.Sums()
		ws[i] = record.Written{Path: d.Path(), ReadID: d.ReadID(), ReadSum: readSum, Sum: sum, Content: d.Planned()}
	}
	var results []byte
	if blob {
		var err error
		if results, err = json.Marshal(withoutPycs(res)); err != nil {
			return
		}
	}
	record.KeepReplay(rec, file, ws, results)
}

// withoutPycs is a copy of results without the bytecode removed, which
// is the run's own.
func withoutPycs(results []Result) []Result {
	if results == nil {
		return nil
	}
	results = append([]Result(nil), results...)
	for i := range results {
		results[i].Edits = append([]EditResult(nil), results[i].Edits...)
		for j := range results[i].Edits {
			results[i].Edits[j].PycsRemoved = nil
		}
	}
	return results
}

// belief is what a restart may believe of a record (fromRecord).
type belief int

const (
	// fullCheck: the record says nothing about the files as they are
	// (absent, another key, a file changed): the full check decides.
	fullCheck belief = iota
	// recordHolds: every file the record names holds what was verified
	// (or was written again by replay): its results are this start's.
	recordHolds
	// pristineAgain: the files the recorded run wrote hold again what it
	// read (a new container of the same image), but no replay could be
	// done: the full check decides, and its record keeps the blob a
	// replay needs.
	pristineAgain
)

// fromRecord returns the recorded results when the record is trusted,
// has this key, and every file it names still holds what was verified
// (record.Record.Check). A changed __pycache__ directory alone is not a
// change of the source: the edited modules' bytecode is checked again
// (and stale bytecode removed), and the record renewed; bytecode that
// cannot be removed runs the full check. A record confirmed by content is
// renewed with the identities seen, so that the next start in the same
// container reads nothing. Files that hold again what the recorded run
// read are written again (writeAgainRecorded).
func fromRecord(file, key string, set *patchdef.Set, loc *Location, opt options) ([]Result, belief) {
	start := fileid.Now()
	rec, ok := record.Read(opt.StateDir, filepath.Base(file), key)
	if !ok {
		return nil, fullCheck
	}
	var res []Result
	if json.Unmarshal(rec.Results, &res) != nil || len(res) != len(set.Defs) {
		return nil, fullCheck
	}
	v := rec.Check(start)
	switch v.Belief {
	case record.FullCheck:
		return nil, fullCheck
	case record.PristineAgain:
		return nil, pristineAgain
	case record.Replayable:
		res, ok, renew := writeAgainRecorded(file, rec, v.Replays, loc, set, opt)
		if renew {
			record.Write(file, *rec, start)
		}
		if !ok {
			return nil, pristineAgain
		}
		return res, recordHolds
	}
	for i, d := range set.Defs {
		r := &res[i]
		if r.ID != d.ID {
			return nil, fullCheck
		}
		r.Required = d.Required || opt.Require[d.ID]
		r.Before, r.Action, r.Recorded = r.State, "none", true
		if r.State != patchdef.Applied || v.PycDirs == nil {
			continue
		}
		for j := range r.Edits {
			e := &r.Edits[j]
			if e.State == patchdef.NotApplicable || !v.PycDirs[filepath.Join(filepath.Dir(e.Path), "__pycache__")] {
				continue
			}
			removed, stuck := removePycs(e.Path, e.File, false, false, onDisk{}, pycachePrefix{}) // a run with a prefix is never recorded
			if len(stuck) > 0 {
				return nil, fullCheck
			}
			e.PycsRemoved = removed
		}
	}
	if v.PycDirs != nil || v.Renew {
		rec.RenewPyCaches(func(p string) bool { return v.PycDirs[p] })
		record.Write(file, *rec, start)
	}
	return res, recordHolds
}

// writeAgainRecorded writes again what the recorded run wrote
// (record.Replay), under the package directories' locks, and returns
// that run's results as this start's, with the bytecode of the edited
// modules checked as after any write (checkBytecode): every .pyc of a
// written module goes, and the unchecked-hash ones of the others; one
// that cannot go makes its patch shadowed, and the run unrecorded. ok
// false: it did not write them all (the full check then decides). renew
// says whether rec, updated with what it wrote, may be kept.
func writeAgainRecorded(file string, rec *record.Record, idx []int, loc *Location, set *patchdef.Set, opt options) (res []Result, ok, renew bool) {
	var wrote []Result
	accept := func(b []byte) bool {
		if json.Unmarshal(b, &wrote) != nil || len(wrote) != len(set.Defs) {
			return false
		}
		for i, d := range set.Defs {
			if wrote[i].ID != d.ID {
				return false
			}
		}
		return true
	}
	var dirs []string
	for _, p := range loc.Packages {
		if p.Found {
			dirs = append(dirs, p.Dir)
		}
	}
	lock := func(dirs []string) (func(), bool) {
		unlocked, release := lockDirs(opt.Stop, dirs, opt.LockTimeout)
		return release, len(unlocked) == 0
	}
	_, ids, ok := record.Replay(opt.StateDir, file, rec, idx, dirs, lock, accept)
	if !ok {
		return nil, false, false
	}
	renew = true
	res = wrote
	for i, d := range set.Defs {
		r := &res[i]
		r.Required = d.Required || opt.Require[d.ID]
		r.Replayed = r.Action == "applied"
		if r.State == patchdef.Applied {
			checkBytecode(r, func(p string) (identity, bool) { id, ok := ids[p]; return id, ok }, r.Action == "applied", false, pycachePrefix{}) // nor replayed
			renew = renew && r.State != patchdef.Shadowed
		}
	}
	rec.RenewPyCaches(func(string) bool { return true })
	return res, true, renew
}
