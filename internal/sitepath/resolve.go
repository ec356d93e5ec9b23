package sitepath

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/infera/infera-exec/internal/elfload"
	"github.com/infera/infera-exec/internal/fileid"
)

// Kind is what a top-level name resolves to.
type Kind string

const (
	NotFound  Kind = ""
	Regular   Kind = "package"           // a directory with an __init__
	Module    Kind = "module"            // a file: name.py, name.*.so, ...
	Namespace Kind = "namespace package" // directories without __init__, none of the above anywhere
)

// Found is where the import system takes a top-level name from.
type Found struct {
	Kind     Kind
	Path     string   // the package directory or module file; a namespace package's first portion
	Portions []string // a namespace package's directories, in path order
	Others   []string // other directories or files of the name on the path, not imported
}

// Resolve finds name as importlib's PathFinder does over entries (host
// paths, in sys.path order): in each entry, a directory with an __init__
// is a regular package and a module file is a module, and the first
// entry holding either wins; a directory without __init__ is only a
// portion of a namespace package, which is what the name becomes when no
// entry holds a package or module. version ("3.11"; "" = any) decides
// which extension modules count.
func Resolve(entries []string, name, version string) Found {
	return ResolveIn("/", entries, name, version)
}

// ResolveIn is Resolve for an unpacked image root seen from outside it:
// entries are directories on this machine under root, and the links met
// in them are resolved inside root ("/" = this machine).
func ResolveIn(root string, entries []string, name, version string) Found {
	f := &Finder{l: lookup{root: root, lists: map[string]listing{}}}
	return f.Resolve(entries, name, version)
}

// Finder is ResolveIn for several names over the same directories: it
// lists each directory at most once, as importlib's FileFinder lists an
// entry once and answers every name looked up in it from that listing.
// A Finder is for one question (one start's resolution), not to be kept:
// what it listed is not read again.
type Finder struct {
	l lookup
}

// NewFinder is a Finder of root ("/" = this machine), as ResolveIn,
// whose listings (Listed) carry each directory's identity before it.
func NewFinder(root string) *Finder {
	return &Finder{l: lookup{root: root, lists: map[string]listing{}, identities: true}}
}

// ReadDir is os.ReadDir of hd, a directory on this machine, from the
// Finder's listing of it (made now if there is none).
func (fd *Finder) ReadDir(hd string) ([]os.DirEntry, error) {
	return fd.l.readDir(hd)
}

// Listed are the directories the Finder listed in full, by their path on
// this machine, each with the identity it had before it was listed: for
// a caller that digests the same directories (fileid.Buffer's Listed).
func (fd *Finder) Listed() map[string]fileid.Listing {
	out := make(map[string]fileid.Listing, len(fd.l.lists))
	for hd, r := range fd.l.lists {
		if r.err == nil {
			out[hd] = r.Listing
		}
	}
	return out
}

// Resolve is ResolveIn of the Finder's root.
func (fd *Finder) Resolve(entries []string, name, version string) Found {
	l := fd.l
	isDir, moduleFile := l.isDir, l.moduleFile
	var f Found
	var portions []string
	for _, e := range entries {
		dir := filepath.Join(e, name)
		isPkgDir := isDir(dir)
		if isPkgDir && moduleFile(dir, "__init__", version) != "" {
			if f.Kind == NotFound {
				f.Kind, f.Path = Regular, dir
			} else {
				f.Others = append(f.Others, dir)
			}
			continue
		}
		if mod := moduleFile(e, name, version); mod != "" {
			if f.Kind == NotFound {
				f.Kind, f.Path = Module, mod
			} else {
				f.Others = append(f.Others, mod)
			}
			if isPkgDir {
				f.Others = append(f.Others, dir)
			}
			continue
		}
		if isPkgDir {
			portions = append(portions, dir)
		}
	}
	if f.Kind == NotFound && len(portions) > 0 {
		return Found{Kind: Namespace, Path: portions[0], Portions: portions}
	}
	f.Others = append(f.Others, portions...)
	return f
}

// lookup stats paths of root as the kernel resolves them with root as "/".
type lookup struct {
	root       string
	lists      map[string]listing // directories listed, by host path
	identities bool               // each listing with the directory's identity before (fileid.List)
}

// listing is what fileid.List gave for a directory.
type listing struct {
	fileid.Listing
	err error
}

// readDir is os.ReadDir of hd, once per lookup.
func (l lookup) readDir(hd string) ([]os.DirEntry, error) {
	if r, ok := l.lists[hd]; ok {
		return r.Entries, r.err
	}
	var r fileid.Listing
	var err error
	if l.identities {
		r, err = fileid.List(hd)
	} else {
		r.Entries, err = os.ReadDir(hd)
	}
	l.lists[hd] = listing{r, err}
	return r.Entries, err
}

func (l lookup) stat(p string) (os.FileInfo, error) {
	if l.root != "/" && l.root != "" {
		hp, err := elfload.ResolveIn(l.root, p)
		if err != nil {
			return nil, err
		}
		p = hp
	}
	return os.Stat(p)
}

func (l lookup) isDir(p string) bool {
	fi, err := l.stat(p)
	return err == nil && fi.IsDir()
}

// moduleFile is the file of module name in dir, in FileFinder's order
// (extension modules, source, bytecode), "" when there is none.
func (l lookup) moduleFile(dir, name, version string) string {
	hd := dir
	if l.root != "/" && l.root != "" {
		var err error
		if hd, err = elfload.ResolveIn(l.root, dir); err != nil {
			return ""
		}
	}
	entries, err := l.readDir(hd)
	if err != nil {
		return ""
	}
	var ext, src, pyc string
	for _, e := range entries {
		n := e.Name()
		rest, ok := strings.CutPrefix(n, name+".")
		if !ok || e.IsDir() {
			continue
		}
		switch {
		case rest == "py":
			src = n
		case rest == "pyc":
			pyc = n
		case extensionSuffix(rest, version) && ext == "":
			ext = n
		}
	}
	for _, n := range []string{ext, src, pyc} {
		if n == "" {
			continue
		}
		if fi, err := l.stat(filepath.Join(dir, n)); err == nil && fi.Mode().IsRegular() {
			return filepath.Join(dir, n)
		}
	}
	return ""
}

// extensionSuffix says whether "so", "abi3.so" or
// "cpython-3XY-ARCH.so" (without the leading dot) is an extension
// suffix of CPython version ("" = any).
func extensionSuffix(s, version string) bool {
	switch {
	case s == "so", s == "abi3.so":
		return true
	case strings.HasPrefix(s, "cpython-") && strings.HasSuffix(s, ".so") && !strings.Contains(s, "/"):
		if version == "" {
			return true
		}
		return strings.HasPrefix(s, "cpython-"+strings.ReplaceAll(version, ".", "")+"-")
	}
	return false
}
