package record

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/statedir"
	"github.com/infera/infera-exec/patches/commit"
	"github.com/infera/infera-exec/patches/source"
)

// A Kubernetes restart is a new container from the same image: the
// engine files hold again exactly what the first start read, and the
// record (in a state directory that outlives the container) names what
// that start wrote. Such a start writes the same again without planning:
// the record keeps, for each file a run wrote, the portable identity and
// SHA-256 of what the run read (pristineFile), and the content it wrote,
// in a blob beside the record. Planning is a function of what the record
// is keyed on (the definitions, the interpreter and sys.path inputs, the
// packages) and of what the record names (every file consulted, the type
// of every name the import system tries first): when each of those holds,
// and each written file holds what the run read (its content read now),
// the plan would be the one recorded, byte for byte. The write itself is
// the run's own commit (staged, fsynced, renamed only over the file read,
// read back), and the bytecode of the edited modules is checked as after
// any write. Anything else, including a failed write, runs the full check.

// Pristine is what a file the recorded run wrote held before the
// write (the portable part of the fileid.Identity read, the SHA-256 of the
// content read), and where the content it wrote is in the record's blob
// (its SHA-256 is the record entry's Sum).
type Pristine struct {
	ID      fileid.Identity `json:"id"`
	Sum     string          `json:"sum"`
	Written BlobRange       `json:"written"`
}

// BlobRange is a part of the blob beside a record.
type BlobRange struct {
	Off int    `json:"off"`
	Len int    `json:"len"`
	Sum string `json:"sum,omitempty"` // its SHA-256, when no other field holds it
}

// section is the part of parts (a blob's) that r names; false when r
// reaches past it (a blob torn by a crash: it is written without fsync)
// or is longer than limit.
func (r BlobRange) section(parts *io.SectionReader, limit int) (*io.SectionReader, bool) {
	if r.Off < 0 || r.Len < 0 || r.Len > limit || int64(r.Off) > parts.Size()-int64(r.Len) {
		return nil, false
	}
	return io.NewSectionReader(parts, int64(r.Off), int64(r.Len)), true
}

// BlobName is the name of the blob beside the record file.
func BlobName(recordFile string) string {
	return strings.TrimSuffix(filepath.Base(recordFile), ".json") + ".blob"
}

// Written is one file the recorded run wrote and read back: what it read
// (its identity and SHA-256) and what it wrote (the content and its
// SHA-256, which is the record entry's Sum).
type Written struct {
	Path         string
	ReadID       fileid.Identity
	ReadSum, Sum string
	Content      string
}

// KeepReplay adds to rec what the run wrote: what each written file held
// before and, with results (the run's, as it reported them; nil: none),
// what a start needs to write it again: each written file's content and
// the results, in a blob written beside the record first. It adds
// nothing when a file among them is not in the record as an engine file
// with the content written.
//
// The blob (the engine files' size) is written only by a run that found
// the files pristine again under a record of their writing (a new
// container layer of the same image: what a replay is for); a first start
// keeps what they held before, which costs it nothing, so that the first
// such restart knows it is one.
func KeepReplay(rec *Record, file string, wrote []Written, results []byte) {
	if len(wrote) == 0 {
		return
	}
	at := map[string]int{}
	for i, f := range rec.Files {
		at[f.Path] = i
	}
	var parts []string
	kept := map[int]*Pristine{}
	off := 0
	for _, w := range wrote {
		i, ok := at[w.Path]
		if !ok || rec.Files[i].Type || rec.Files[i].Sum != w.Sum {
			return
		}
		kept[i] = &Pristine{ID: w.ReadID.Portable(), Sum: w.ReadSum, Written: BlobRange{Off: off, Len: len(w.Content)}}
		parts = append(parts, w.Content)
		off += len(w.Content)
	}
	if results != nil {
		h := sha256.Sum256(results)
		rec.Wrote = &BlobRange{Off: off, Len: len(results), Sum: hex.EncodeToString(h[:])}
		parts = append(parts, string(results))
		statedir.WriteBlob(filepath.Dir(file), BlobName(file), parts)
	}
	rec.Files = slices.Clone(rec.Files)
	for i, p := range kept {
		rec.Files[i].Pristine = p
	}
}

// replayFile is one file replay writes: the file read (kept open: what a
// failed group is restored from), and the part of the blob it gets.
type replayFile struct {
	path    string
	read    *os.File
	id      fileid.Identity // of read, as it was read
	part    *io.SectionReader
	sum     string // of part, the record entry's Sum
	staged  *atomicfile.Staged
	renamed fileid.Identity // right after the rename
	final   fileid.Identity // read back
}

