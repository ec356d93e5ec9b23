// Package sitepath answers which CPython installations a root filesystem
// holds by their directories (Find), which site directories
// site.getsitepackages gives for a prefix (CPython's, or Debian's patched
// one), the standard library's entries, and which entry of a sys.path a
// top-level name is imported from, by the import system's rules
// (Resolve). Package pyimport builds sys.path from these, for the start
// and for the offline lookups alike.
package sitepath

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/infera/infera-exec/internal/boundedread"
)

// Interpreter is one CPython installation of a root, as its site.py
// sees itself. Paths are inside the root ("/usr/lib/python3.11").
type Interpreter struct {
	Prefix     string // sys.prefix: the venv's directory for a venv
	Base       string // sys.base_prefix: the installation the stdlib comes from
	Version    string // "3.11"
	Debian     bool   // site.py is Debian's: dist-packages, not site-packages
	PlatLibDir string // sys.platlibdir: "lib", or "lib64" (Fedora)
	Venv       bool   // Prefix holds a pyvenv.cfg
	SystemSite bool   // a venv's include-system-site-packages
}

// UserHome is the home directory whose user site the offline lookups
// count: workers run as root in the images infera-exec serves.
const UserHome = "/root"

// PrefixSites are the site directories site.getsitepackages gives for
// one prefix of the interpreter, present or not, in its order.
func (in Interpreter) PrefixSites(prefix string) []string { return in.getsitepackages(prefix) }

// getsitepackages is site.getsitepackages for one prefix.
func (in Interpreter) getsitepackages(prefix string) []string {
	py := "python" + in.Version
	libdirs := []string{in.platlib()}
	if libdirs[0] != "lib" {
		libdirs = append(libdirs, "lib")
	}
	var out []string
	if !in.Debian {
		for _, l := range libdirs {
			out = append(out, path.Join(prefix, l, py, "site-packages"))
		}
		return out
	}
	if in.Venv {
		out = append(out, path.Join(prefix, "lib", py, "site-packages"))
	}
	out = append(out, path.Join(prefix, "local/lib", py, "dist-packages"), path.Join(prefix, "lib/python3/dist-packages"))
	for _, l := range libdirs {
		out = append(out, path.Join(prefix, l, py, "dist-packages"))
	}
	return out
}

func (in Interpreter) platlib() string {
	if in.PlatLibDir == "" {
		return "lib"
	}
	return in.PlatLibDir
}

// StdLib are the standard library's entries of sys.path, in order: the
// zip archive (listed whether or not it exists, as getpath does), the
// library directory and lib-dynload.
func (in Interpreter) StdLib() []string {
	lib := path.Join(in.Base, in.platlib())
	return []string{
		path.Join(lib, "python"+strings.ReplaceAll(in.Version, ".", "")+".zip"),
		path.Join(lib, "python"+in.Version),
		path.Join(lib, "python"+in.Version, "lib-dynload"),
	}
}

