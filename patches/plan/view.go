package plan

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"

	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/commit"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/source"
)

// identity is a file's identity (package fileid).
type identity = fileid.Identity

type target struct {
	path     string // real path, inside the package
	original string
	content  string
	exists   bool
	mode     iofs.FileMode
	direct   bool     // path is the package directory joined with the file: no symlink on the way
	id       identity // as read, or after this run's verified write
	verified bool     // id is known to be the identity of content
	disk     *DiskFile
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
	return HashContent(s)
}

// Files is what one patch read, by real path, in reading order.
type Files struct {
	m     map[string]*target
	order []string
	v     *View
	// unread is set when a file could not be resolved or read: its
	// identity is not in m, so the record cannot vouch for the run.
	unread bool
	// probes and dirs are what was consulted to tell which file the
	// import system loads for each edited module (see importer).
	probes, dirs []string
}

// View is a run's reading of the engine files: each is read from disk
// once, and, when compose is set (a run that writes), a patch sees what
// the earlier patches of the run planned for it.
type View struct {
	compose bool
	disk    map[string]*DiskFile // by real path
	changed []*DiskFile          // planned to change, in order of first change
	real    map[string]realPath  // EvalSymlinks of each path asked, once per run
	minor   int                  // the worker's CPython 3.minor; 0 = unknown (see importer)
	written *View                // the files as written and read back (see AsWritten), once asked
	needles *needles             // what the definitions look for (see text)
	types   *typeCache           // what stat(2) said of each path the importer probed (shared with written)
	sums    *contentSums         // the SHA-256 of each content hashed (shared with written)
}

// contentSums is the SHA-256 of each content a run has hashed, by where
// the content is in memory: what was read (hashed as it was read), each
// patch's planned content, the contents written. A content is hashed once
// per run, however many patches and views (AsWritten's) ask for it: a
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

// HashContent is digest.String; a variable so tests can count the hashes.
var HashContent = digest.String

func keyOfContent(s string) contentKey { return contentKey{unsafe.StringData(s), len(s)} }

