package patches

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/patchdef"

	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/statedir"
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

// recordVersion changes with the record's format or meaning.
const recordVersion = "5"

// record is kept as JSON: it is read on every restart.
type record struct {
	Version string         `json:"version"`
	Key     string         `json:"key"`
	Files   []recordedFile `json:"files"`
	Results []Result       `json:"results"`
	// Wrote: where, in the blob beside the record, the results of the
	// run that wrote the files that have a Pristine are, as it reported
	// them, for a start that writes the same again (see replay.go); kept
	// out of the record, which every restart reads.
	Wrote *blobRange `json:"wrote,omitempty"`
}

type recordedFile struct {
	Path string   `json:"path"`
	ID   identity `json:"id"`
	// Sum is what the path held when ID was taken (fileid.Sum: an engine
	// file's SHA-256, a directory's names): on a new mount of the same
	// image, where ID's device, inode and change time are new, an
	// unchanged portable identity and this sum stand for it.
	Sum string `json:"sum,omitempty"`
	// PyCache: a __pycache__ directory; when it alone changed, only the
	// bytecode of the edited modules in it is checked again.
	PyCache bool `json:"pycache,omitempty"`
	// Type: only what the path is, as stat(2) sees it following links (a
	// regular file, a directory, absent), counts: a name the import
	// system tries before an edited module's file.
	Type bool `json:"type,omitempty"`
	// Unsettled: ID was taken before the file clock had passed its change
	// time (fileid.SettledAt), so a second write within that tick could
	// have left it equal: the next start confirms the path by Sum (a
	// __pycache__ directory: checks the edited modules' bytecode again)
	// even when its identity is unchanged.
	Unsettled bool `json:"unsettled,omitempty"`
	// Pristine: what the file held before the recorded run wrote it, and
	// where what it wrote is kept (see replay.go).
	Pristine *pristineFile `json:"pristine,omitempty"`
}

// typeOnly is the part of an identity a Type entry compares.
func typeOnly(id identity) identity {
	if id.Absent {
		return id
	}
	return identity{Mode: id.Mode & syscall.S_IFMT}
}

// observed is what a run saw, for the record; incomplete when something
// cannot be vouched for by identities (a namespace package, a path
// through a symlink, a failed or shadowed patch, a file read while it
// changed).
type observed struct {
	files      []recordedFile
	seen       map[string]bool
	incomplete bool
	// results are what the record keeps when they differ from the run's
	// (a patch the run wrote, as a restart would find it); nil: the run's.
	results []Result
	// wrote are the files the run wrote and read back.
	wrote []*diskFile
}

