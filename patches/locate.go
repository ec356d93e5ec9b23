package patches

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/infera/infera-exec/atomicfile"
	"github.com/infera/infera-exec/distinfo"
	"github.com/infera/infera-exec/environ"
	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/procgroup"
)

// Package is where an import name resolves for the worker.
type Package struct {
	Name        string   `json:"name"`
	Found       bool     `json:"found"`
	Dir         string   `json:"dir,omitempty"`     // the package directory edits are relative to
	Dirs        []string `json:"dirs,omitempty"`    // all portions of a namespace package
	Version     string   `json:"version,omitempty"` // from *.dist-info/METADATA
	VersionFrom string   `json:"version_from,omitempty"`
	Why         string   `json:"why,omitempty"` // when not found
}

// Location is the answer of one interpreter run (or its cached copy).
type Location struct {
	Interpreter string             `json:"interpreter"`
	SysPath     []string           `json:"sys_path"`
	Packages    map[string]Package `json:"packages"`
	Cached      bool               `json:"cached"`
	Took        string             `json:"took"`
}

// probeScript asks the import system where each name on argv would come
// from, without importing it: for a top-level name this is what
// importlib.util.find_spec does (the module already in sys.modules, else
// the first finder on sys.meta_path that knows it, which covers sys.path
// and PEP 660 editable finders), but it runs the package's __init__ no
// more than find_spec does and imports nothing itself (json and
// importlib.util alone would add a third to the interpreter's start).
// It is run exactly as the worker's `python3 -m` is: same interpreter,
// environment and working directory (” first on sys.path). The answer is
// NUL-separated records: P<sys.path entry>, S<name>, then N (not found),
// E<error>, or O<origin> and L<location>... for the name.
const probeScript = `import sys
out = ["P" + p for p in sys.path]
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
const probeVersion = "2"

// Locator runs the probe.
type Locator struct {
	Python   string        // resolved interpreter path
	Env      *environ.Env  // the worker's final environment
	Dir      string        // the worker's final working directory
	Timeout  time.Duration // for the interpreter
	CacheDir string        // where the probe's answer is kept; "" = no cache
}

type probeAnswer struct {
	SysPath []string                    `json:"sys_path"`
	Specs   map[string]*json.RawMessage `json:"specs"`
}

type spec struct {
	Origin    *string  `json:"origin"`
	Locations []string `json:"locations"`
	Error     string   `json:"error"`
}

type cacheEntry struct {
	Fingerprint string   `json:"fingerprint"`
	Location    Location `json:"location"`
}

// Locate resolves names. It reuses the last answer when nothing that
// decides import resolution has changed (see fingerprint), else runs the
// interpreter once.
func (l *Locator) Locate(ctx context.Context, names []string) (*Location, error) {
	start := time.Now()
	cacheFile := ""
	if l.CacheDir != "" {
		cacheFile = filepath.Join(l.CacheDir, "probe-"+l.key(names)+".json")
		if loc, ok := l.cached(cacheFile); ok {
			loc.Cached = true
			loc.Took = time.Since(start).Round(time.Microsecond).String()
			return loc, nil
		}
	}
	loc, err := l.run(ctx, names)
	if err != nil {
		return nil, err
	}
	loc.Took = time.Since(start).Round(time.Microsecond).String()
	if cacheFile != "" {
		if b, err := json.Marshal(cacheEntry{Fingerprint: l.fingerprint(loc.SysPath, loc.Packages), Location: *loc}); err == nil {
			if os.MkdirAll(l.CacheDir, 0o755) == nil {
				atomicfile.WriteBytes(cacheFile, b, atomicfile.Options{Mode: 0o644}) // best effort: next start runs the probe again
			}
		}
	}
	return loc, nil
}

func (l *Locator) run(ctx context.Context, names []string) (*Location, error) {
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := procgroup.Command(ctx, l.Python, append([]string{"-c", probeScript}, names...)...)
	cmd.Env = l.Env.Slice()
	cmd.Dir = l.Dir
	var out, errb procgroup.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := procgroup.Run(ctx, cmd)
	if ctx.Err() == context.DeadlineExceeded {
		return nil, fmt.Errorf("%s did not answer where %s would be imported from within %s", l.Python, strings.Join(names, ", "), timeout)
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
var fingerprintEnv = []string{"PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
	"PYTHONPLATLIBDIR", "PYTHONNOUSERSITE", "VIRTUAL_ENV", "CONDA_PREFIX", "HOME", "PATH", "PYENV_VERSION", "PYENV_ROOT"}

// fingerprint covers everything that decides the probe's answer: the
// interpreter file, the variables above, the working directory, and each
// sys.path entry and package directory. Installing, removing or editing a
// package, adding a .pth file or an editable finder all change the
// directory they happen in (its mtime and, for a replaced directory, its
// inode), so a changed answer always shows in the fingerprint.
func (l *Locator) fingerprint(sysPath []string, pkgs map[string]Package) string {
	h := &strings.Builder{}
	fmt.Fprintf(h, "v%s\x00%s\x00%s\x00", probeVersion, l.Python, statKey(l.Python))
	for _, k := range fingerprintEnv {
		v, ok := l.Env.Get(k)
		fmt.Fprintf(h, "%s=%t:%s\x00", k, ok, v)
	}
	fmt.Fprintf(h, "cwd=%s:%s\x00", l.Dir, statKey(l.Dir))
	for _, p := range sysPath {
		if p == "" {
			p = l.Dir
		}
		fmt.Fprintf(h, "path=%s:%s\x00", p, statKey(p))
	}
	names := make([]string, 0, len(pkgs))
	for n := range pkgs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, d := range pkgs[n].Dirs {
			fmt.Fprintf(h, "pkg=%s:%s:%s\x00", n, d, statKey(d))
		}
	}
	return digest.Bytes([]byte(h.String()))
}

func statKey(p string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return "absent"
	}
	return fmt.Sprintf("%d:%d:%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
}

func (l *Locator) key(names []string) string {
	return digest.Bytes([]byte(l.Python + "\x00" + l.Dir + "\x00" + strings.Join(names, ",")))[:16]
}

func (l *Locator) cached(file string) (*Location, bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, false
	}
	var c cacheEntry
	if json.Unmarshal(data, &c) != nil || c.Location.Packages == nil {
		return nil, false
	}
	if c.Fingerprint != l.fingerprint(c.Location.SysPath, c.Location.Packages) {
		return nil, false
	}
	return &c.Location, true
}

// DistVersion finds <dist>-<version>.dist-info/METADATA (or an .egg-info
// PKG-INFO) in the given directories and returns its Version field.
func DistVersion(dist string, dirs []string) (version, from string) {
	return distinfo.Version(dist, dirs)
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return s
}
