package patches

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/commit"
	"github.com/infera/infera-exec/patches/source"
)

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

	// w is its write, once the run stages or commits one (commitFile):
	// what it read, the content planned, and, after the commit, the
	// identity on disk.
	w *commit.File

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

// commitFile is the file's write, with the content planned so far.
func (d *diskFile) commitFile() *commit.File {
	if d.w == nil {
		d.w = &commit.File{Path: d.path, Read: d.data, ReadID: d.id}
	}
	d.w.Content = d.cur
	return d.w
}

// final is the identity on disk after the commit, and whether it is
// known to be the identity of cur.
func (d *diskFile) final() (identity, bool) {
	if d.w == nil || d.w.Content != d.cur {
		return identity{}, false
	}
	return d.w.Final, d.w.FinalOK
}

// settle discards an early stage the commit did not take.
func (d *diskFile) settle() {
	if d.w != nil {
		d.w.Settle()
	}
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
			data, id, sum, err := source.Read(real, maxSourceBytes)
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