func (o *observed) add(pkg Package, r Result, fs *files) {
	if r.Action == "failed" || r.State == patchdef.Shadowed || r.State == patchdef.Pending || r.refuse != nil {
		o.incomplete = true
	}
	if fs == nil {
		return
	}
	if fs.unread {
		o.incomplete = true
	}
	if len(fs.m) > 0 && len(pkg.Dirs) > 1 {
		o.incomplete = true
		return
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	paths := make([]string, 0, len(fs.m))
	for p := range fs.m {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		t := fs.m[p]
		if !t.direct || !t.verified {
			o.incomplete = true
			continue
		}
		if !o.seen[p] {
			o.seen[p] = true
			f := recordedFile{Path: p, ID: t.id}
			if d := t.disk; d != nil {
				// A verified identity is the one of the content the run
				// planned last: what it read, or wrote and read back.
				f.Sum = d.sum()
			}
			o.files = append(o.files, f)
		}
	}
	// What decided that each edited module loads from the edited file:
	// the type of every path the import system would try before it (a
	// package directory, an extension module, present or absent), as the
	// run's importer saw it (see typeCache), and, for an interpreter of
	// unknown minor, the directories searched.
	for _, p := range fs.probes {
		if o.seen[p] {
			continue
		}
		o.seen[p] = true
		id, ok := fs.v.types.stat(p)
		if !ok {
			o.incomplete = true
			continue
		}
		o.files = append(o.files, recordedFile{Path: p, ID: id, Type: true})
	}
	for _, d := range fs.dirs {
		if o.seen[d] {
			continue
		}
		o.seen[d] = true
		sum, id, ok := fileid.Sum(d, false, nil)
		if !ok {
			o.incomplete = true
		}
		o.files = append(o.files, recordedFile{Path: d, ID: id, Sum: sum})
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
			o.files = append(o.files, recordedFile{Path: pc, ID: id, PyCache: true})
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
	h.WriteString("record v" + recordVersion + "\x00defs " + set.Digest + "\x00probe " + loc.Fingerprint + "\x00")
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
// still hold, else the full run, recorded when it can be vouched for.
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
	if !seen.incomplete {
		kept := res
		if seen.results != nil {
			kept = seen.results
		}
		rec := record{Version: recordVersion, Key: key, Files: seen.files, Results: kept}
		keepReplay(&rec, file, res, seen.wrote, b == pristineAgain)
		writeRecord(file, rec, start)
	}
	return res
}

// writeRecord keeps rec, without waiting for the clock. An identity
// taken by a read that began at start or later vouches for the bytes read
// only when the clock had passed the file's change time then
// (fileid.SettledAt): otherwise a second write within the same tick could
// leave every field equal. Such an entry (this very run's writes, a
// __pycache__ it cleaned, a file changed just before the start) is kept
// Unsettled, with the Sum that stands for its content, and the next start
// confirms it by reading it (a __pycache__: by checking the edited
// modules' bytecode) and renews the record; a run that consulted an
// unsettled path it cannot confirm that way is not recorded. Best effort:
// without a record the next start runs the full check.
func writeRecord(file string, rec record, start fileid.Tick) {
	rec.Files = append([]recordedFile(nil), rec.Files...)
	for i := range rec.Files {
		f := &rec.Files[i]
		f.Unsettled = !f.ID.SettledAt(start)
		if f.Unsettled && !f.PyCache && f.Sum == "" {
			return
		}
	}
	rec.Results = withoutPycs(rec.Results)
	b, err := json.Marshal(&rec)
	if err != nil {
		return
	}
	// No fsync: a record lost or torn by a crash is simply not used.
	statedir.WriteCache(filepath.Dir(file), filepath.Base(file), b)
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

// fromRecord returns the recorded results when the record is trusted, has
// this key, and every file it names still holds what was verified
// (fileid.Check): its identity is unchanged, or, on a new mount of the
// same image, its portable identity is and its content (read now) has the
// recorded digest. A changed __pycache__ directory alone is not a change
// of the source: the edited modules' bytecode is checked again (and stale
// bytecode removed), and the record renewed; bytecode that cannot be
// removed runs the full check. A record confirmed by content is renewed
// with the identities seen, so that the next start in the same container
// reads nothing.
func fromRecord(file, key string, set *patchdef.Set, loc *Location, opt options) (res []Result, b belief) {
	start := fileid.Now()
	data, ok := statedir.ReadCache(opt.StateDir, filepath.Base(file), maxStateBytes)
	if !ok {
		return nil, fullCheck
	}
	var rec record
	if json.Unmarshal(data, &rec) != nil || rec.Version != recordVersion || rec.Key != key || len(rec.Results) != len(set.Defs) {
		return nil, fullCheck
	}
	var pycDirs map[string]bool
	var replays []int // files that may hold again what the recorded run read
	buf := &fileid.Buffer{}
	renew := false
	for i, f := range rec.Files {
		if f.Type {
			id, ok := fileid.Stat(f.Path)
			if !ok || typeOnly(id) != f.ID {
				return nil, fullCheck
			}
			continue
		}
		id, ok := fileid.Lstat(f.Path)
		switch {
		case !ok:
			return nil, fullCheck
		case id == f.ID && !f.Unsettled:
		case f.PyCache:
			if pycDirs == nil {
				pycDirs = map[string]bool{}
			}
			pycDirs[f.Path] = true
			rec.Files[i].ID = id
		default:
			cur := id
			if id == f.ID {
				id, ok = fileid.Confirm(f.Path, false, f.Sum, buf) // unsettled
			} else {
				id, ok = fileid.Check(f.Path, false, f.ID, f.Sum, buf)
			}
			if !ok && f.Pristine != nil && cur.Portable() == f.Pristine.ID {
				// Maybe what the recorded run read (a new container
				// layer of the same image): replay checks its content.
				replays = append(replays, i)
				continue
			}
			if !ok {
				return nil, fullCheck
			}
			// Confirmed by content: kept as seen, and unsettled again
			// when the clock had not passed it at this start.
			rec.Files[i].ID = id
			renew = renew || id != f.ID || id.SettledAt(start)
		}
	}
	if replays != nil {
		// Every file the recorded run wrote holds what it read, or none.
		for i, f := range rec.Files {
			if f.Pristine != nil && !slices.Contains(replays, i) {
				return nil, fullCheck
			}
		}
		if rec.Wrote == nil {
			return nil, pristineAgain // no blob yet: this run writes one
		}
		res, ok, renew := replay(file, &rec, replays, loc, set, opt)
		if renew {
			writeRecord(file, rec, start)
		}
		if !ok {
			return nil, pristineAgain
		}
		return res, recordHolds
	}
	res = rec.Results
	for i, d := range set.Defs {
		r := &res[i]
		if r.ID != d.ID {
			return nil, fullCheck
		}
		r.Required = d.Required || opt.Require[d.ID]
		r.Before, r.Action, r.Recorded = r.State, "none", true
		if r.State != patchdef.Applied || pycDirs == nil {
			continue
		}
		for j := range r.Edits {
			e := &r.Edits[j]
			if e.State == patchdef.NotApplicable || !pycDirs[filepath.Join(filepath.Dir(e.Path), "__pycache__")] {
				continue
			}
			removed, stuck := removePycs(e.Path, false, false, nil)
			if len(stuck) > 0 {
				return nil, fullCheck
			}
			e.PycsRemoved = removed
		}
	}
	if pycDirs != nil || renew {
		for i, f := range rec.Files {
			if pycDirs[f.Path] {
				rec.Files[i].ID, _ = fileid.Lstat(f.Path)
			}
		}
		writeRecord(file, rec, start)
	}
	return res, recordHolds
}
