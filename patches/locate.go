package patches

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/infera/infera-exec/internal/fileid"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/distinfo"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/procgroup"
	"github.com/infera/infera-exec/internal/pyimport"
	"github.com/infera/infera-exec/internal/statedir"
)

// Location is the answer of one interpreter run (or its cached copy).
type Location struct {
	Interpreter string   `json:"interpreter"`
	SysPath     []string `json:"sys_path"`
	// SiteDirs are the site directories Python would put on sys.path if
	// they existed (the prefixes' and the user site): inputs of the
	// answer, present or absent.
	SiteDirs []string `json:"site_dirs,omitempty"`
	// PycachePrefix is sys.pycache_prefix (PYTHONPYCACHEPREFIX, -X
	// pycache_prefix): the tree the worker's interpreter reads and writes
	// bytecode in instead of __pycache__, as the interpreter holds it (a
	// relative one is taken from the working directory at each import);
	// "" when it has none (the resolver is certain only then).
	PycachePrefix string `json:"pycache_prefix,omitempty"`
	// PyMinor is the CPython 3.minor of the interpreter that answered
	// (the worker's, as pyimport.Ask follows it): what the rules that
	// depend on the version follow; 0 = not known.
	PyMinor  int                `json:"py_minor,omitempty"`
	Packages map[string]Package `json:"packages"`
	// Located says how the answer was found: read without starting
	// Python (and from what), or by the interpreter (and why the reading
	// was not certain), always as "how: why" (LocatedBrief gives the how).
	Located string `json:"located,omitempty"`
	Cached  bool   `json:"cached"`
	Took    string `json:"took"`
	// Fingerprint digests every input of the probe's answer (see
	// probeInputs); "" for an offline location.
	Fingerprint string `json:"-"`

	// Notes (offline lookups) name what the interpreter would run at
	// start-up that the lookup passed over: the answer is not certain.
	Notes []string `json:"notes,omitempty"`
	// Unvouched: the answer is the probing interpreter's, not the
	// worker's own, and why (see engineLocator.Unvouched).
	Unvouched string `json:"unvouched,omitempty"`
}

// probeScript asks the import system where each name on argv would come
// from, without importing it: for a top-level name this is what
// importlib.util.find_spec does (the module already in sys.modules, else
// the first finder on sys.meta_path that knows it, which covers sys.path
// and PEP 660 editable finders), but it runs the package's __init__ no
// more than find_spec does and imports nothing itself (json and
// importlib.util alone would add a third to the interpreter's start).
// It is run as the worker's own question (pyimport.Ask): the worker's
// interpreter and options, environment and working directory, and its
// sys.path[0] rule, which pyimport.Path0Program applies. The answer is
// NUL-separated records: P<sys.path entry>, A<site directory that would be
// on sys.path if it existed>, C<sys.pycache_prefix> when it is set,
// V<sys.version_info's minor>, then per name S<name>, then N (not found),
// E<error>, or O<origin> and L<location>... for the name. The A records
// are what site.py looks for at start-up and adds only when present: the
// site directories of the prefixes (getsitepackages) and, unless disabled
// (-s, -I, PYTHONNOUSERSITE, a venv without system site packages), the
// user site of HOME or PYTHONUSERBASE (getusersitepackages). Asking site
// costs nothing: it is imported at start-up anyway.
const probeScript = pyimport.Path0Program + `out = ["P" + p for p in sys.path]
site = sys.modules.get("site")
if site is not None:
    try:
        extra = list(site.getsitepackages())
        if not sys.flags.no_user_site and site.ENABLE_USER_SITE is not False:
            extra.append(site.getusersitepackages())
    except Exception:
        extra = []
    out.extend("A" + p for p in extra if p)
if getattr(sys, "pycache_prefix", None):
    out.append("C" + sys.pycache_prefix)
out.append("V%d" % sys.version_info[1])
for name in sys.argv[1:]:
    out.append("S" + name)
    try:
        mod = sys.modules.get(name)
        spec = getattr(mod, "__spec__", None) if mod is not None else None
        if spec is None:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                spec = find(name, None) if find is not None else None
                if spec is not None:
                    break
    except Exception as e:
        out.append("E%s: %s" % (type(e).__name__, e))
        continue
    if spec is None:
        out.append("N")
        continue
    out.append("O" + (spec.origin or ""))
    out.extend("L" + p for p in (spec.submodule_search_locations or ()))
sys.stdout.write("\0".join(out))
`

