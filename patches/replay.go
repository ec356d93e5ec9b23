package patches

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/statedir"
	"github.com/infera/infera-exec/patches/patchdef"
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

// in returns the part of blob r names when its SHA-256 is sum; a blob
// torn by a crash (it is written without fsync) or another run's is not
// taken.
func (r blobRange) in(blob []byte, sum string) ([]byte, bool) {
	if r.Off < 0 || r.Len < 0 || r.Off > len(blob)-r.Len {
		return nil, false
	}
	b := blob[r.Off : r.Off+r.Len]
	h := sha256.Sum256(b)
	return b, hex.EncodeToString(h[:]) == sum
}

// maxBlobBytes caps the blob read back: the written engine files.
const maxBlobBytes = 64 << 20

// blobName is the name of the blob beside the record file.
func blobName(recordFile string) string {
	return strings.TrimSuffix(filepath.Base(recordFile), ".json") + ".blob"
}

// keepReplay adds to rec what a start needs to write again what this run
// wrote (wrote, with res its results): each written file's content, in a
// blob written beside the record first, and what the file held before.
// It adds nothing when some file a patch of the run applied is not among
// them, or not in the record.
func keepReplay(rec *record, file string, res []Result, wrote []*diskFile) {
	if len(wrote) == 0 {
		return
	}
	written := map[string]*diskFile{}
	for _, d := range wrote {
		written[d.path] = d
	}
	for _, r := range res {
		if r.Action != "applied" {
			continue
		}
		for _, e := range r.Edits {
			if e.State != patchdef.NotApplicable && written[e.Path] == nil {
				return
			}
		}
	}
	at := map[string]int{}
	for i, f := range rec.Files {
		at[f.Path] = i
	}
	var blob []string
	kept := map[int]*pristineFile{}
	off := 0
	for _, d := range wrote {
		i, ok := at[d.path]
		if !ok || rec.Files[i].Type || rec.Files[i].Sum != d.sums.of(d.cur) {
			return
		}
		kept[i] = &pristineFile{ID: d.id.Portable(), Sum: d.sums.of(d.data), Written: blobRange{Off: off, Len: len(d.cur)}}
		blob = append(blob, d.cur)
		off += len(d.cur)
	}
	results, err := json.Marshal(withoutPycs(res))
	if err != nil {
		return
	}
	h := sha256.Sum256(results)
	rec.Wrote = &blobRange{Off: off, Len: len(results), Sum: hex.EncodeToString(h[:])}
	blob = append(blob, unsafe.String(unsafe.SliceData(results), len(results)))
	statedir.WriteBlob(filepath.Dir(file), blobName(file), blob)
	rec.Files = slices.Clone(rec.Files)
	for i, p := range kept {
		rec.Files[i].Pristine = p
	}
}

// replay writes again, as one group, the recorded files at idx, which
// hold by their portable identity what the recorded run read, and
// returns that run's results as this start's, or ok false when it did
// not write them all (the full check then decides, on the files as they
// are). renew says whether rec, updated with what it wrote, may be kept.
func replay(file string, rec *record, idx []int, loc *Location, set *patchdef.Set, opt options) (res []Result, ok, renew bool) {
	blob, ok := statedir.ReadBlob(opt.StateDir, blobName(file), maxBlobBytes)
	if !ok {
		return nil, false, false
	}
	var wrote []Result
	if b, ok := rec.Wrote.in(blob, rec.Wrote.Sum); !ok || json.Unmarshal(b, &wrote) != nil || len(wrote) != len(set.Defs) {
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
	unlocked, release := lockDirs(dirs, opt.LockTimeout)
	defer release()
	if len(dirs) == 0 || len(unlocked) > 0 {
		return nil, false, false
	}
	g := &group{}
	for _, i := range idx {
		f := rec.Files[i]
		p := f.Pristine
		b, ok := p.Written.in(blob, f.Sum)
		if !ok {
			return nil, false, false
		}
		// The blob is this call's own and never written: the content
		// shares its bytes.
		cur := unsafe.String(unsafe.SliceData(b), len(b))
		data, id, sum, err := readSource(f.Path, maxSourceBytes)
		if err != nil || sum != p.Sum || id.Portable() != p.ID {
			return nil, false, false
		}
		atomicfile.RemoveStale(f.Path)
		g.files = append(g.files, &diskFile{path: f.Path, data: unsafe.String(unsafe.SliceData(data), len(data)), id: id, cur: cur, changed: true})
	}
	commit([]*group{g}, nil, make([]byte, 64<<10))
	if g.err != nil {
		return nil, false, false
	}
	for k, i := range idx {
		rec.Files[i].ID = g.files[k].final
	}
	renew = true

	// The bytecode of the edited modules, as after the recorded run's
	// write (checkBytecode): every .pyc of a written module goes, and the
	// unchecked-hash ones of the others; one that cannot go makes its
	// patch shadowed, and the run unrecorded.
	written := map[string]*target{}
	for _, d := range g.files {
		written[d.path] = &target{path: d.path, id: d.final, verified: true}
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
