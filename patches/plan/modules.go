package plan

import (
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/record"
)

// A patched source file is only worth "applied" if it is the file the
// import system loads for its module. CPython's PathFinder asks each
// directory of the parent package's __path__ in turn, and the FileFinder
// of one directory, for a name N, tries in this order:
//
//  1. a package: the directory N/ holding __init__ with one of the loader
//     suffixes below (in their order);
//  2. a module file N<suffix> for each loader suffix, in order: the
//     extension modules (importlib.machinery.EXTENSION_SUFFIXES), then
//     source (.py), then sourceless bytecode (.pyc);
//  3. a namespace portion: N/ without any __init__, kept only if no later
//     directory has a package or module N.
//
// Only regular files count (a stat that follows links). So a package
// directory or an extension module beside a patched module shadows it
// (while a sourceless .pyc beside it does not: source comes first), and a
// module file beside a package directory without __init__ takes the name.
// importer resolves each patched module this way, from the package's own
// locations (the probe's answer) down.

// multiarch is the platform triplet in CPython's extension tag for a Go
// architecture (Linux, glibc).
var multiarch = map[string]string{
	"amd64":    "x86_64-linux-gnu",
	"arm64":    "aarch64-linux-gnu",
	"ppc64le":  "powerpc64le-linux-gnu",
	"s390x":    "s390x-linux-gnu",
	"riscv64":  "riscv64-linux-gnu",
	"386":      "i386-linux-gnu",
	"loong64":  "loongarch64-linux-gnu",
	"mips64le": "mips64el-linux-gnuabi64",
}

// extensionSuffixes is importlib.machinery.EXTENSION_SUFFIXES of CPython
// 3.minor on Linux (glibc) for the machine goarch names: the build's own
// tag, the stable ABI, the bare .so. Python/dynload_shlib.c lists them in
// this order. A free-threaded build (3.13 and later) has the tag
// cpython-3XYt and no .abi3.so; the ABI family does not tell the two
// builds apart, so the importer also counts a cpython-3XYt file as loading
// (a claim withheld, never a wrong one).
func extensionSuffixes(minor int, goarch string) []string {
	triplet := multiarch[goarch]
	if triplet == "" {
		triplet = goarch + "-linux-gnu"
	}
	return []string{fmt.Sprintf(".cpython-3%d-%s.so", minor, triplet), ".abi3.so", ".so"}
}

// importer resolves modules as CPython 3.minor's path-based finder does.
// minor 0 is an interpreter of unknown minor (an offline check of a
// directory that does not say): then an extension module tagged for any
// CPython 3 counts.
type importer struct {
	minor   int
	triplet string
	// probes are the paths whose type (as stat(2) sees it: a regular
	// file, a directory, absent) decided the answer: for the record, each
	// name that would shadow a module, present or not.
	probes []string
	// dirs are directories searched by pattern (an interpreter of unknown
	// minor), whose whole identity is recorded instead.
	dirs []string
	// types is the run's memory of what stat(2) said of each path (see
	// typeCache); nil: every probe is a stat of its own.
	types *typeCache
}

func newImporter(minor int, types *typeCache) *importer {
	t := multiarch[runtime.GOARCH]
	if t == "" {
		t = runtime.GOARCH + "-linux-gnu"
	}
	return &importer{minor: minor, triplet: t, types: types}
}

// typeCache is what stat(2) said of each path the importer probed in one
// run: a regular file, a directory, something else, absent, or a failed
// stat. Every patch of the run asks about the same package directories,
// __init__ files and extension names (each edited module is resolved from
// the package down), and AsWritten's re-plan asks again about all of
// them; each path is stat'ed once per run instead.
//
// A cached answer within one run is as good as a fresh stat, for what
// the run itself does: its writes replace a regular file by a regular
// file (a temporary file of the same directory, named ".NAME.tmp-*",
// which no module name can be, renamed over it; a failed group's
// restore is the same), and the only files it removes are stale
// temporary files of that name and the cached bytecode of edited modules
// (checkBytecode forgets every path it removes; a probed path is in a
// __pycache__ directory only for a package of that name). Nor can another writer
// make a cached answer a wrong claim: the record keeps these very
// answers as the types the patches were decided on (Files.TypeOf), so a
// path whose type another writer changed since reads as changed at the
// next start, which then runs the full check; a fresh stat at that point
// would instead record the new type beside a result decided on the old.
type typeCache struct {
	m map[string]typeSeen
}