// probeVersion changes when the script or the cache format changes.
const probeVersion = "7"

// engineLocator runs the probe.
type engineLocator struct {
	Python   string        // resolved interpreter path
	Env      *environ.Env  // the worker's final environment
	Dir      string        // the worker's final working directory
	Timeout  time.Duration // for the interpreter
	CacheDir string        // where the probe's answer is kept; "" = no cache
	// Dists names the distribution whose version each import name has
	// (see FillVersions); the versions are part of the cached answer.
	Dists map[string]string
	// Argv and Path are the worker's command and its resolved argv[0]:
	// what the resolver reads to locate without starting Python.
	Argv    []string
	Path    string
	PyMinor int // the CPython minor the ABI step found; 0 = unknown
	// Options and Path0 are the worker's interpreter options and its
	// sys.path[0] rule, which the probe asks with (pyimport.Question).
	Options []string
	Path0   string
	// Unvouched says why the probe's answer is not the worker's own: the
	// worker's interpreter could not be followed and the operator did
	// not name it (INFERA_PYTHON); "" when it is.
	Unvouched string

	// listed are the directories the resolver read, each with its
	// identity before: probeInputs digests them from these listings
	// while they keep that identity.
	listed map[string]fileid.Listing
}

// cacheEntry is the probe's answer with every input that decided it:
// the variables and settings (Settings), and the identity of each file
// and directory it depends on (Inputs). It holds while all are unchanged.
type cacheEntry struct {
	Version  string           `json:"version"`
	Settings string           `json:"settings"`
	Inputs   []cachedIdentity `json:"inputs"`
	Location Location         `json:"location"`
}

type cachedIdentity struct {
	Path string   `json:"path"`
	Link bool     `json:"link,omitempty"` // the identity of the path itself, not what it names
	ID   identity `json:"id"`
	// Sum is what the path held (fileid.Sum): a small file's content, a
	// directory's names, a link's target. On a new mount of the same
	// image only the portable part of ID and this sum are compared.
	Sum string `json:"sum,omitempty"`
}

// holds reports whether the path still holds what was recorded
// (fileid.Check: the same identity, or, on a new mount of the same image,
// the same portable identity and sum).
func (c cachedIdentity) holds(buf *fileid.Buffer) bool {
	_, ok := fileid.Check(c.Path, !c.Link, c.ID, c.Sum, buf)
	return ok
}

// notCertain starts the reason the interpreter was asked.
const notCertain = "not certain without it: "

// LocatedBrief is Located in a few words, for a text line: how it was
// found, and whether it was because the answer was not certain without
// the interpreter; the reason is Located's.
func (l *Location) LocatedBrief() string {
	how, why, _ := strings.Cut(l.Located, ": ")
	if strings.HasPrefix(why, notCertain) {
		how += ": " + strings.TrimSuffix(notCertain, ": ")
	}
	return how
}

// locate resolves names. It reuses the last answer when nothing that
// decides import resolution has changed (see probeInputs), else runs the
// interpreter once.
func (l *engineLocator) locate(ctx context.Context, names []string) (*Location, error) {
	start := time.Now()
	settings := l.settings(names)
	loc, why := l.resolve(names, settings, start)
	if loc == nil {
		var ok bool
		if loc, ok = l.fromCache(names, settings, start); ok {
			loc.Located = "by the interpreter (answer cached): " + why
		} else {
			var err error
			if loc, err = l.probe(ctx, names, settings, start); err != nil {
				return nil, err
			}
			loc.Located = "by the interpreter: " + why
		}
	}
	loc.Unvouched = l.Unvouched
	return loc, nil
}

