package patches

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/statedir"
	"github.com/infera/infera-exec/patches/patchdef"
	"golang.org/x/sys/unix"
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

// pristineFile is what a file the recorded run wrote held before the
// write (the portable part of the identity read, the SHA-256 of the
// content read), and where the content it wrote is in the record's blob
// (its SHA-256 is the record entry's Sum).
type pristineFile struct {
	ID      identity  `json:"id"`
	Sum     string    `json:"sum"`
	Written blobRange `json:"written"`
}

// blobRange is a part of the blob beside a record.
type blobRange struct {
	Off int    `json:"off"`
	Len int    `json:"len"`
	Sum string `json:"sum,omitempty"` // its SHA-256, when no other field holds it
}

// section is the part of parts (a blob's) that r names; false when r
// reaches past it (a blob torn by a crash: it is written without fsync)
// or is longer than limit.
func (r blobRange) section(parts *io.SectionReader, limit int) (*io.SectionReader, bool) {
	if r.Off < 0 || r.Len < 0 || r.Len > limit || int64(r.Off) > parts.Size()-int64(r.Len) {
		return nil, false
	}
	return io.NewSectionReader(parts, int64(r.Off), int64(r.Len)), true
}

// blobName is the name of the blob beside the record file.
func blobName(recordFile string) string {
	return strings.TrimSuffix(filepath.Base(recordFile), ".json") + ".blob"
}

// keepReplay adds to rec what the run wrote (wrote, with res its
// results): what each written file held before and, with blob, what a
// start needs to write it again: each written file's content and the
// results, in a blob written beside the record first. It adds nothing
// when some file an applied patch edits is neither among them nor a file
// the record names, or when a file among them is not in the record.
//
// The blob (the engine files' size) is written only by a run that found
// the files pristine again under a record of their writing (a new
// container layer of the same image: what a replay is for); a first start
// keeps what they held before, which costs it nothing, so that the first
// such restart knows it is one.
func keepReplay(rec *record, file string, res []Result, wrote []*diskFile, blob bool) {
	if len(wrote) == 0 {
		return
	}
	written := map[string]*diskFile{}
	for _, d := range wrote {
		written[d.path] = d
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
			if i, ok := at[e.Path]; e.State != patchdef.NotApplicable && written[e.Path] == nil && (!ok || rec.Files[i].Type) {
				return
			}
		}
	}
	var parts []string
	kept := map[int]*pristineFile{}
	off := 0
	for _, d := range wrote {
		i, ok := at[d.path]
		if !ok || rec.Files[i].Type || rec.Files[i].Sum != d.sums.of(d.cur) {
			return
		}
		kept[i] = &pristineFile{ID: d.id.Portable(), Sum: d.sums.of(d.data), Written: blobRange{Off: off, Len: len(d.cur)}}
		parts = append(parts, d.cur)
		off += len(d.cur)
	}
	if blob {
		results, err := json.Marshal(withoutPycs(res))
		if err != nil {
			return
		}
		h := sha256.Sum256(results)
		rec.Wrote = &blobRange{Off: off, Len: len(results), Sum: hex.EncodeToString(h[:])}
		parts = append(parts, unsafe.String(unsafe.SliceData(results), len(results)))
		statedir.WriteBlob(filepath.Dir(file), blobName(file), parts)
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
	id      identity // of read, as it was read
	part    *io.SectionReader
	sum     string // of part, the record entry's Sum
	staged  *atomicfile.Staged
	renamed identity // right after the rename
	final   identity // read back
}

