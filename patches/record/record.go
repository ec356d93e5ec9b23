// Package record says what a restart may believe of an earlier start's
// engine-patch results: they hold while every file that start consulted
// still holds what it verified (the same identity, or, on a new mount of
// the same image, the same portable identity and content), and where the
// files it wrote hold again what it read (a new container of the same
// image), the content it wrote may be written again (Replay) without
// planning. Anything else is a full check, never a shortcut to "applied".
package record

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/statedir"
)

// Version changes with the record's format or meaning.
const Version = "5"

// MaxBytes caps a record file.
const MaxBytes = 4 << 20

// Record is kept as JSON: it is read on every restart. Results are the
// caller's (the patch results), kept as they were given.
type Record struct {
	Version string          `json:"version"`
	Key     string          `json:"key"`
	Files   []File          `json:"files"`
	Results json.RawMessage `json:"results"`
	// Wrote: where, in the blob beside the record, the results of the
	// run that wrote the files that have a Pristine are, as it reported
	// them, for a start that writes the same again (see Replay); kept
	// out of the record, which every restart reads.
	Wrote *BlobRange `json:"wrote,omitempty"`
}

// File is one path the recorded run consulted.
type File struct {
	Path string          `json:"path"`
	ID   fileid.Identity `json:"id"`
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
	// where what it wrote is kept (see Replay).
	Pristine *Pristine `json:"pristine,omitempty"`
}

// TypeOnly is the part of an identity a Type entry compares.
func TypeOnly(id fileid.Identity) fileid.Identity {
	if id.Absent {
		return id
	}
	return fileid.Identity{Mode: id.Mode & syscall.S_IFMT}
}

// Read returns the record file name in the state directory dir when it
// is there, trusted, of this Version and keyed on key.
func Read(dir, name, key string) (*Record, bool) {
	data, ok := statedir.ReadCache(dir, name, MaxBytes)
	if !ok {
		return nil, false
	}
	var rec Record
	if json.Unmarshal(data, &rec) != nil || rec.Version != Version || rec.Key != key {
		return nil, false
	}
	return &rec, true
}

// Write keeps rec as file, without waiting for the clock. An identity
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
func Write(file string, rec Record, start fileid.Tick) {
	rec.Files = append([]File(nil), rec.Files...)
	for i := range rec.Files {
		f := &rec.Files[i]
		f.Unsettled = !f.ID.SettledAt(start)
		if f.Unsettled && !f.PyCache && f.Sum == "" {
			return
		}
	}
	b, err := json.Marshal(&rec)
	if err != nil {
		return
	}
	// No fsync: a record lost or torn by a crash is simply not used.
	statedir.WriteCache(filepath.Dir(file), filepath.Base(file), b)
}

// Belief is what a restart may believe of a record.
type Belief int

const (
	// FullCheck: the record says nothing about the files as they are (a
	// file changed, a type changed, one is gone): the full check decides.
	FullCheck Belief = iota
	// Holds: every file the record names holds what was verified; its
	// results are this start's.
	Holds
	// Replayable: the files the recorded run wrote hold again what it
	// read, every other file holds what was verified, and the blob
	// beside the record has what it wrote: Replay may write it again.
	Replayable
	// PristineAgain: as Replayable, but there is no blob yet: the full
	// check decides, and its record keeps the blob a replay needs.
	PristineAgain
)

// Verdict is what Check found.
type Verdict struct {
	Belief Belief
	// PycDirs: __pycache__ directories that changed (and only they):
	// the edited modules' bytecode is to be checked again.
	PycDirs map[string]bool
	// Replays: for Replayable, the indexes of the files to write again.
	Replays []int
	// Renew: a file was confirmed by its content: the record is to be
	// kept again with the identities seen (Files updated).
	Renew bool
}

// Check decides what rec vouches for now: every file it names still
// holds what was verified (fileid.Check): its identity is unchanged, or,
// on a new mount of the same image, its portable identity is and its
// content (read now) has the recorded digest. start is when this start
// began, for identities confirmed by content.
func (rec *Record) Check(start fileid.Tick) Verdict {
	var v Verdict
	buf := &fileid.Buffer{}
	for i, f := range rec.Files {
		if f.Type {
			id, ok := fileid.Stat(f.Path)
			if !ok || TypeOnly(id) != f.ID {
				return Verdict{}
			}
			continue
		}
		id, ok := fileid.Lstat(f.Path)
		switch {
		case !ok:
			return Verdict{}
		case id == f.ID && !f.Unsettled:
		case f.PyCache:
			if v.PycDirs == nil {
				v.PycDirs = map[string]bool{}
			}
			v.PycDirs[f.Path] = true
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
				// layer of the same image): Replay checks its content.
				v.Replays = append(v.Replays, i)
				continue
			}
			if !ok {
				return Verdict{}
			}
			// Confirmed by content: kept as seen, and unsettled again
			// when the clock had not passed it at this start.
			rec.Files[i].ID = id
			v.Renew = v.Renew || id != f.ID || id.SettledAt(start)
		}
	}
	if v.Replays == nil {
		v.Belief = Holds
		return v
	}
	// Every file the recorded run wrote holds what it read, or none.
	for i, f := range rec.Files {
		if f.Pristine != nil && !slices.Contains(v.Replays, i) {
			return Verdict{}
		}
	}
	v.Belief = Replayable
	if rec.Wrote == nil {
		v.Belief = PristineAgain // no blob yet: this run writes one
	}
	return v
}

// RenewPyCaches takes the identities of the record's __pycache__
// directories that renew names again, after their bytecode was checked.
func (rec *Record) RenewPyCaches(renew func(path string) bool) {
	for i, f := range rec.Files {
		if f.PyCache && renew(f.Path) {
			rec.Files[i].ID, _ = fileid.Lstat(f.Path)
		}
	}
}
