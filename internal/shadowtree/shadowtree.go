// Package shadowtree answers how the files of a package directory that
// cannot be written in place (a read-only mount, another owner) are put
// in force anyway: a tree of the package's own in a directory infera-exec
// owns, whose directories on the way to the files to be edited are real
// directories holding real copies of those files, and whose every other
// entry is a symbolic link to the image's entry. An interpreter with the
// tree's root first on sys.path imports the package from the tree: the
// copies (which can then be patched as files of infera-exec's own) and,
// through the links, every other module, data file, extension module and
// subpackage of the image unchanged. The package's __file__ and
// __path__ are in the tree (Python does not resolve links there), so
// data read relative to them is read through the links too.
//
// A tree is built once per content of what it mirrors: its name carries a
// digest of the package directory's path, the entries of every directory
// it makes real, and the size, mode and modification time of every file
// it copies (what a new container layer of the same image keeps). It is
// built beside its final name and renamed into place complete, so a tree
// under its final name is always whole; a later start with the same
// inputs finds it and uses it as it is (the patches in it are then
// already applied); one with other inputs builds another.
package shadowtree

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/elfload"
)

// format changes when the layout of a tree changes, so that a tree of an
// older infera-exec is not taken for one of this.
const format = "1"

// maxCopy caps a file copied into a tree: an engine source file.
const maxCopy = 16 << 20

// Spec is the package to mirror.
type Spec struct {
	Pkg   string   // the package directory, as the worker's interpreter imports it (absolute)
	Name  string   // its import name: the tree's top directory
	Files []string // paths relative to Pkg to copy as real files; those absent from Pkg are left out
	// Beside are entries of Pkg's parent linked at the tree's root
	// beside the package (its distribution's .dist-info), so that
	// importlib.metadata finds the same metadata first and its files
	// resolve to what the worker imports.
	Beside []string
}

// Tree is a shadow tree under its final name.
type Tree struct {
	Root   string   `json:"root"`   // what goes first on sys.path (PYTHONPATH)
	Dir    string   `json:"dir"`    // Root/Name: the package directory in the tree
	Copied []string `json:"copied"` // the files copied, relative to Dir
	Reused bool     `json:"reused"` // found whole, built by an earlier start
	// Notes name what may not work through the tree: an extension module
	// linked in a directory the tree makes real whose DT_RUNPATH (or
	// DT_RPATH) climbs out of the package through $ORIGIN. The dynamic
	// loader takes $ORIGIN from the path it opened (the link's, in the
	// tree), so it looks for those libraries beside the tree, where they
	// are not; one already loaded by its soname (torch's, once torch is
	// imported) is found anyway.
	Notes []string `json:"notes,omitempty"`
}

// Find returns the tree of s under parent when one was made for the
// package's present content (found), without making one.
func Find(parent string, s Spec) (t *Tree, found bool, err error) {
	t, _, err = locate(parent, s)
	if err != nil {
		return nil, false, err
	}
	st, err := os.Lstat(t.Root)
	if err != nil {
		return t, false, nil
	}
	if err := ours(t.Root, st); err != nil {
		return nil, false, err
	}
	t.Reused = true
	return t, true, nil
}

func locate(parent string, s Spec) (*Tree, *inputs, error) {
	if !filepath.IsAbs(s.Pkg) || s.Name == "" || strings.ContainsRune(s.Name, '/') {
		return nil, nil, fmt.Errorf("shadow tree of %q (%s): want an absolute package directory and a plain name", s.Pkg, s.Name)
	}
	in, err := readInputs(s)
	if err != nil {
		return nil, nil, err
	}
	root := filepath.Join(parent, s.Name+"-"+in.key[:20])
	return &Tree{Root: root, Dir: filepath.Join(root, s.Name), Copied: in.files, Notes: in.notes}, in, nil
}