// Compiled on first use: every start imports this package, few use it.
var (
	pyDirRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^python(3\.\d+)$`) })
	pyExeRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`python(3\.\d+)$`) })
)

// prefixGlobs are where installations live, in the order they are
// preferred: venvs and conda environments under /opt (an image that has
// one puts its bin/ first on PATH), a build in /usr/local (before /usr
// on every default PATH), the distribution's /usr.
var prefixGlobs = []string{"opt/*/envs/*", "opt/*", "usr/local", "usr"}

// Find lists the CPython installations of root, most preferred first.
// An installation is a prefix with lib/python3.X; a venv is one with a
// pyvenv.cfg; Debian's is one whose site.py reads dist-packages (or,
// without a site.py to read, whose only site directories are
// dist-packages). /usr/local/lib/python3.X/dist-packages belongs to the
// /usr Python of Debian, not to an installation of its own.
func Find(root string) []Interpreter {
	var out []Interpreter
	seen := map[string]bool{}
	for _, g := range prefixGlobs {
		prefixes, _ := filepath.Glob(filepath.Join(root, g))
		sort.Strings(prefixes)
		for _, hp := range prefixes {
			rel, _ := filepath.Rel(root, hp)
			prefix := "/" + filepath.ToSlash(rel)
			if seen[prefix] || !isDir(hp) {
				continue
			}
			seen[prefix] = true
			out = append(out, atPrefix(root, prefix)...)
		}
	}
	return out
}

// atPrefix are the installations of one prefix, one per version, the
// version its bin/python3 runs first, then newest first.
func atPrefix(root, prefix string) []Interpreter {
	versions := map[string]string{} // version -> platlibdir
	for _, l := range []string{"lib64", "lib"} {
		entries, _ := os.ReadDir(filepath.Join(root, prefix, l))
		for _, e := range entries {
			if m := pyDirRE().FindStringSubmatch(e.Name()); m != nil && isDir(filepath.Join(root, prefix, l, e.Name())) {
				if l == "lib64" && !isFile(filepath.Join(root, prefix, l, e.Name(), "os.py")) {
					continue
				}
				if _, ok := versions[m[1]]; !ok {
					versions[m[1]] = l
				}
			}
		}
	}
	if prefix == "/usr" {
		// Debian's /usr Python also owns /usr/local/lib/python3.X/dist-packages.
		entries, _ := os.ReadDir(filepath.Join(root, "usr/local/lib"))
		for _, e := range entries {
			if m := pyDirRE().FindStringSubmatch(e.Name()); m != nil && isDir(filepath.Join(root, "usr/local/lib", e.Name(), "dist-packages")) && !ownInstallation(root, "/usr/local", m[1], "lib") {
				if _, ok := versions[m[1]]; !ok {
					versions[m[1]] = "lib"
				}
			}
		}
	}
	cfg := readVenvCfg(filepath.Join(root, prefix, "pyvenv.cfg"))
	var out []Interpreter
	for v, plat := range versions {
		in := Interpreter{Prefix: prefix, Base: prefix, Version: v, PlatLibDir: plat}
		if cfg != nil {
			sys, given := cfg["include-system-site-packages"]
			in.Venv, in.SystemSite = true, !given || sys == "true" // site.py: true unless given otherwise (empty included)
			if home := cfg["home"]; home != "" {
				in.Base = path.Dir(path.Clean(home))
			}
			in.Debian = DebianSite(root, in.Base, v, plat)
		} else {
			if prefix == "/usr/local" && !ownInstallation(root, prefix, v, plat) {
				continue
			}
			in.Debian = DebianSite(root, prefix, v, plat)
		}
		out = append(out, in)
	}
	def := defaultVersion(root, prefix)
	sort.Slice(out, func(i, j int) bool {
		if (out[i].Version == def) != (out[j].Version == def) {
			return out[i].Version == def
		}
		return versionLess(out[j].Version, out[i].Version)
	})
	return out
}

// ownInstallation says whether /usr/local/lib/python3.X is a Python of
// its own (a standard library or a site-packages directory), not just
// Debian's dist-packages for /usr's.
func ownInstallation(root, prefix, v, plat string) bool {
	lib := filepath.Join(root, prefix, plat, "python"+v)
	return isFile(filepath.Join(lib, "os.py")) || isDir(filepath.Join(lib, "site-packages"))
}

// DebianSite says whether the installation at prefix runs Debian's
// site.py: its text names dist-packages. Without a site.py to read (a
// root holding site directories only) it is Debian's when it is /usr (the
// only prefix Debian installs Python into) with dist-packages
// directories and no site-packages one.
func DebianSite(root, prefix, v, plat string) bool {
	lib := filepath.Join(root, prefix, plat, "python"+v)
	if data, err := boundedread.File(filepath.Join(lib, "site.py"), boundedread.SmallText); err == nil {
		return bytes.Contains(data, []byte(`"dist-packages"`))
	}
	if prefix != "/usr" || isDir(filepath.Join(lib, "site-packages")) {
		return false
	}
	for _, d := range []string{filepath.Join(lib, "dist-packages"), filepath.Join(root, prefix, "lib/python3/dist-packages"), filepath.Join(root, prefix, "local/lib", "python"+v, "dist-packages")} {
		if isDir(d) {
			return true
		}
	}
	return false
}

// defaultVersion is the version PREFIX/bin/python3 runs, read from where
// its link chain leads ("python3 -> python3.11"), "" when unknown.
func defaultVersion(root, prefix string) string {
	p := path.Join(prefix, "bin/python3")
	for range 8 {
		t, err := os.Readlink(filepath.Join(root, p))
		if err != nil {
			break
		}
		if !path.IsAbs(t) {
			t = path.Join(path.Dir(p), t)
		}
		p = t
	}
	if m := pyExeRE().FindStringSubmatch(p); m != nil {
		return m[1]
	}
	return ""
}

func versionLess(a, b string) bool {
	_, am, _ := strings.Cut(a, ".")
	_, bm, _ := strings.Cut(b, ".")
	x, _ := strconv.Atoi(am)
	y, _ := strconv.Atoi(bm)
	return x < y
}

// readVenvCfg reads pyvenv.cfg's "key = value" lines, keys lower case;
// nil when there is none.
func readVenvCfg(file string) map[string]string {
	data, err := boundedread.File(file, boundedread.SmallText)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	if v := out["include-system-site-packages"]; v != "" {
		out["include-system-site-packages"] = strings.ToLower(v)
	}
	return out
}

// SiteDirsAt are the site directories, as host paths, that
// site.getsitepackages gives the installations at prefix (a path inside
// root: a venv such as /app/.venv, an installation's prefix), read from
// their lib/python3.X directories whether or not an interpreter there can
// be run; none when prefix holds no CPython installation.
func SiteDirsAt(root, prefix string) []string {
	var out []string
	for _, in := range atPrefix(root, path.Clean("/"+prefix)) {
		for _, s := range in.PrefixSites(in.Prefix) {
			if hp := filepath.Join(root, s); isDir(hp) && !slices.Contains(out, hp) {
				out = append(out, hp)
			}
		}
	}
	return out
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
