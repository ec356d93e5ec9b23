package elfload

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/internal/boundedread"
)

// DefaultDirs are the directories the dynamic loader searches after its
// cache, as container paths: Debian's multiarch directories, the lib64
// layout of RPM distributions, then the plain ones. glibc builds compile
// in one of these sets; the union costs a few failed stats.
func DefaultDirs() []string {
	t := Triplet()
	return []string{"/lib/" + t, "/usr/lib/" + t, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
}

// Triplet is the Debian multiarch directory name for this machine's
// architecture (the image runs on the architecture of the binary).
func Triplet() string {
	switch runtime.GOARCH {
	case "arm64":
		return "aarch64-linux-gnu"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	case "s390x":
		return "s390x-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// maxConfDepth bounds ld.so.conf includes (a file that includes itself).
const maxConfDepth = 8

// Loader is how the dynamic loader of a root finds libraries, by its
// rules: DT_RPATH of the object and the objects that loaded it (when the
// object has no DT_RUNPATH), LD_LIBRARY_PATH, DT_RUNPATH ($ORIGIN is the
// directory of the object), the directories of the root's ld.so.conf (what
// ldconfig puts in the cache), and the default directories.
type Loader struct {
	Root        string   // the image root; "/" is the running container
	LibraryPath []string // LD_LIBRARY_PATH, host paths (a payload tree's lib/ first)
	Conf        []string // from Root's /etc/ld.so.conf and what it includes, container paths
	ConfFiles   []string // the configuration files read, host paths

	objs      map[string]readResult
	consulted map[string]bool
}

type readResult struct {
	obj *Object
	err error
}

// NewLoader reads root's loader configuration. A root without
// /etc/ld.so.conf has only the default directories.
func NewLoader(root string, libraryPath []string) *Loader {
	if root == "" {
		root = "/"
	}
	l := &Loader{Root: root, LibraryPath: libraryPath, objs: map[string]readResult{}, consulted: map[string]bool{}}
	l.readConf("/etc/ld.so.conf", 0)
	return l
}

// host is a container path of the root as a path of this machine.
func (l *Loader) host(p string) string {
	if l.Root == "/" {
		return filepath.Clean(p)
	}
	return filepath.Join(l.Root, p)
}

func (l *Loader) resolve(p string) (string, error) {
	if l.Root == "/" {
		return p, nil
	}
	return ResolveIn(l.Root, p)
}

// readConf reads one ld.so.conf file: directories separated by blanks,
// ':' or ','; "include GLOB" (relative to the including file's
// directory), "hwcap" lines, '#' comments.
func (l *Loader) readConf(file string, depth int) {
	if depth > maxConfDepth {
		return
	}
	hp, err := l.resolve(l.host(file))
	if err != nil {
		return
	}
	data, err := boundedread.File(hp, 1<<20)
	if err != nil {
		return
	}
	l.ConfFiles = append(l.ConfFiles, hp)
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ':' || r == ',' || r == '\r' })
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "include":
			for _, pat := range f[1:] {
				if !strings.HasPrefix(pat, "/") {
					pat = filepath.Join(filepath.Dir(file), pat)
				}
				matches, _ := filepath.Glob(l.host(pat))
				sort.Strings(matches)
				for _, m := range matches {
					rel, err := filepath.Rel(l.host("/"), m)
					if err == nil {
						l.readConf("/"+filepath.ToSlash(rel), depth+1)
					}
				}
			}
		case "hwcap":
		default:
			for _, d := range f {
				if strings.HasPrefix(d, "/") && !slices.Contains(l.Conf, filepath.Clean(d)) {
					l.Conf = append(l.Conf, filepath.Clean(d))
				}
			}
		}
	}
}

// read is Read, once per file.
func (l *Loader) read(p string) (*Object, error) {
	if r, ok := l.objs[p]; ok {
		return r.obj, r.err
	}
	o, err := Read(p)
	l.objs[p] = readResult{o, err}
	l.consulted[p] = true
	return o, err
}

