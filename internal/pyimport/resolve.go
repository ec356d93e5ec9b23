package pyimport

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/sitepath"
)

// Query is the worker as it will start: its command, environment and
// working directory.
type Query struct {
	Argv []string // the worker's command line
	Path string   // argv[0] as resolved on the worker's PATH
	Env  Env
	Cwd  string
	// Home gives the effective user's home directory, asked only when the
	// user site depends on it (HOME is not set); nil or "" = unknown: a
	// user site depending on it is uncertain.
	Home func() string
	// SetID: the real and effective user or group differ, so site
	// disables the user site.
	SetID   bool
	Version string // the CPython "3.X" the ABI step found; "" = not known
}

// Spec is what importlib.util.find_spec(name) returns, for a top-level
// name: the origin ("" for a namespace package) and the package's
// submodule_search_locations (none for a module).
type Spec struct {
	Found     bool
	Origin    string
	Locations []string
	Namespace bool
	Others    []string // other copies of the name on sys.path, not imported
}

// Answer is the resolver's answer. Certain is true only when every
// input of the interpreter's start was read and none can run code that
// changes imports; Reason then says what was read, else why not.
type Answer struct {
	Certain bool
	Reason  string
	// NotPython: the command is not a Python interpreter, nor a script
	// one runs (see NotPythonError).
	NotPython   bool
	Interpreter string // sys.executable
	Version     string
	SysPath     []string // sys.path as the worker's main module sees it ("" = the working directory)
	// SiteDirs are the site directories site.py looks for, present or
	// not: each one appearing would change the answer.
	SiteDirs []string
	Specs    map[string]Spec
	// Listed are the directories read for the answer (paths on this
	// machine), each with its identity before it was read: for the
	// caller that digests them (fileid.Buffer's Listed).
	Listed map[string]fileid.Listing
	// Notes (offline lookups only) are what was passed over because it
	// cannot be followed without running it; the answer is then the best
	// one that can be read, not a certain one.
	Notes []string
}

// Resolve answers where the worker started by q imports each name from.
func Resolve(q Query, names []string) *Answer {
	a := &Answer{Specs: map[string]Spec{}}
	if err := resolve(q, names, a); err != nil {
		var np *NotPythonError
		a.Certain, a.Reason, a.NotPython = false, err.Error(), errors.As(err, &np)
		a.Specs = map[string]Spec{}
		return a
	}
	a.Certain = true
	return a
}

func resolve(q Query, names []string, a *Answer) error {
	env := q.Env
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	argv, path, env, _, err := FollowEnv(q.Argv, q.Path, env, q.Cwd)
	if err != nil {
		return err
	}
	c, err := ParseCommand(argv, path, env, q.Cwd)
	if err != nil {
		return err
	}
	in, err := layout(hostFS, c, env, q.Version)
	if err != nil {
		return err
	}
	a.Interpreter, a.Version = c.Executable, in.Version
	if err := modelled(c, env, in.Version); err != nil {
		return err
	}
	s := &state{fs: hostFS, in: in, cwd: q.Cwd, codec: codecOf(c, env)}
	if s.codec.invalid != nil {
		return s.codec.invalid
	}
	if err := s.build(c, env, q); err != nil {
		return err
	}
	a.SysPath, a.SiteDirs = s.path, s.siteDirs
	for _, n := range names {
		spec, err := s.find(n)
		if err != nil {
			return err
		}
		a.Specs[n] = spec
	}
	a.Listed = s.finder().Listed()
	kind := "CPython " + in.Version + " at " + in.Base
	if in.Venv {
		kind += ", venv " + in.Prefix
	}
	a.Reason = fmt.Sprintf("sys.path of %s (%s) read from its layout, environment and command; nothing at start-up runs code that changes imports", c.Executable, kind)
	return nil
}

// harmlessX are the -X options that change neither sys.path nor which
// file an import runs (pycache_prefix moves the bytecode, presite runs a
// module before site): any other is one this resolver does not model.
var harmlessX = []string{"faulthandler", "showrefcount", "tracemalloc", "importtime", "dev", "utf8", "warn_default_encoding",
	"no_debug_ranges", "int_max_str_digits", "frozen_modules", "perf", "perf_jit", "cpu_count", "gil", "showalloccount"}