// replay writes again, as one group, the recorded files at idx, which
// hold by their portable identity what the recorded run read, and
// returns that run's results as this start's, or ok false when it did
// not write them all (the full check then decides, on the files as they
// are). renew says whether rec, updated with what it wrote, may be kept.
//
// Every byte goes through one small buffer (and the kernel's copies): a
// file is hashed as it is read, the blob's part as it is staged, the
// written file as it is read back; no file is held in memory whole.
func replay(file string, rec *record, idx []int, loc *Location, set *patchdef.Set, opt options) (res []Result, ok, renew bool) {
	parts, closeBlob, ok := statedir.OpenBlob(opt.StateDir, blobName(file))
	if !ok {
		return nil, false, false
	}
	defer closeBlob()
	// The results, a few kilobytes, are read whole; a torn blob, or
	// another run's, fails their SHA-256 (a written file's part, staged
	// below, its own).
	var wrote []Result
	sec, ok := rec.Wrote.section(parts, maxStateBytes)
	if !ok {
		return nil, false, false
	}
	b := make([]byte, rec.Wrote.Len)
	if _, err := io.ReadFull(sec, b); err != nil {
		return nil, false, false
	}
	if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != rec.Wrote.Sum || json.Unmarshal(b, &wrote) != nil || len(wrote) != len(set.Defs) {
		return nil, false, false
	}
	for i, d := range set.Defs {
		if wrote[i].ID != d.ID {
			return nil, false, false
		}
	}
	var dirs []string
	for _, p := range loc.Packages {
		for _, i := range idx {
			if p.Found && strings.HasPrefix(rec.Files[i].Path, p.Dir+string(filepath.Separator)) && !slices.Contains(dirs, p.Dir) {
				dirs = append(dirs, p.Dir)
			}
		}
	}
	unlocked, release := lockDirs(opt.Stop, dirs, opt.LockTimeout)
	defer release()
	if len(dirs) == 0 || len(unlocked) > 0 {
		return nil, false, false
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
		part, ok := f.Pristine.Written.section(parts, maxSourceBytes)
		if !ok {
			return nil, false, false
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
		read, id, sum, err := hashOpen(files[k].path, buf)
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
		return nil, false, false
	}
	for k, i := range idx {
		rec.Files[i].ID = files[k].final
	}
	renew = true

	// The bytecode of the edited modules, as after the recorded run's
	// write (checkBytecode): every .pyc of a written module goes, and the
	// unchecked-hash ones of the others; one that cannot go makes its
	// patch shadowed, and the run unrecorded.
	written := map[string]*target{}
	for _, r := range files {
		written[r.path] = &target{path: r.path, id: r.final, verified: true}
	}
	res = wrote
	for i, d := range set.Defs {
		r := &res[i]
		r.Required = d.Required || opt.Require[d.ID]
		r.Replayed = r.Action == "applied"
		if r.State == patchdef.Applied {
			checkBytecode(r, written, r.Action == "applied", false, nil)
			renew = renew && r.State != patchdef.Shadowed
		}
	}
	for i, f := range rec.Files {
		if f.PyCache {
			rec.Files[i].ID, _ = fileid.Lstat(f.Path)
		}
	}
	return res, true, renew
}

// hashOpen opens path as readSource does (stableOpen), hashes it through
// buf, within maxSourceBytes, and returns it open, with the identity it
// had while it was read and its SHA-256.
func hashOpen(path string, buf []byte) (*os.File, identity, string, error) {
	h := sha256.New()
	f, id, err := stableOpen(path, func(f *os.File, st *unix.Stat_t) error {
		if st.Size > maxSourceBytes {
			return &boundedread.Error{Path: path, Cap: maxSourceBytes, Err: boundedread.ErrTooLarge}
		}
		// A LimitedReader, which has no WriteTo: the copy goes through
		// buf (the file's own WriteTo would make a buffer of its own).
		_, err := io.CopyBuffer(h, io.LimitReader(f, st.Size+1), buf)
		return err
	})
	if err != nil {
		return nil, identity{}, "", err
	}
	return f, id, hex.EncodeToString(h.Sum(nil)), nil
}

// stageAgain starts staging each file's part of the blob, as a first
// start's commit stages (a few at a time, fsynced), each checked against
// its sum as it is written, and returns the wait for them all: true when
// every file was staged. A file's stage renames only over the identity
// its id holds when the rename comes (set once the file is read).
func stageAgain(files []*replayFile) (wait func() bool) {
	var failed atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		inParallel(len(files), func(k int) {
			r := files[k]
			h := sha256.New()
			staged, err := stageFrom(r.path, io.TeeReader(r.part, h), &r.id)
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
		if err := renameFile(r.staged); err != nil {
			// The staged files are discarded by the caller (the
			// renamed ones no longer exist as such).
			for i := len(renamed) - 1; i >= 0; i-- {
				r := renamed[i]
				atomicfile.Write(r.path, io.NewSectionReader(r.read, 0, r.id.Size), atomicfile.Options{KeepOwner: true, BeforeRename: stillRead(r.path, r.renamed)})
			}
			return false
		}
		r.renamed, _ = fileid.Lstat(r.path)
		renamed = append(renamed, r)
	}
	for _, r := range files {
		id, ok := hashesAs(r.path, r.sum, buf)
		if !ok {
			return false // another writer's now: not restored
		}
		r.final = id
	}
	return true
}

// hashesAs reports whether the regular file at path has the SHA-256 sum,
// read through buf, and its identity when it has.
func hashesAs(path, sum string, buf []byte) (identity, bool) {
	f, id, got, err := hashOpen(path, buf)
	if err != nil {
		return identity{}, false
	}
	f.Close()
	return id, got == sum
}