// resolve locates names without starting Python (package pyimport: the
// worker's command, the interpreter's layout, the environment and the
// site directories, as the worker's interpreter builds sys.path). It
// returns the location when that answer is certain, else nil and why
// not, and the interpreter is asked instead. settings are l.settings(names).
func (l *engineLocator) resolve(names []string, settings string, start time.Time) (*Location, string) {
	if len(l.Argv) == 0 || l.Path == "" {
		return nil, "the worker's command is not known"
	}
	version := ""
	if l.PyMinor > 0 {
		version = "3." + strconv.Itoa(l.PyMinor)
	}
	q := pyimport.Query{Argv: l.Argv, Path: l.Path, Env: l.Env.Get, Cwd: l.Dir, Home: func() string { return pyimport.HomeOf(os.Geteuid()) },
		SetID: os.Getuid() != os.Geteuid() || os.Getgid() != os.Getegid(), Version: version}
	a := pyimport.Resolve(q, names)
	how := a.Reason
	if a.NotPython && l.Python != "" {
		// The worker does not say which interpreter imports the engine
		// (a shell, a script of one): the probe would ask l.Python, with
		// -c, in the worker's directory and environment. Its question,
		// read the same way.
		q.Argv, q.Path = []string{l.Python, "-c", ""}, l.Python
		b := pyimport.Resolve(q, names)
		if !b.Certain {
			return nil, notCertain + a.Reason + "; and for the probe's own command: " + b.Reason
		}
		a, how = b, b.Reason+", as the probe asks it ("+a.Reason+")"
	}
	if !a.Certain {
		return nil, notCertain + a.Reason
	}
	loc := &Location{Interpreter: l.Python, SysPath: a.SysPath, SiteDirs: a.SiteDirs, Packages: map[string]Package{}, Located: "without starting Python: " + how}
	if m, ok := strings.CutPrefix(a.Version, "3."); ok {
		loc.PyMinor, _ = strconv.Atoi(m)
	}
	for _, n := range names {
		s, p := a.Specs[n], Package{Name: n, Others: a.Specs[n].Others}
		switch {
		case !s.Found:
			p.Why = fmt.Sprintf("%s is not importable with this interpreter, environment and working directory", n)
		case len(s.Locations) == 0:
			p.Why = fmt.Sprintf("%s is a module (%s), not a package", n, s.Origin)
		default:
			p.Found, p.Dirs, p.Dir = true, s.Locations, s.Locations[0]
		}
		loc.Packages[n] = p
	}
	if l.Dists != nil {
		loc.fillVersions(l.Dists, l.Dir)
	}
	// The same inputs as the probe's answer, with the worker's
	// interpreter in place of the probing one; the answer's sys.path is
	// part of the key (the options change it).
	rl := *l
	rl.Python, rl.listed = a.Interpreter, a.Listed
	// No start files: the resolver looks for them itself at every start,
	// and is not certain when one is there.
	if inputs, ok := rl.probeInputs(loc, nil); ok {
		loc.Fingerprint = fingerprint(settings+"\x00resolved:"+a.Interpreter+"\x00"+strings.Join(a.SysPath, "\x00"), inputs)
	}
	loc.Took = time.Since(start).Round(time.Microsecond).String()
	return loc, ""
}

// fromCache is the cached answer, when it still holds.
func (l *engineLocator) fromCache(names []string, settings string, start time.Time) (*Location, bool) {
	if l.CacheDir == "" {
		return nil, false
	}
	loc, ok := l.cached(l.cacheFile(names), settings)
	if ok {
		loc.Cached = true
		loc.Took = time.Since(start).Round(time.Microsecond).String()
	}
	return loc, ok
}

func (l *engineLocator) cacheFile(names []string) string {
	if l.CacheDir == "" {
		return ""
	}
	return filepath.Join(l.CacheDir, "probe-"+l.key(names)+".json")
}

// probe runs the interpreter and caches its answer; settings are
// l.settings(names).
func (l *engineLocator) probe(ctx context.Context, names []string, settings string, start time.Time) (*Location, error) {
	cacheFile := l.cacheFile(names)
	tick := fileid.Now() // before the interpreter reads any input
	loc, err := l.run(ctx, names)
	if err != nil {
		return nil, err
	}
	if l.Dists != nil {
		loc.fillVersions(l.Dists, l.Dir)
	}
	inputs, ok := l.probeInputs(loc, pyimport.StartFiles(l.Python))
	if ok {
		loc.Fingerprint = fingerprint(settings, inputs)
	}
	loc.Took = time.Since(start).Round(time.Microsecond).String()
	// Against start, not now: an input changed while the interpreter ran
	// would otherwise key facts decided from what it held before.
	if cacheFile != "" && ok && !racy(inputs, tick) {
		if b, err := json.Marshal(&cacheEntry{Version: probeVersion, Settings: settings, Inputs: inputs, Location: *loc}); err == nil {
			statedir.WriteCache(l.CacheDir, filepath.Base(cacheFile), b) // best effort: next start runs the probe again
		}
	}
	return loc, nil
}