type typeSeen struct {
	id identity // typeOnly
	ok bool
}

func newTypeCache() *typeCache { return &typeCache{m: map[string]typeSeen{}} }

// StatType is what path names, as stat(2) sees it following links: the
// typeOnly part of its identity, absent for ENOENT and ENOTDIR; ok false
// when it cannot be told (another error). It is the very check a restart
// makes of each probe the record keeps (record.Record.Check). A variable so tests
// can count the stats.
var StatType = func(path string) (identity, bool) {
	id, ok := fileid.Stat(path)
	return record.TypeOnly(id), ok
}

// stat is StatType(path), once per path and run.
func (c *typeCache) stat(path string) (identity, bool) {
	if c == nil {
		return StatType(path)
	}
	t, ok := c.m[path]
	if !ok {
		t.id, t.ok = StatType(path)
		c.m[path] = t
	}
	return t.id, t.ok
}

// forget drops what was seen of path: the run itself removed it.
func (c *typeCache) forget(path string) {
	if c != nil {
		delete(c.m, path)
	}
}

// isFile is FileFinder's _path_isfile: stat, following links, says a
// regular file.
func (c *typeCache) isFile(path string) bool {
	id, ok := c.stat(path)
	return ok && !id.Absent && id.Mode == unix.S_IFREG
}

// isDir is _path_isdir.
func (c *typeCache) isDir(path string) bool {
	id, ok := c.stat(path)
	return ok && !id.Absent && id.Mode == unix.S_IFDIR
}