// of is digest.String(s), once per content and run.
func (c *contentSums) of(s string) string {
	if c == nil {
		return HashContent(s)
	}
	k := keyOfContent(s)
	sum, ok := c.m[k]
	if !ok {
		sum = HashContent(s)
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

// NewView is a run's view of the engine files, for the definitions of
// set: compose for a run that writes (each patch sees what the earlier ones
// planned), minor the worker's CPython 3.minor (0 = unknown).
func NewView(compose bool, minor int, set *patchdef.Set) *View {
	return newView(compose, minor, needlesOf(set))
}

// Fresh is a new view for the same run: the same definitions and
// interpreter, every file read again.
func (v *View) Fresh(compose bool) *View { return newView(compose, v.minor, v.needles) }

// Changed are the files some patch of the run planned to change, in order
// of first change.
func (v *View) Changed() []*DiskFile { return v.changed }

func newView(compose bool, minor int, nd *needles) *View {
	return &View{compose: compose, minor: minor, needles: nd, disk: map[string]*DiskFile{}, real: map[string]realPath{},
		types: newTypeCache(), sums: newContentSums()}
}

// evalSymlinks is filepath.EvalSymlinks, once per path and run: every
// variant and guard of every patch resolves the same few files, and each
// resolution is an lstat of every component of a deep path.
func (v *View) evalSymlinks(p string) (string, error) {
	r, ok := v.real[p]
	if !ok {
		r.path, r.err = filepath.EvalSymlinks(p)
		v.real[p] = r
	}
	return r.path, r.err
}

// Unread reports whether a file could not be resolved or read: its
// identity is unknown, so the record cannot vouch for the run.
func (fs *Files) Unread() bool { return fs.unread }

// Len is how many files the patch read (or found absent).
func (fs *Files) Len() int { return len(fs.m) }

// Each calls f for each file the patch read (or found absent), by real
// path in sorted order: whether it was reached without a symlink, its
// identity and whether that is known to be the identity of the content
// the patch was decided on, and (for a file that exists) sum, the content
// digest of the content the run planned last (see DiskFile.sum).
func (fs *Files) Each(f func(path string, direct, verified bool, id fileid.Identity, sum func() string)) {
	paths := make([]string, 0, len(fs.m))
	for p := range fs.m {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		t := fs.m[p]
		var sum func() string
		if d := t.disk; d != nil {
			sum = d.sum
		}
		f(p, t.direct, t.verified, t.id, sum)
	}
}

// Order is the real paths of the files the patch read, in reading order.
func (fs *Files) Order() []string { return fs.order }

// Probes are the paths whose type decided which file the import system
// loads for each edited module; TypeOf is that type as the run saw it.
func (fs *Files) Probes() []string { return fs.probes }

// Dirs are the directories searched by pattern for an interpreter of
// unknown minor.
func (fs *Files) Dirs() []string { return fs.dirs }

// TypeOf is what stat(2) said of path (a probe) in this run.
func (fs *Files) TypeOf(path string) (fileid.Identity, bool) { return fs.v.types.stat(path) }

// DiskFile is one engine file in a run: as read, as planned, as written.
type DiskFile struct {
	path string
	data string       // as read
	id   identity     // of data
	cur  string       // after the patches planned so far
	text *text        // index of cur
	sums *contentSums // the run's: the SHA-256 of data, cur, and every content planned
	// changed: some patch of the run planned a new content (cur may
	// still equal data, when a later patch undid it).
	changed bool

	// w is its write, once the run stages or commits one (CommitFile):
	// what it read, the content planned, and, after the commit, the
	// identity on disk.
	w *commit.File

	sumOf, sumCur string // fileid.SumBytes of a cur over fileid.SmallFile, once computed (sumOf: the cur it is of)
}

// Path is the file's real path.
func (d *DiskFile) Path() string { return d.path }

// Read is the content as read.
func (d *DiskFile) Read() string { return d.data }

// ReadID is the identity of the content as read.
func (d *DiskFile) ReadID() fileid.Identity { return d.id }

// Planned is the content after the patches planned so far.
func (d *DiskFile) Planned() string { return d.cur }

// Sums are the SHA-256 of the content as read and as planned.
func (d *DiskFile) Sums() (read, planned string) { return d.sums.of(d.data), d.sums.of(d.cur) }

// Staged is the file's write once the run staged or committed one; nil
// before.
func (d *DiskFile) Staged() *commit.File { return d.w }

// sum is the content digest of cur, as the record keeps it (the same
// SHA-256 as the edits' hashes for any source under fileid.SmallFile).
func (d *DiskFile) sum() string {
	if len(d.cur) <= fileid.SmallFile {
		return d.sums.of(d.cur)
	}
	if d.sumCur == "" || d.sumOf != d.cur {
		d.sumCur, d.sumOf = fileid.SumBytes([]byte(d.cur)), d.cur
	}
	return d.sumCur
}

// CommitFile is the file's write, with the content planned so far.
func (d *DiskFile) CommitFile() *commit.File {
	if d.w == nil {
		d.w = &commit.File{Path: d.path, Read: d.data, ReadID: d.id}
	}
	d.w.Content = d.cur
	return d.w
}

// Final is the identity on disk after the commit, and whether it is
// known to be the identity of cur.
func (d *DiskFile) Final() (fileid.Identity, bool) {
	if d.w == nil || d.w.Content != d.cur {
		return identity{}, false
	}
	return d.w.Final, d.w.FinalOK
}

// Settle discards an early stage the commit did not take.
func (d *DiskFile) Settle() {
	if d.w != nil {
		d.w.Settle()
	}
}

// target is this file as the next patch of the run sees it.
func (d *DiskFile) target(direct bool) *target {
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

// resolve finds file inside the package (the first portion that has it, for
// a namespace package) and reads it once per run (see view). A path that
// leaves the package directory through a symlink is refused: writing there
// would change a file the definition never named.
func resolve(pkg Package, file string, fs *Files) (t *target, err error) {
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
			data, id, sum, err := source.Read(real, source.MaxBytes)
			if err != nil {
				return nil, err
			}
			// The string shares data's bytes: data is this read's own and
			// never written, and a copy would touch as many fresh pages
			// again (engine modules are hundreds of kilobytes).
			d = &DiskFile{path: real, data: unsafe.String(unsafe.SliceData(data), len(data)), id: id, sums: fs.v.sums}
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