func (l *engineLocator) run(ctx context.Context, names []string) (*Location, error) {
	// One deadline for the whole probe (INFERA_PYTHON_TIMEOUT x 3); none
	// when the caller gives none.
	if l.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.Timeout)
		defer cancel()
	}
	args := append(slices.Clone(l.Options), "-c", probeScript, cmp.Or(l.Path0, "c"))
	cmd := procgroup.Command(ctx, l.Python, append(args, names...)...)
	cmd.Env = l.Env.Slice()
	cmd.Dir = l.Dir
	var out, errb procgroup.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := procgroup.Run(ctx, cmd)
	if ctx.Err() == context.DeadlineExceeded {
		return nil, fmt.Errorf("%s did not answer where %s would be imported from within %s (3 x INFERA_PYTHON_TIMEOUT, for the whole probe)", l.Python, strings.Join(names, ", "), l.Timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("%s failed to locate %s (%v): %s", l.Python, strings.Join(names, ", "), err, tail(errb.String()))
	}
	loc, err := parseProbe(out.String(), names)
	if err != nil {
		return nil, fmt.Errorf("%s answered %q to the package probe: %v", l.Python, tail(out.String()), err)
	}
	loc.Interpreter = l.Python
	return loc, nil
}

// parseProbe reads the probe's records.
func parseProbe(out string, names []string) (*Location, error) {
	if out == "" {
		return nil, fmt.Errorf("no output")
	}
	loc := &Location{Packages: map[string]Package{}}
	var cur *Package
	flush := func() {
		if cur != nil {
			loc.Packages[cur.Name] = *cur
		}
	}
	for _, rec := range strings.Split(out, "\x00") {
		if rec == "" {
			return nil, fmt.Errorf("empty record")
		}
		kind, val := rec[0], rec[1:]
		switch {
		case kind == 'P':
			loc.SysPath = append(loc.SysPath, val)
		case kind == 'A':
			loc.SiteDirs = append(loc.SiteDirs, val)
		case kind == 'C' && cur == nil:
			loc.PycachePrefix = val
		case kind == 'V' && cur == nil:
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("record %q is no CPython minor", rec)
			}
			loc.PyMinor = n
		case kind == 'S':
			flush()
			cur = &Package{Name: val}
		case cur == nil:
			return nil, fmt.Errorf("record %q before any package", rec)
		case kind == 'N':
			cur.Why = fmt.Sprintf("%s is not importable with this interpreter, environment and working directory", cur.Name)
		case kind == 'E':
			cur.Why = fmt.Sprintf("finding %s raised %s", cur.Name, val)
		case kind == 'O':
			cur.Why = fmt.Sprintf("%s is a module (%s), not a package", cur.Name, val)
		case kind == 'L':
			cur.Found, cur.Why = true, ""
			cur.Dirs = append(cur.Dirs, val)
			cur.Dir = cur.Dirs[0]
		default:
			return nil, fmt.Errorf("unknown record %q", rec)
		}
	}
	flush()
	for _, n := range names {
		if _, ok := loc.Packages[n]; !ok {
			return nil, fmt.Errorf("no answer for %s", n)
		}
	}
	return loc, nil
}

// fingerprintEnv are the variables that change where Python imports from.
var fingerprintEnv = []string{"PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX",
	"PYTHONPLATLIBDIR", "PYTHONSTARTUP", "PYTHONEXECUTABLE", "__PYVENV_LAUNCHER__", "VIRTUAL_ENV", "CONDA_PREFIX", "HOME", "PATH", "PYENV_VERSION", "PYENV_ROOT",
	// How .pth bytes outside ASCII decode, and paths encode: the locale and
	// the UTF-8 Mode (pyimport's pthCodec).
	"LC_ALL", "LC_CTYPE", "LANG", "LOCPATH", "PYTHONUTF8", "PYTHONCOERCECLOCALE"}