// Ensure returns the tree of s under parent (a directory of infera-exec's
// own, not writable by others), building it when there is none for the
// package's present content. It never changes anything of s.Pkg.
func Ensure(parent string, s Spec) (*Tree, error) {
	t, in, err := locate(parent, s)
	if err != nil {
		return nil, err
	}
	root := t.Root
	if st, err := os.Lstat(root); err == nil {
		if err := ours(root, st); err != nil {
			return nil, err
		}
		t.Reused = true
		return t, nil
	}
	tmp, err := os.MkdirTemp(parent, "."+s.Name+"-"+in.key[:20]+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("shadow tree of %s: %w", s.Pkg, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := build(tmp, s, in); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("shadow tree of %s: %w", s.Pkg, err)
	}
	if err := os.Rename(tmp, root); err != nil {
		os.RemoveAll(tmp)
		if st, lerr := os.Lstat(root); lerr == nil && ours(root, st) == nil {
			t.Reused = true // another start built the same one first
			return t, nil
		}
		return nil, fmt.Errorf("shadow tree of %s: %w", s.Pkg, err)
	}
	return t, nil
}

// ours refuses a tree that is not a real directory of this user, closed
// to others.
func ours(path string, st fs.FileInfo) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || st.Mode()&fs.ModeSymlink != 0 || !ok {
		return fmt.Errorf("shadow tree %s is not a directory", path)
	}
	if int(sys.Uid) != os.Geteuid() || sys.Mode&0o022 != 0 {
		return fmt.Errorf("shadow tree %s is not infera-exec's own (uid %d, mode %04o)", path, sys.Uid, sys.Mode&0o7777)
	}
	return nil
}

// entry is one entry of a directory the tree makes real.
type entry struct {
	name string
	mode fs.FileMode // type bits
}

// inputs is what a tree mirrors, read from the image.
type inputs struct {
	dirs  map[string][]entry // the directories made real, relative to Pkg ("." first), with their entries
	order []string           // dirs, parents before children
	files []string           // the files copied, relative to Pkg
	skip  map[string]bool    // entries of a real __pycache__ left out: the bytecode of copied modules
	key   string
	notes []string
}

func readInputs(s Spec) (*inputs, error) {
	in := &inputs{dirs: map[string][]entry{}, skip: map[string]bool{}}
	h := sha256.New()
	fmt.Fprintf(h, "shadowtree %s\x00%s\x00%s\x00", format, s.Pkg, s.Name)
	var real []string
	for _, f := range slices.Sorted(slices.Values(s.Files)) {
		f = filepath.Clean(f)
		if f == "." || strings.HasPrefix(f, "../") || filepath.IsAbs(f) || slices.Contains(in.files, f) {
			continue
		}
		st, err := os.Stat(filepath.Join(s.Pkg, f))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file", filepath.Join(s.Pkg, f))
		}
		in.files = append(in.files, f)
		fmt.Fprintf(h, "F%s\x00%d %o %d\x00", f, st.Size(), st.Mode(), st.ModTime().UnixNano())
		for d := filepath.Dir(f); ; d = filepath.Dir(d) {
			real = append(real, d)
			if d == "." {
				break
			}
		}
		// The copied module's bytecode would be stale: its __pycache__
		// is made real too, without it.
		dir, base := filepath.Dir(f), filepath.Base(f)
		if stem, ok := strings.CutSuffix(base, ".py"); ok {
			pc := filepath.Join(dir, "__pycache__")
			if st, err := os.Stat(filepath.Join(s.Pkg, pc)); err == nil && st.IsDir() {
				real = append(real, pc)
				in.skip[filepath.Join(pc, stem)] = true
			}
		}
	}
	if len(in.files) == 0 {
		return nil, fmt.Errorf("shadow tree of %s: none of the files to copy is there", s.Pkg)
	}
	slices.SortFunc(real, func(a, b string) int {
		if c := strings.Count(a, "/") - strings.Count(b, "/"); a != "." && b != "." && c != 0 {
			return c
		}
		if a == "." {
			return -1
		}
		if b == "." {
			return 1
		}
		return strings.Compare(a, b)
	})
	in.order = slices.Compact(real)
	for _, d := range in.order {
		ents, err := os.ReadDir(filepath.Join(s.Pkg, d))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "D%s\x00", d)
		for _, e := range ents {
			in.dirs[d] = append(in.dirs[d], entry{name: e.Name(), mode: e.Type()})
			fmt.Fprintf(h, "%s %o\x00", e.Name(), e.Type())
			if e.Type().IsRegular() && elfload.IsLibraryName(e.Name()) {
				in.notes = append(in.notes, originEscapes(s.Pkg, filepath.Join(d, e.Name()))...)
			}
		}
	}
	for _, b := range slices.Sorted(slices.Values(s.Beside)) {
		fmt.Fprintf(h, "B%s\x00", b)
	}
	in.key = hex.EncodeToString(h.Sum(nil))
	return in, nil
}