// Replay writes again, as one group, the recorded files at idx (a
// Replayable verdict's), which hold by their portable identity what the
// recorded run read, and returns the results that run reported (the blob's,
// once accept took them), or ok false when it did not write them all (the
// full check then decides, on the files as they are). written is each
// file's identity as read back; rec's entries are updated with them.
// lock takes the locks of the package directories the files are in (all
// of them, or ok false).
//
// Every byte goes through one small buffer (and the kernel's copies): a
// file is hashed as it is read, the blob's part as it is staged, the
// written file as it is read back; no file is held in memory whole.
func Replay(dir, file string, rec *Record, idx []int, pkgDirs []string, lock func(dirs []string) (release func(), ok bool), accept func(results []byte) bool) (results []byte, written map[string]fileid.Identity, ok bool) {
	parts, closeBlob, ok := statedir.OpenBlob(dir, BlobName(file))
	if !ok {
		return nil, nil, false
	}
	defer closeBlob()
	// The results, a few kilobytes, are read whole; a torn blob, or
	// another run's, fails their SHA-256 (a written file's part, staged
	// below, its own).
	sec, ok := rec.Wrote.section(parts, MaxBytes)
	if !ok {
		return nil, nil, false
	}
	b := make([]byte, rec.Wrote.Len)
	if _, err := io.ReadFull(sec, b); err != nil {
		return nil, nil, false
	}
	if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != rec.Wrote.Sum || !accept(b) {
		return nil, nil, false
	}
	var dirs []string
	for _, d := range pkgDirs {
		for _, i := range idx {
			if strings.HasPrefix(rec.Files[i].Path, d+string(filepath.Separator)) && !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	if len(dirs) == 0 {
		return nil, nil, false
	}
	release, ok := lock(dirs)
	defer release()
	if !ok {
		return nil, nil, false
	}
	files := make([]*replayFile, len(idx))
	defer func() {
		for _, r := range files {
			if r != nil && r.read != nil {
				r.read.Close()
			}
		}
	}()
	for k, i := range idx {
		f := rec.Files[i]
		part, ok := f.Pristine.Written.section(parts, source.MaxBytes)
		if !ok {
			return nil, nil, false
		}
		files[k] = &replayFile{path: f.Path, sum: f.Sum, part: part}
		atomicfile.RemoveStale(f.Path) // before this run stages its own beside it
	}
	// The staging (mostly fsync waits) runs while each file is read and
	// hashed here: nothing is renamed before both are done, and a file
	// that is not what the recorded run read discards every stage.
	staged := stageAgain(files)
	buf := make([]byte, 64<<10)
	pristine := true
	for k, i := range idx {
		p := rec.Files[i].Pristine
		read, id, sum, err := source.Open(files[k].path, buf)
		files[k].read, files[k].id = read, id
		if err != nil || sum != p.Sum || id.Portable() != p.ID {
			pristine = false
			break
		}
	}
	if !staged() || !pristine || !writeAgain(files, buf) {
		for _, r := range files {
			if r.staged != nil {
				r.staged.Discard() // no-op for the ones renamed
			}
		}
		return nil, nil, false
	}
	written = map[string]fileid.Identity{}
	for k, i := range idx {
		rec.Files[i].ID = files[k].final
		written[files[k].path] = files[k].final
	}
	return b, written, true
}

// stageAgain starts staging each file's part of the blob, as a first
// start's commit stages (a few at a time, fsynced), each checked against
// its sum as it is written, and returns the wait for them all: true when
// every file was staged. A file's stage renames only over the fileid.Identity
// its id holds when the rename comes (set once the file is read).
func stageAgain(files []*replayFile) (wait func() bool) {
	var failed atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		commit.InParallel(len(files), func(k int) {
			r := files[k]
			h := sha256.New()
			staged, err := commit.StageFrom(r.path, io.TeeReader(r.part, h), &r.id)
			switch {
			case err != nil:
				failed.Store(true)
			case hex.EncodeToString(h.Sum(nil)) != r.sum:
				staged.Discard()
				failed.Store(true)
			default:
				r.staged = staged
			}
		})
	}()
	return func() bool {
		<-done
		return !failed.Load()
	}
}

// writeAgain commits the staged files as a first start's commit does
// (see commit): renamed into place in order, each only while it is still
// the file read; then read back. A failed rename restores the files
// renamed, from the files read.
func writeAgain(files []*replayFile, buf []byte) bool {
	var renamed []*replayFile
	for _, r := range files {
		if err := commit.Rename(r.staged); err != nil {
			// The staged files are discarded by the caller (the
			// renamed ones no longer exist as such).
			for i := len(renamed) - 1; i >= 0; i-- {
				r := renamed[i]
				atomicfile.Write(r.path, io.NewSectionReader(r.read, 0, r.id.Size), atomicfile.Options{KeepOwner: true, BeforeRename: commit.StillRead(r.path, r.renamed)})
			}
			return false
		}
		r.renamed, _ = fileid.Lstat(r.path)
		renamed = append(renamed, r)
	}
	for _, r := range files {
		id, ok := source.Hashes(r.path, r.sum, buf)
		if !ok {
			return false // another writer's now: not restored
		}
		r.final = id
	}
	return true
}