// modelled fails for a command whose start this resolver does not model
// for CPython version: an option the version does not have, a -X option
// outside harmlessX, a bytecode cache prefix (PYTHONPYCACHEPREFIX, read
// unless -E or -I, or -X pycache_prefix): the probe then reports the
// prefix the interpreter holds (sys.pycache_prefix), whose tree the patch
// step checks for bytecode that would shadow a patched module.
func modelled(c Command, env Env, version string) error {
	if c.optP && !versionAtLeast(version, 11) {
		return fmt.Errorf("-P is not an option of CPython %s: the worker exits at once (Unknown option: -P)", version)
	}
	for _, x := range c.XOptions {
		name, _, _ := strings.Cut(x, "=")
		switch {
		case name == "pycache_prefix":
			return fmt.Errorf("-X %s puts the bytecode cache under a prefix, which only the interpreter reports (sys.pycache_prefix) for the patch step to check", x)
		case !slices.Contains(harmlessX, name):
			return fmt.Errorf("the interpreter option -X %s is not one this resolver models", x)
		}
	}
	if v, ok := getenv(env, c.Flags, "PYTHONPYCACHEPREFIX"); ok && v != "" {
		return fmt.Errorf("PYTHONPYCACHEPREFIX=%s puts the bytecode cache under a prefix, which only the interpreter reports (sys.pycache_prefix) for the patch step to check", v)
	}
	return nil
}

// state is sys.path and sys.meta_path as they are built.
type state struct {
	fs       fsys
	in       sitepath.Interpreter
	cwd      string
	path     []string
	known    map[string]bool
	finders  []finder // setuptools editable finders, in sys.meta_path order
	shim     bool     // the distutils-precedence shim is first on sys.meta_path
	siteDirs []string
	// lenient: what cannot be followed (a .pth line running code, a
	// sitecustomize) is noted and passed over rather than ending the
	// answer (the offline lookups' best answer).
	lenient bool
	notes   []string
	// files lists each sys.path directory once for every name looked
	// up (sitecustomize, the editable finders' modules, the names asked
	// for), as importlib's FileFinder does; entries and cwdReal are what
	// each sys.path entry and the working directory are on this machine,
	// taken once for all of them too.
	files   *sitepath.Finder
	entries map[string]pathEntry
	cwdReal string
	codec   pthCodec // how .pth bytes outside ASCII are decoded (codecOf)
}

// pathEntry is a sys.path entry on this machine: its path there, whether
// it is there, and whether it is a directory.
type pathEntry struct {
	hp           string
	present, dir bool
}

// entry is the sys.path entry e (a clean path) resolved and stat'ed, once
// per resolution: the path finder goes over the same entries for every
// name it looks up.
func (s *state) entry(e string) pathEntry {
	if x, ok := s.entries[e]; ok {
		return x
	}
	var x pathEntry
	if hp, err := s.fs.host(e); err == nil {
		if fi, err := os.Stat(hp); err == nil {
			x = pathEntry{hp: hp, present: true, dir: fi.IsDir()}
		}
	}
	if s.entries == nil {
		s.entries = map[string]pathEntry{}
	}
	s.entries[e] = x
	return x
}

func (s *state) finder() *sitepath.Finder {
	if s.files == nil {
		s.files = sitepath.NewFinder(s.fs.root)
	}
	return s.files
}

// readDir is fsys.readDir from the listing the path finder uses: a site
// directory is read once for its .pth files and the names looked up.
func (s *state) readDir(p string) ([]os.DirEntry, error) {
	hp, err := s.fs.host(p)
	if err != nil {
		return nil, err
	}
	return s.finder().ReadDir(hp)
}

// doubt ends the answer with err, or, when lenient, notes it and lets the
// answer go on as if what err names were not there.
func (s *state) doubt(err error) error {
	if !s.lenient || err == nil {
		return err
	}
	if !slices.Contains(s.notes, err.Error()) {
		s.notes = append(s.notes, err.Error())
	}
	return nil
}