// Consulted are the files and directories whose state decided the
// answers so far: the libraries read, every directory searched, the
// configuration files. An answer stands as long as none of them changed.
func (l *Loader) Consulted() []string {
	out := make([]string, 0, len(l.consulted)+len(l.ConfFiles))
	for p := range l.consulted {
		out = append(out, p)
	}
	for _, p := range l.ConfFiles {
		if !l.consulted[p] {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// Find is where the root's loader finds a library by name without any
// object's own search path: LD_LIBRARY_PATH, ld.so.conf, the default
// directories. "" when it does not.
func (l *Loader) Find(name string) string {
	for _, d := range l.LibraryPath {
		if p := filepath.Join(d, name); l.exists(p) {
			return p
		}
	}
	for _, list := range [][]string{l.Conf, DefaultDirs()} {
		for _, d := range list {
			if p := l.host(filepath.Join(d, name)); l.exists(p) {
				return p
			}
		}
	}
	return ""
}

func (l *Loader) exists(p string) bool {
	real, err := l.resolve(p)
	if err != nil {
		return false
	}
	fi, err := os.Stat(real)
	return err == nil && fi.Mode().IsRegular()
}

// Lib is one library of a closure.
type Lib struct {
	Name     string `json:"name"`      // the DT_NEEDED name
	Path     string `json:"path"`      // where the loader finds it (host path)
	File     string `json:"file"`      // the file that is, symbolic links resolved inside the root
	NeededBy string `json:"needed_by"` // the object whose DT_NEEDED names it
}

// LoadCheck is whether one object loads with everything it needs.
type LoadCheck struct {
	Path      string   `json:"path"`
	OK        bool     `json:"ok"`
	Problems  []string `json:"problems,omitempty"`  // each names the object, then the library or symbol version that is missing
	Libraries []Lib    `json:"libraries,omitempty"` // the closure, in the order the loader reaches it
}

type item struct {
	obj   *Object
	at    string // the path it was found at ($ORIGIN is its directory)
	chain []item // the objects that loaded it, nearest last
}

// nowhere is what the problem of a library not found says after its name.
const nowhere = ", which is nowhere the loader looks ("

// ProblemBrief is a problem of Check in a few words, for a text line: a
// library not found ("AT: needs N, which is nowhere the loader looks
// (WHERE)") is "N not found"; another problem is itself.
func ProblemBrief(p string) string {
	if _, rest, ok := strings.Cut(p, ": needs "); ok {
		if n, _, ok := strings.Cut(rest, nowhere); ok {
			return n + " not found"
		}
	}
	return p
}

// Check loads path as the loader would in the root: every library of its
// DT_NEEDED closure must be found, of the same class and machine, and
// define every symbol version its users need from it (GLIBC_2.x,
// GLIBCXX_3.4.x, IBVERBS_x).
func (l *Loader) Check(path string) *LoadCheck {
	c := &LoadCheck{Path: path}
	obj, err := l.read(path)
	if err != nil {
		c.Problems = append(c.Problems, err.Error())
		return c
	}
	queue := []item{{obj: obj, at: path}}
	seen := map[string]bool{obj.Path: true}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		dirs := l.searchDirs(it)
		checks, _, found := verify(it.obj, Target{Like: obj, LibDirs: dirs, Root: l.Root, read: l.read, Label: it.at})
		for _, ch := range checks {
			switch n, isNeeded := strings.CutPrefix(ch.Name, "needed "); {
			case ch.OK, impliedByMissing(ch, found):
			case isNeeded && found[n].obj == nil && found[n].err == nil:
				msg := fmt.Sprintf("%s: needs %s%s%s)", it.at, n, nowhere, l.where())
				if len(found[n].skipped) > 0 {
					msg += "; passed over " + strings.Join(found[n].skipped, ", ")
				}
				c.Problems = append(c.Problems, msg)
			default:
				c.Problems = append(c.Problems, fmt.Sprintf("%s: %s", it.at, ch.Detail))
			}
		}
		for _, n := range it.obj.Needed {
			fl := found[n]
			if fl.obj == nil || seen[fl.obj.Path] {
				continue
			}
			seen[fl.obj.Path] = true
			c.Libraries = append(c.Libraries, Lib{Name: n, Path: fl.path, File: fl.obj.Path, NeededBy: it.at})
			queue = append(queue, item{obj: fl.obj, at: fl.path, chain: append(slices.Clone(it.chain), it)})
		}
	}
	c.OK = len(c.Problems) == 0
	return c
}

// where says in short where the loader looks, for messages.
func (l *Loader) where() string {
	var parts []string
	if len(l.LibraryPath) > 0 {
		parts = append(parts, "LD_LIBRARY_PATH "+strings.Join(l.LibraryPath, ":"))
	}
	root := "the root's"
	if l.Root != "/" {
		root = l.Root + "'s"
	}
	if len(l.ConfFiles) > 0 {
		return strings.Join(append(parts, root+" ld.so.conf directories and default directories"), ", ")
	}
	return strings.Join(append(parts, root+" default directories (it has no /etc/ld.so.conf)"), ", ")
}

// impliedByMissing: a symbol version needed from a library that is not
// there at all says nothing the missing library does not say already.
func impliedByMissing(ch Check, found map[string]foundLib) bool {
	if !strings.HasPrefix(ch.Name, "version ") {
		return false
	}
	for n, l := range found {
		if l.obj == nil && l.err == nil && strings.Contains(ch.Detail, " from "+n+", but ") {
			return true
		}
	}
	return false
}

// searchDirs are the host directories the loader searches for the
// DT_NEEDED entries of it, in order, without repeats.
func (l *Loader) searchDirs(it item) []string {
	var dirs []string
	add := func(ds ...string) {
		for _, d := range ds {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
				l.consulted[d] = true
			}
		}
	}
	if len(it.obj.RunPath) == 0 {
		// DT_RPATH of the object, then of each object that loaded it,
		// nearest first; an object with DT_RUNPATH has its DT_RPATH ignored.
		add(l.expand(it.obj.RPath, it.at)...)
		for i := len(it.chain) - 1; i >= 0; i-- {
			if up := it.chain[i]; len(up.obj.RunPath) == 0 {
				add(l.expand(up.obj.RPath, up.at)...)
			}
		}
	}
	add(l.LibraryPath...)
	add(l.expand(it.obj.RunPath, it.at)...)
	for _, d := range l.Conf {
		add(l.host(d))
	}
	for _, d := range DefaultDirs() {
		add(l.host(d))
	}
	return dirs
}

// expand turns DT_RPATH/DT_RUNPATH entries into host directories:
// $ORIGIN (or ${ORIGIN}) is the directory of the object as found, $LIB the
// library directory name, $PLATFORM the machine; other entries are paths
// of the root. Relative entries are relative to the worker's working
// directory, which is not known here; they are left out.
func (l *Loader) expand(entries []string, at string) []string {
	var out []string
	for _, e := range entries {
		e = strings.NewReplacer("${ORIGIN}", "$ORIGIN", "${LIB}", "$LIB", "${PLATFORM}", "$PLATFORM").Replace(e)
		e = strings.ReplaceAll(e, "$LIB", "lib/"+Triplet())
		e = strings.ReplaceAll(e, "$PLATFORM", strings.SplitN(Triplet(), "-", 2)[0])
		if rest, ok := strings.CutPrefix(e, "$ORIGIN"); ok {
			out = append(out, filepath.Join(filepath.Dir(at), rest))
			continue
		}
		if strings.HasPrefix(e, "/") {
			out = append(out, l.host(e))
		}
	}
	return out
}

// CheckTree checks every ELF shared object under dir: extension modules
// and libraries (files named *.so or *.so.*, symbolic links not followed,
// so each file is checked once). Files with such names that are not ELF
// (linker scripts) and executables are passed over.
func (l *Loader) CheckTree(dir string) ([]*LoadCheck, error) {
	var out []*LoadCheck
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			l.consulted[p] = true
			return nil
		}
		if !d.Type().IsRegular() || !IsLibraryName(d.Name()) {
			return nil
		}
		if _, err := l.read(p); err != nil && notShared(err) {
			return nil
		}
		out = append(out, l.Check(p))
		return nil
	})
	return out, err
}