// Compiled when first used: a start that knows its minor never does.
var pyMinorRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?:^|/)python3\.(\d+)(?:t)?/`) })

// minorFromPath is the CPython minor a site directory's path names
// (/usr/local/lib/python3.11/dist-packages/vllm: 11), else 0.
func minorFromPath(p string) int {
	m := pyMinorRE().FindStringSubmatch(filepath.ToSlash(p) + "/")
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// spec is what a finder found for a name.
type spec struct {
	kind   specKind
	origin string   // the file that runs: __init__ or the module file
	path   []string // a package's or namespace's locations
}

type specKind int

const (
	notFound specKind = iota
	module
	pkgSpec
	namespace
)

func (s spec) String() string {
	switch s.kind {
	case module:
		return "the module " + s.origin
	case pkgSpec:
		return "the package " + s.origin
	case namespace:
		return "a namespace package (" + strings.Join(s.path, ", ") + ")"
	}
	return "nothing"
}

// extensions are the extension-module files stem<suffix> that exist in
// dir, as regular files, in EXTENSION_SUFFIXES order (the free-threaded
// tag right after the build's own).
func (im *importer) extensions(dir, stem string) []string {
	var out []string
	if im.minor > 0 {
		tags := []string{""}
		if im.minor >= 13 {
			tags = append(tags, "t") // a free-threaded build's
		}
		for _, tag := range tags {
			if p := filepath.Join(dir, fmt.Sprintf("%s.cpython-3%d%s-%s.so", stem, im.minor, tag, im.triplet)); im.isFile(p) {
				out = append(out, p)
			}
		}
	} else {
		// Any CPython 3 tag: the directory's identity stands for them all.
		if !slices.Contains(im.dirs, dir) {
			im.dirs = append(im.dirs, dir)
		}
		matches, _ := filepath.Glob(filepath.Join(dir, globEscape(stem)+".cpython-3*-"+im.triplet+".so"))
		re := regexp.MustCompile(`^` + regexp.QuoteMeta(stem) + `\.cpython-3\d+t?-` + regexp.QuoteMeta(im.triplet) + `\.so$`)
		slices.SortFunc(matches, func(a, b string) int { return len(a) - len(b) })
		for _, m := range matches {
			if re.MatchString(filepath.Base(m)) && im.types.isFile(m) {
				out = append(out, m)
			}
		}
	}
	for _, s := range []string{".abi3.so", ".so"} {
		if p := filepath.Join(dir, stem+s); im.isFile(p) {
			out = append(out, p)
		}
	}
	return out
}

// loaded is the first file stem<suffix> in dir in FileFinder's loader
// order (extensions, .py, .pyc), "" when there is none.
func (im *importer) loaded(dir, stem string) string {
	if ext := im.extensions(dir, stem); len(ext) > 0 {
		return ext[0]
	}
	for _, s := range []string{".py", ".pyc"} {
		if p := filepath.Join(dir, stem+s); im.isFile(p) {
			return p
		}
	}
	return ""
}

// isFile is FileFinder's _path_isfile (stat, following links: a regular
// file), noting the path for the record.
func (im *importer) isFile(p string) bool {
	im.probe(p)
	return im.types.isFile(p)
}

// isDir is _path_isdir, noting the path for the record.
func (im *importer) isDir(p string) bool {
	im.probe(p)
	return im.types.isDir(p)
}

func (im *importer) probe(p string) {
	if !slices.Contains(im.probes, p) {
		im.probes = append(im.probes, p)
	}
}

// find is one directory's FileFinder.find_spec for name.
func (im *importer) find(dir, name string) spec {
	base := filepath.Join(dir, name)
	ns := false
	if im.isDir(base) {
		if init := im.loaded(base, "__init__"); init != "" {
			return spec{kind: pkgSpec, origin: init, path: []string{base}}
		}
		ns = true
	}
	if m := im.loaded(dir, name); m != "" {
		return spec{kind: module, origin: m}
	}
	if ns {
		return spec{kind: namespace, path: []string{base}}
	}
	return spec{}
}

// findIn is PathFinder.find_spec for name over the parent's locations:
// the first directory with a package or module wins; namespace portions
// are gathered and count only if none has one.
func (im *importer) findIn(path []string, name string) spec {
	var portions []string
	for _, dir := range path {
		s := im.find(dir, name)
		switch s.kind {
		case module, pkgSpec:
			return s
		case namespace:
			portions = append(portions, s.path...)
		}
	}
	if len(portions) > 0 {
		return spec{kind: namespace, path: portions}
	}
	return spec{}
}

// specOf is what the import system finds for pkg.comps[0].comps[1]...:
// the parents are imported as packages from the package's locations
// down; bad says why the name cannot be imported at all (a parent that
// is a module, or not found).
func (im *importer) specOf(pkg Package, comps []string) (s spec, name, bad string) {
	name = pkg.Name
	path := pkg.Dirs
	if len(path) == 0 {
		path = []string{pkg.Dir}
	}
	// The package itself: the probe said where it is.
	s = spec{kind: namespace, path: path}
	if init := im.loaded(path[0], "__init__"); init != "" {
		s = spec{kind: pkgSpec, origin: init, path: path[:1]}
	}
	for i, comp := range comps {
		if i > 0 {
			switch s.kind {
			case module:
				return s, name, fmt.Sprintf("%s is imported from %s, which is not a package", name, s.origin)
			case notFound:
				return s, name, name + " is not importable"
			}
		}
		path = s.path
		name += "." + comp
		s = im.findIn(path, comp)
	}
	return s, name, ""
}

// shadow says what loads instead of the source file (relative to the
// package, slash-separated, a .py) whose real path is real: "" when the
// import system loads real itself; else the file (or namespace) that
// loads, and why.
func (im *importer) shadow(pkg Package, file, real string) (by, why string) {
	comps := strings.Split(strings.TrimSuffix(file, ".py"), "/")
	init := comps[len(comps)-1] == "__init__"
	if init {
		comps = comps[:len(comps)-1] // the package's own module
	}
	s, name, bad := im.specOf(pkg, comps)
	switch {
	case bad != "":
		return s.origin, fmt.Sprintf("%s, so %s is never imported", bad, real)
	case s.origin != "" && samePath(s.origin, real):
		return "", ""
	case s.kind == notFound:
		return "", fmt.Sprintf("%s is not importable, so %s is never imported", name, real)
	}
	by = s.origin
	kind := "a module"
	switch {
	case s.kind == namespace:
		by, kind = strings.Join(s.path, ", "), "a namespace package"
	case s.kind == pkgSpec && !init:
		kind = "a package directory"
	case strings.HasSuffix(by, ".so"):
		kind = "an extension module"
	case strings.HasSuffix(by, ".pyc"):
		kind = "sourceless bytecode"
	}
	return by, fmt.Sprintf("import %s loads %s, %s, not the patched %s", name, by, kind, real)
}

func samePath(a, b string) bool {
	if a == b {
		return true
	}
	ra, err := filepath.EvalSymlinks(a)
	return err == nil && ra == b
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