// finder is one setuptools editable finder: MAPPING of top-level names
// to directories, consulted after sys.path.
type finder struct {
	file    string
	mapping map[string]string
}

// build makes sys.path: the main module's entry (added last by CPython,
// first in the list), PYTHONPATH, the standard library, then what site
// adds: the venv's site directories, the user site, the prefixes' site
// directories, each with its .pth files.
func (s *state) build(c Command, env Env, q Query) error {
	var pp []string
	if v, ok := getenv(env, c.Flags, "PYTHONPATH"); ok && v != "" {
		for _, e := range strings.Split(v, ":") {
			if !strings.HasPrefix(e, "/") {
				// From 3.11 getpath joins a relative (or empty) entry
				// to getcwd(), which names the working directory with
				// its links resolved, without normalising it; 3.10
				// keeps it as given, and only site makes it absolute.
				if !versionAtLeast(s.in.Version, 11) && c.Flags.NoSite {
					return fmt.Errorf("PYTHONPATH entry %q: under -S CPython %s keeps a relative entry as given, relative to whatever the working directory is when an import runs", e, s.in.Version)
				}
				cwd, err := s.realCwd()
				if err != nil {
					return err
				}
				if e == "" {
					e = cwd
				} else {
					e = strings.TrimSuffix(cwd, "/") + "/" + e
				}
			}
			pp = append(pp, e)
		}
	}
	base := append(pp, s.in.StdLib()...)
	if c.Flags.NoSite {
		s.path = base
	} else {
		// site.removeduppaths: absolute (normpath), each once.
		s.known = map[string]bool{}
		for _, e := range base {
			s.add(normpath(e))
		}
		if err := s.site(c, env, q); err != nil {
			return err
		}
	}
	safe := c.Flags.SafePath
	if v, ok := getenv(env, c.Flags, "PYTHONSAFEPATH"); ok && v != "" && versionAtLeast(s.in.Version, 11) {
		safe = true // from 3.11 only: 3.10 does not know the variable
	}
	if !safe {
		first, err := s.first(c)
		if err != nil {
			return err
		}
		s.path = append([]string{first}, s.path...)
	}
	return nil
}

// first is sys.path[0]: "" for -c, the working directory for -m (as
// getcwd gives it), the script's directory with its links resolved.
func (s *state) first(c Command) (string, error) {
	switch c.Main {
	case MainModule:
		return s.realCwd()
	case MainScript:
		real, err := s.fs.evalSymlinks(c.Script)
		if err != nil {
			return "", fmt.Errorf("resolving the script %s: %w", c.Script, err)
		}
		if !s.fs.isFile(real) {
			return "", fmt.Errorf("the script %s is not a file (a directory or archive runs its __main__)", c.Script)
		}
		return filepath.Dir(real), nil
	}
	return "", nil
}

// site is what site.main adds, in its order.
func (s *state) site(c Command, env Env, q Query) error {
	user := !c.Flags.NoUserSite && !q.SetID
	if v, ok := getenv(env, c.Flags, "PYTHONNOUSERSITE"); ok && v != "" {
		user = false
	}
	prefixes := []string{s.in.Base}
	if s.in.Venv {
		if err := s.addSites(s.in.PrefixSites(s.in.Prefix)); err != nil {
			return err
		}
		if s.in.SystemSite {
			prefixes = []string{s.in.Prefix, s.in.Base}
		} else {
			prefixes, user = []string{s.in.Prefix}, false
		}
	}
	if user {
		us, err := s.userSite(env, q)
		if err != nil {
			return err
		}
		if err := s.addSites([]string{us}); err != nil {
			return err
		}
	}
	var sites []string
	for _, p := range prefixes {
		for _, d := range s.in.PrefixSites(p) {
			if !slices.Contains(sites, d) {
				sites = append(sites, d)
			}
		}
	}
	if err := s.addSites(sites); err != nil {
		return err
	}
	if err := s.doubt(s.customize("sitecustomize")); err != nil {
		return err
	}
	if user {
		return s.doubt(s.customize("usercustomize"))
	}
	return nil
}