// IsLibraryName: "x.so", "libx.so.1", "mod.cpython-312-x86_64-linux-gnu.so".
func IsLibraryName(name string) bool {
	return strings.HasSuffix(name, ".so") || strings.Contains(name, ".so.")
}

// notShared tells a file that is simply not a shared object (a linker
// script, an executable) from a broken one.
func notShared(err error) bool {
	var le *loadError
	if !errors.As(err, &le) {
		return false
	}
	for _, s := range []string{"not an ELF file", "is an executable", "position-independent executable", "relocatable object", "empty file"} {
		if strings.Contains(le.msg, s) {
			return true
		}
	}
	return false
}

// ResolveIn resolves the symbolic links of p, a path under root, as they
// resolve when root is "/": an absolute link target is taken inside root,
// ".." stops at root. It returns the host path of the file.
func ResolveIn(root, p string) (string, error) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s is not inside %s", p, root)
	}
	todo := strings.Split(filepath.ToSlash(rel), "/")
	var done []string
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		host := filepath.Join(root, strings.Join(done, "/"), c)
		fi, err := os.Lstat(host)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if links++; links > 40 {
			return "", &fs.PathError{Op: "resolve", Path: p, Err: syscall.ELOOP}
		}
		t, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(t, "/") {
			done = nil
		}
		todo = append(strings.Split(t, "/"), todo...)
	}
	return filepath.Join(root, strings.Join(done, "/")), nil
}