// build makes the tree of s in dir (empty, this user's).
func build(dir string, s Spec, in *inputs) error {
	top := filepath.Join(dir, s.Name)
	realDir := map[string]bool{}
	for _, d := range in.order {
		realDir[d] = true
	}
	copied := map[string]bool{}
	for _, f := range in.files {
		copied[f] = true
	}
	for _, d := range in.order {
		if err := os.Mkdir(filepath.Join(top, d), 0o755); err != nil && !(d == "." && errors.Is(err, fs.ErrExist)) {
			return err
		}
		for _, e := range in.dirs[d] {
			rel := filepath.Join(d, e.name)
			switch {
			case realDir[rel] && e.mode.IsDir():
				continue // made in its turn
			case copied[rel]:
				if err := copyFile(filepath.Join(s.Pkg, rel), filepath.Join(top, rel)); err != nil {
					return err
				}
			case filepath.Base(d) == "__pycache__" && in.skip[filepath.Join(d, strings.SplitN(e.name, ".", 2)[0])]:
				continue
			default:
				if err := os.Symlink(filepath.Join(s.Pkg, rel), filepath.Join(top, rel)); err != nil {
					return err
				}
			}
		}
	}
	parent := filepath.Dir(s.Pkg)
	for _, b := range s.Beside {
		if b == "" || strings.ContainsRune(b, '/') || b == s.Name {
			continue
		}
		if err := os.Symlink(filepath.Join(parent, b), filepath.Join(dir, b)); err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies a regular file of the image into the tree with its
// permission bits, as a new file (never through a link at the name).
func copyFile(from, to string) error {
	f, err := boundedread.Open(from, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	data, err := boundedread.ReadAll(f, from, maxCopy)
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, st.Mode().Perm()|0o200)
	if err != nil {
		return err
	}
	if _, err := out.Write(data); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(st.Mode().Perm()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Blocked is why the files of dir (relative paths) cannot be written in
// place by this process: a directory holding one of them that it may not
// write (a read-only mount: EROFS; permissions: EACCES, EPERM), or, for a
// process that is not root, a file of another owner (a rename over it
// would lose its owner). nil when each file there can be; absent files
// are passed over.
func Blocked(dir string, files []string) error {
	euid := os.Geteuid()
	for _, f := range files {
		p := filepath.Join(dir, f)
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				continue
			}
			return fmt.Errorf("%s cannot be written in place: %w", p, err)
		}
		d := filepath.Dir(p)
		if err := unix.Access(d, unix.W_OK); err != nil {
			if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				return fmt.Errorf("%s cannot be written in place: %w", d, err)
			}
			continue
		}
		if euid != 0 && int(st.Uid) != euid {
			return fmt.Errorf("%s belongs to uid %d, not to uid %d that infera-exec runs as", p, st.Uid, euid)
		}
	}
	return nil
}

// originEscapes says which $ORIGIN entries of the search path of the
// shared object rel (relative to pkg) lead out of pkg.
func originEscapes(pkg, rel string) []string {
	o, err := elfload.Read(filepath.Join(pkg, rel))
	if err != nil {
		return nil
	}
	dirs := o.RunPath
	if len(dirs) == 0 {
		dirs = o.RPath
	}
	var out []string
	for _, d := range dirs {
		rest, ok := strings.CutPrefix(d, "$ORIGIN")
		if !ok {
			rest, ok = strings.CutPrefix(d, "${ORIGIN}")
		}
		if !ok {
			continue
		}
		if to := filepath.Join(filepath.Dir(rel), "./"+rest); to == ".." || strings.HasPrefix(to, "../") {
			out = append(out, fmt.Sprintf("%s searches %s, out of the package: through the shadow tree's link the loader looks beside the tree instead, and finds there no library that is not already loaded", filepath.Join(pkg, rel), d))
		}
	}
	return out
}

// StaleAfter is how old a tree left half-built (by a start that was
// killed) must be before Sweep removes it: far longer than any build.
const StaleAfter = time.Minute

// Sweep removes from parent the trees that a killed start left half-built
// (".NAME-KEY.tmp-N"), by proof: a directory of that name, of this user,
// older than StaleAfter. Removal never follows a link. It returns what it
// removed.
func Sweep(parent string) []string {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, ".") || !strings.Contains(n, ".tmp-") || !e.IsDir() {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < StaleAfter {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if os.RemoveAll(filepath.Join(parent, n)) == nil {
			removed = append(removed, n)
		}
	}
	return removed
}