// userSite is site.getusersitepackages: PYTHONUSERBASE (read even under
// -E, as site.py reads os.environ), else ~/.local, ~ being HOME when
// set, else the user's home directory.
func (s *state) userSite(env Env, q Query) (string, error) {
	base, ok := env("PYTHONUSERBASE")
	if !ok || base == "" {
		home, ok := env("HOME")
		if !ok {
			if q.Home != nil {
				home = q.Home()
			}
			if home == "" {
				return "", fmt.Errorf("HOME is not set and the user's home directory is not known: the user site is unknown")
			}
		}
		base = strings.TrimRight(home, "/") + "/.local"
	}
	// site.addsitedir makes the user site absolute (makepath).
	return s.abs(base + "/lib/python" + s.in.Version + "/site-packages")
}

// addSites is site.addsitedir for each directory that exists.
func (s *state) addSites(dirs []string) error {
	for _, d := range dirs {
		if !slices.Contains(s.siteDirs, d) {
			s.siteDirs = append(s.siteDirs, d)
		}
		if !s.entry(d).dir {
			continue
		}
		s.add(d)
		names, err := s.readDir(d)
		if err != nil {
			if err := s.doubt(fmt.Errorf("listing the site directory %s: %w", d, err)); err != nil {
				return err
			}
			continue
		}
		names = slices.Clone(names)
		slices.SortStableFunc(names, func(a, b os.DirEntry) int { // as site sorts them: Python's str order
			switch {
			case pyNameLess(a.Name(), b.Name()):
				return -1
			case pyNameLess(b.Name(), a.Name()):
				return 1
			}
			return 0
		})
		for _, e := range names {
			n := e.Name()
			if !strings.HasSuffix(n, ".pth") || strings.HasPrefix(n, ".") && versionAtLeast(s.in.Version, 13) {
				continue
			}
			if err := s.pth(d, n); err != nil {
				return err
			}
		}
	}
	return nil
}