// settings are the probe's inputs that are not files: its version, the
// interpreter's path, the variables above, the working directory, the
// names asked for and the distributions whose versions are read.
func (l *engineLocator) settings(names []string) string {
	h := &strings.Builder{}
	for _, s := range []string{"v", probeVersion, "\x00", l.Python, "\x00options=", strings.Join(l.Options, "\x01"), "\x00path0=", l.Path0, "\x00cwd=", l.Dir, "\x00names=", strings.Join(names, ","), "\x00"} {
		h.WriteString(s)
	}
	for _, k := range fingerprintEnv {
		v, ok := l.Env.Get(k)
		h.WriteString(k + "=" + strconv.FormatBool(ok) + ":" + v + "\x00")
	}
	dists := make([]string, 0, len(l.Dists))
	for n, d := range l.Dists {
		dists = append(dists, n+"="+d)
	}
	sort.Strings(dists)
	fmt.Fprintf(h, "dists=%s", strings.Join(dists, ","))
	return h.String()
}

// probeInputs lists every file and directory whose change can change the
// probe's answer, with its identity now:
//
//   - the interpreter (the link and what it names), the pyvenv.cfg
//     files beside it, which decide the site directories, and
//     startFiles, the files getpath looks for before it computes sys.path
//     (._pth files, build directory markers: pyimport.StartFiles);
//   - the working directory and each sys.path entry: adding, removing or
//     renaming anything in a directory (a package, a .pth file, an
//     editable finder, a dist-info) moves its mtime and ctime;
//   - the absences that would change the answer by appearing: each site
//     directory Python adds only when it exists (the prefixes', the user
//     site: Location.SiteDirs) and each directory a .pth file names (site
//     adds it only when it exists);
//   - in each of those directories, the files whose content decides
//     resolution without touching the directory when edited in place:
//     .pth, .egg-link, editable finders (__editable__*),
//     sitecustomize.py and usercustomize.py;
//   - each package directory, the directory its dist-info is looked for
//     beside, and the METADATA its version came from.
//
// The interpreter binary (megabytes) is summed by its GNU build ID rather
// than read whole (fileid.SumList), which a new mount of the same image
// keeps. ok is false when some input cannot be stat'ed (then nothing is
// cached).
func (l *engineLocator) probeInputs(loc *Location, startFiles []string) ([]cachedIdentity, bool) {
	var out []cachedIdentity
	type seenKey struct {
		path string
		link bool
	}
	seen := map[seenKey]bool{}
	ok := true
	buf := &fileid.Buffer{Listed: l.listed}
	// The entries each directory's sum digested: the scan below looks
	// through the same listing rather than reading the directory again.
	listed := map[string][]os.DirEntry{}
	addAs := func(p string, link bool) {
		c := cachedIdentity{Path: p, Link: link}
		if seen[seenKey{p, link}] {
			return
		}
		seen[seenKey{p, link}] = true
		var good bool
		var entries []os.DirEntry
		c.Sum, c.ID, entries, good = fileid.SumList(p, !link, fileid.LargeByBuildID, buf)
		if entries != nil || good && c.ID.Absent {
			listed[p] = entries // none to look through in an absent path
		}
		ok = ok && good
		out = append(out, c)
	}
	add := func(p string) { addAs(p, false) }
	// The interpreter as a link, when it is one (a regular file is the
	// entry below, which follows links: its sum names where they lead).
	if id, _ := fileid.Lstat(l.Python); id.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		addAs(l.Python, true)
	}
	add(l.Python) // what the link names
	pyDir := filepath.Dir(l.Python)
	add(filepath.Join(pyDir, "pyvenv.cfg"))
	add(filepath.Join(filepath.Dir(pyDir), "pyvenv.cfg"))
	for _, p := range startFiles {
		add(p) // absent, unless the probe answered with one there
	}
	add(l.Dir)
	scanned := map[string]bool{}
	for _, p := range append(slices.Clone(loc.SysPath), loc.SiteDirs...) {
		if p == "" {
			p = l.Dir
		}
		add(p)
		if scanned[p] {
			continue // a directory both on sys.path and a site directory is looked through once
		}
		scanned[p] = true
		entries, have := listed[p]
		if !have {
			var err error
			if entries, err = os.ReadDir(p); err != nil {
				continue // absent (its identity says so), or a zip file
			}
		}
		for _, e := range entries {
			n := e.Name()
			if strings.HasSuffix(n, ".pth") || strings.HasSuffix(n, ".egg-link") || strings.HasPrefix(n, "__editable__") ||
				n == "sitecustomize.py" || n == "usercustomize.py" {
				add(filepath.Join(p, n))
			}
			if strings.HasSuffix(n, ".pth") {
				dirs, named := pthDirs(p, filepath.Join(p, n))
				ok = ok && named
				for _, d := range dirs {
					add(d)
				}
			}
		}
	}
	names := make([]string, 0, len(loc.Packages))
	for n := range loc.Packages {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		pkg := loc.Packages[n]
		for _, d := range pkg.Dirs {
			add(d)
		}
		if pkg.Dir != "" {
			add(filepath.Dir(pkg.Dir))
		}
		if pkg.VersionFrom != "" {
			add(pkg.VersionFrom)
		}
	}
	return out, ok
}

