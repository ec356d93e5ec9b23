package patches

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/infera/infera-exec/atomicfile"
	"github.com/infera/infera-exec/environ"
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
// from, without importing it: find_spec on a top-level name runs the path
// finders (and PEP 660 editable finders on sys.meta_path) but not the
// package's __init__. It is run exactly as the worker's `python3 -m` is:
// same interpreter, environment and working directory (” on sys.path).
const probeScript = `import sys, json
from importlib.util import find_spec
out = {"sys_path": [p for p in sys.path], "specs": {}}
for name in sys.argv[1:]:
    try:
        s = find_spec(name)
    except Exception as e:
        out["specs"][name] = {"error": "%s: %s" % (type(e).__name__, e)}
        continue
    if s is None:
        out["specs"][name] = None
        continue
    out["specs"][name] = {"origin": s.origin, "locations": list(s.submodule_search_locations or [])}
sys.stdout.write(json.dumps(out))
`

// probeVersion changes when the script or the cache format changes.
const probeVersion = "1"

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
	cmd := exec.CommandContext(ctx, l.Python, append([]string{"-c", probeScript}, names...)...)
	cmd.Env = l.Env.Slice()
	cmd.Dir = l.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return nil, fmt.Errorf("%s did not answer where %s would be imported from within %s", l.Python, strings.Join(names, ", "), timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("%s failed to locate %s (%v): %s", l.Python, strings.Join(names, ", "), err, tail(errb.String()))
	}
	var ans probeAnswer
	if err := json.Unmarshal(out.Bytes(), &ans); err != nil {
		return nil, fmt.Errorf("%s answered %q to the package probe, not JSON", l.Python, tail(out.String()))
	}
	loc := &Location{Interpreter: l.Python, SysPath: ans.SysPath, Packages: map[string]Package{}}
	for _, n := range names {
		p := Package{Name: n}
		raw := ans.Specs[n]
		var s *spec
		if raw != nil {
			if err := json.Unmarshal(*raw, &s); err != nil {
				return nil, fmt.Errorf("package probe for %s: %w", n, err)
			}
		}
		switch {
		case s == nil:
			p.Why = fmt.Sprintf("%s is not importable with this interpreter, environment and working directory", n)
		case s.Error != "":
			p.Why = fmt.Sprintf("finding %s raised %s", n, s.Error)
		case len(s.Locations) == 0:
			p.Why = fmt.Sprintf("%s is a module (%s), not a package", n, deref(s.Origin))
		default:
			p.Found = true
			p.Dirs = s.Locations
			p.Dir = s.Locations[0]
		}
		loc.Packages[n] = p
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
	h := sha256.New()
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
	return hex.EncodeToString(h.Sum(nil))
}

func statKey(p string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		return "absent"
	}
	return fmt.Sprintf("%d:%d:%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
}

func (l *Locator) key(names []string) string {
	h := sha256.Sum256([]byte(l.Python + "\x00" + l.Dir + "\x00" + strings.Join(names, ",")))
	return hex.EncodeToString(h[:8])
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
// PKG-INFO) in the given directories and returns its Version field. Reading
// it here is ~1000 times cheaper than importlib.metadata in Python.
func DistVersion(dist string, dirs []string) (version, from string) {
	want := normalizeDist(dist)
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			var meta string
			switch {
			case strings.HasSuffix(name, ".dist-info"):
				meta = "METADATA"
			case strings.HasSuffix(name, ".egg-info"):
				meta = "PKG-INFO"
			default:
				continue
			}
			base := strings.TrimSuffix(strings.TrimSuffix(name, ".dist-info"), ".egg-info")
			distPart, _, _ := strings.Cut(base, "-")
			if normalizeDist(distPart) != want {
				continue
			}
			f := filepath.Join(dir, name, meta)
			if v := metadataVersion(f); v != "" {
				return v, f
			}
		}
	}
	return "", ""
}

var distNormRE = regexp.MustCompile(`[-_.]+`)

func normalizeDist(s string) string { return strings.ToLower(distNormRE.ReplaceAllString(s, "_")) }

// metadataVersion reads the Version header of a core metadata file; the
// headers end at the first empty line.
func metadataVersion(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if v, ok := strings.CutPrefix(line, "Version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return "built-in"
	}
	return *s
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return s
}