var (
	finderLineRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^import (__editable___[A-Za-z0-9_]+_finder); ([A-Za-z0-9_]+)\.install\(\)\s*$`)
	})
	mappingRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^MAPPING\s*(?::[^=\n]*)?=\s*\{([^}]*)\}\s*$`) })
	namespaceRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^NAMESPACES\s*(?::[^=\n]*)?=\s*\{\}\s*$`) })
	pairRE      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`'([^'\\]+)'\s*:\s*'([^'\\]+)'`) })
)

// distutilsShim is the line setuptools' distutils-precedence.pth runs:
// it puts a finder first on sys.meta_path that answers only for
// distutils and pip.
const distutilsShim = "import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; enabled and __import__('_distutils_hack').add_shim(); "

// pth is site.addpackage: each line a comment, blank, an import statement
// (run), or a path (added when it exists and is not on sys.path yet).
func (s *state) pth(dir, name string) error {
	file := filepath.Join(dir, name)
	data, err := s.fs.readFile(file)
	if err != nil {
		return s.doubt(fmt.Errorf("reading a .pth file: %w", err))
	}
	lines, err := pthLines(data, s.in.Version, s.codec)
	if err != nil {
		return s.doubt(fmt.Errorf("the .pth file %s: %w", file, err))
	}
	for i, line := range lines {
		switch {
		case strings.HasPrefix(line, "#") || pyStrip(line) == "":
		case strings.HasPrefix(line, "import ") || strings.HasPrefix(line, "import\t"):
			if err := s.doubt(s.importLine(file, i+1, line)); err != nil {
				return err
			}
		default:
			// site.makepath: os.path.join, then abspath (normpath).
			p := pyRStrip(line)
			if !strings.HasPrefix(p, "/") {
				p = strings.TrimSuffix(dir, "/") + "/" + p
			}
			p = normpath(p)
			// The site directory's own name round-trips (it was decoded
			// from the system's bytes); the line's characters must encode.
			if ok, err := s.codec.pathEncodes(pyRStrip(line)); !ok {
				if err == nil {
					continue // it cannot be encoded: os.path.exists says no
				}
				if err := s.doubt(err); err != nil {
					return fmt.Errorf("the .pth file %s, line %d: %w", file, i+1, err)
				}
				// Noted (an offline lookup): taken as UTF-8 names it.
			}
			if !s.known[p] && s.fs.exists(p) {
				s.add(p)
			}
		}
	}
	return nil
}

// importLine accepts the two import lines whose effect is known: the
// setuptools editable finder's install, whose MAPPING is read, and the
// distutils-precedence shim. Any other runs code this cannot follow.
func (s *state) importLine(file string, n int, line string) error {
	if strings.TrimRight(line, " ") == strings.TrimRight(distutilsShim, " ") {
		s.shim = true
		return nil
	}
	m := finderLineRE().FindStringSubmatch(line)
	if m == nil || m[1] != m[2] {
		return fmt.Errorf("line %d of %s runs code at start-up (%.60q)", n, file, line)
	}
	spec, err := s.pathFind(m[1])
	if err != nil {
		return err
	}
	if !spec.Found || spec.Namespace || !strings.HasSuffix(spec.Origin, ".py") {
		return fmt.Errorf("line %d of %s imports %s, which is not a source module on sys.path", n, file, m[1])
	}
	data, err := s.fs.readFile(spec.Origin)
	if err != nil {
		return fmt.Errorf("reading an editable finder: %w", err)
	}
	text := string(data)
	for _, marker := range []string{"class _EditableFinder", "def install():", "sys.meta_path.append(_EditableFinder)"} {
		if !strings.Contains(text, marker) {
			return fmt.Errorf("%s is not setuptools' editable finder (no %q)", spec.Origin, marker)
		}
	}
	mm := mappingRE().FindStringSubmatch(text)
	if mm == nil {
		return fmt.Errorf("%s: its MAPPING is not a plain literal", spec.Origin)
	}
	if !namespaceRE().MatchString(text) {
		// Its install() also puts a path hook and a placeholder entry on
		// sys.path for the project's namespace packages. Offline, the
		// MAPPING still answers for the names it lists.
		if err := s.doubt(fmt.Errorf("%s: NAMESPACES is not empty (a namespace path hook and a sys.path entry this does not follow)", spec.Origin)); err != nil {
			return err
		}
	}
	f := finder{file: spec.Origin, mapping: map[string]string{}}
	for _, p := range pairRE().FindAllStringSubmatch(mm[1], -1) {
		f.mapping[p[1]] = p[2]
	}
	s.finders = append(s.finders, f)
	return nil
}

// customize is the import of sitecustomize or usercustomize: present
// anywhere on sys.path, it runs code, except Debian's sitecustomize when
// what it would install (apport's hook) is not importable.
func (s *state) customize(name string) error {
	spec, err := s.findMeta(name)
	if err != nil || !spec.Found {
		return err
	}
	if name == "sitecustomize" && !spec.Namespace {
		if data, err := s.fs.readFile(spec.Origin); err == nil && strings.TrimSpace(string(data)) == debianSitecustomize {
			hook, err := s.findMeta("apport_python_hook")
			if err != nil {
				return err
			}
			if !hook.Found {
				return nil
			}
		}
	}
	return fmt.Errorf("%s runs at start-up (%s)", name, cmp.Or(spec.Origin, strings.Join(spec.Locations, ", ")))
}

// debianSitecustomize is the sitecustomize.py Debian and Ubuntu ship
// (/etc/python3.X/sitecustomize.py): apport's exception hook, when
// importable, and nothing else.
const debianSitecustomize = `# install the apport exception handler if available
try:
    import apport_python_hook
except ImportError:
    pass
else:
    apport_python_hook.install()`

// find is importlib.util.find_spec(name) for a top-level name.
func (s *state) find(name string) (Spec, error) {
	if s.shim && (name == "distutils" || name == "pip") {
		if err := s.doubt(fmt.Errorf("the distutils-precedence shim answers for %s", name)); err != nil {
			return Spec{}, err
		}
	}
	return s.findMeta(name)
}

// findMeta walks sys.meta_path after the built-in and frozen importers:
// the path finder over sys.path, then the editable finders in the order
// their .pth files installed them.
func (s *state) findMeta(name string) (Spec, error) {
	spec, err := s.pathFind(name)
	if err != nil || spec.Found {
		return spec, err
	}
	for _, f := range s.finders {
		dir, ok := f.mapping[name]
		if !ok {
			continue
		}
		if !s.fs.isFile(filepath.Join(dir, "__init__.py")) {
			if err := s.doubt(fmt.Errorf("the editable finder %s maps %s to %s, which has no __init__.py", f.file, name, dir)); err != nil {
				return Spec{}, err
			}
			continue
		}
		return Spec{Found: true, Origin: filepath.Join(dir, "__init__.py"), Locations: []string{dir}, Others: spec.Others}, nil
	}
	return spec, nil
}

// pathFind is importlib's PathFinder over sys.path as it is now.
func (s *state) pathFind(name string) (Spec, error) {
	var entries []string
	raw := map[string]string{} // an entry's cleaned path on this machine -> as sys.path holds it (-S keeps "dir/../x")
	for _, e := range s.path {
		if e == "" {
			d, err := s.realCwd()
			if err != nil {
				return Spec{}, err
			}
			e = d
		}
		x := s.entry(filepath.Clean(e))
		if !x.present {
			continue // absent: its finder finds nothing
		}
		hp := x.hp
		if !x.dir {
			if err := s.doubt(fmt.Errorf("the sys.path entry %s is a file (a zip archive's importer)", e)); err != nil {
				return Spec{}, err
			}
			continue
		}
		if _, ok := raw[hp]; !ok {
			raw[hp] = e
		}
		entries = append(entries, hp)
	}
	f := s.finder().Resolve(entries, name, s.in.Version)
	// The finder of an entry joins names to the entry as it is.
	unclean := func(p string) string {
		dir, base := filepath.Split(p)
		return strings.TrimSuffix(raw[filepath.Clean(dir)], "/") + "/" + base
	}
	for i := range f.Portions {
		f.Portions[i] = unclean(f.Portions[i])
	}
	for i := range f.Others {
		f.Others[i] = unclean(f.Others[i])
	}
	switch f.Kind {
	case sitepath.Regular:
		origin, err := s.initFile(f.Path)
		if err != nil {
			return Spec{}, err
		}
		dir := unclean(f.Path)
		return Spec{Found: true, Origin: dir + "/" + filepath.Base(origin), Locations: []string{dir}, Others: f.Others}, nil
	case sitepath.Module:
		return Spec{Found: true, Origin: unclean(f.Path), Others: f.Others}, nil
	case sitepath.Namespace:
		return Spec{Found: true, Namespace: true, Locations: f.Portions}, nil
	}
	return Spec{Others: f.Others}, nil
}

// initFile is the __init__ a package directory's loader runs (dir on this
// machine, under the root).
func (s *state) initFile(dir string) (string, error) {
	f := s.finder().Resolve([]string{dir}, "__init__", s.in.Version)
	if f.Kind != sitepath.Module {
		return "", fmt.Errorf("the package %s has no __init__ module", dir)
	}
	return f.Path, nil
}

// add appends an entry once (site's known_paths).
func (s *state) add(p string) {
	if s.known[p] {
		return
	}
	s.known[p] = true
	s.path = append(s.path, p)
}

// realCwd is os.getcwd(): the working directory with its links resolved,
// as the kernel names it.
func (s *state) realCwd() (string, error) {
	if s.cwdReal == "" {
		d, err := s.fs.evalSymlinks(s.cwd)
		if err != nil {
			return "", fmt.Errorf("resolving the working directory %s: %w", s.cwd, err)
		}
		s.cwdReal = d
	}
	return s.cwdReal, nil
}

// abs is os.path.abspath: joined to os.getcwd(), then normpath.
func (s *state) abs(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		cwd, err := s.realCwd()
		if err != nil {
			return "", err
		}
		p = strings.TrimSuffix(cwd, "/") + "/" + p
	}
	return normpath(p), nil
}

func versionAtLeast(v string, minor int) bool {
	var m int
	_, err := fmt.Sscanf(v, "3.%d", &m)
	return err == nil && m >= minor
}