// pthDirs are the directories a .pth file in site directory dir names, as
// site.addpackage reads them (each line that is neither blank, a comment
// nor an import, right-stripped, joined to dir), present or not: site adds
// the ones that exist. A file that cannot be read names none (its own
// identity is an input). named is false when a line names a directory
// with bytes outside ASCII: which name the interpreter looks for then
// depends on how it decodes the file in the worker's locale (pyimport's
// pthCodec), so its absence cannot be an input, and nothing is cached.
func pthDirs(dir, file string) (dirs []string, named bool) {
	data, err := boundedread.File(file, boundedread.SmallText)
	if err != nil {
		return nil, true
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "import ") || strings.HasPrefix(line, "import\t") {
			continue
		}
		line = strings.TrimRight(line, " \t\r\n\f\v")
		if strings.TrimSpace(line) == "" {
			continue
		}
		for i := 0; i < len(line); i++ {
			if line[i] >= 0x80 {
				return nil, false
			}
		}
		p := line
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		out = append(out, filepath.Clean(p))
	}
	return out, true
}

// fingerprint digests settings and input identities: the probe's part of
// the key of anything recorded about the packages it located.
//
// It digests what a new mount of the same image keeps (the portable
// identities and the sums), so that the record keyed on it survives one.
func fingerprint(settings string, inputs []cachedIdentity) string {
	b := make([]byte, 0, len(settings)+len(inputs)*160)
	b = append(b, settings...)
	for _, in := range inputs {
		b = append(append(append(b, 0), in.Path...), ':')
		if in.Link {
			b = append(b, "link "...)
		}
		b = in.ID.Portable().AppendKey(b)
		b = append(append(b, ' '), in.Sum...)
	}
	return digest.Bytes(b)
}

// racy: some input was changed too recently before the probe began for
// its identity to vouch for what the interpreter read (fileid.SettledAt).
func racy(inputs []cachedIdentity, start fileid.Tick) bool {
	for _, in := range inputs {
		if !in.ID.SettledAt(start) {
			return true
		}
	}
	return false
}

func (l *engineLocator) key(names []string) string {
	return digest.Bytes([]byte(l.Python + "\x00" + strings.Join(l.Options, "\x01") + "\x00" + l.Path0 + "\x00" + l.Dir + "\x00" + strings.Join(names, ",")))[:16]
}

// cached returns the recorded answer when the cache file is trusted and
// every input it was decided by is unchanged: the settings are equal, and
// each recorded path has the identity it had (so no .pth file, finder,
// package or dist-info came, went or changed).
func (l *engineLocator) cached(file, settings string) (*Location, bool) {
	data, ok := statedir.ReadCache(l.CacheDir, filepath.Base(file), maxStateBytes)
	if !ok {
		return nil, false
	}
	var c cacheEntry
	if json.Unmarshal(data, &c) != nil || c.Version != probeVersion || c.Location.Packages == nil || c.Settings != settings {
		return nil, false
	}
	buf := &fileid.Buffer{}
	for _, in := range c.Inputs {
		if !in.holds(buf) {
			return nil, false
		}
	}
	c.Location.Fingerprint = fingerprint(c.Settings, c.Inputs)
	return &c.Location, true
}

// distVersion finds <dist>-<version>.dist-info/METADATA (or an .egg-info
// PKG-INFO) in the given directories and returns its Version field.
func distVersion(dist string, dirs []string) (version, from string) {
	return distinfo.Version(dist, dirs)
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return s
}
