// Package sitepath answers where the CPython installations of a root
// filesystem import from, without running them: sys.path as CPython's
// getpath and site.py build it (the standard library, the user site, the
// site directories of CPython's getsitepackages, or of Debian's patched
// one, and of venvs), and which entry of such a path a top-level name is
// imported from, by the import system's rules. The shim's offline patch
// check (--check ROOT), its shadowing check and the payload build tools
// (harvest, prune) all take their search order from here.
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

// UserHome is the home directory whose user site is counted: workers run
// as root in the images infera-exec serves.
const UserHome = "/root"

// SitePackages are the site directories of the interpreter in the order
// site.py adds them (before it checks that they exist): a venv's own,
// the user site of home ("" = none), then the installation's. Debian's
// site.py gives, for /usr and Python 3.X: /usr/local/lib/python3.X/
// dist-packages, /usr/lib/python3/dist-packages, /usr/lib/python3.X/
// dist-packages; CPython's gives PREFIX/lib/python3.X/site-packages.
func (in Interpreter) SitePackages(home string) []string {
	var out []string
	add := func(ps ...string) {
		for _, p := range ps {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	user := ""
	if home != "" {
		user = path.Join(home, ".local/lib/python"+in.Version, "site-packages")
	}
	if in.Venv {
		add(in.getsitepackages(in.Prefix)...)
		if !in.SystemSite {
			return out
		}
	}
	if user != "" {
		add(user)
	}
	if in.Venv {
		add(in.getsitepackages(in.Prefix)...)
	}
	add(in.getsitepackages(in.Base)...)
	return out
}

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

// SysPath is the interpreter's sys.path inside root after site ran, as
// `python3 -c 'import sys; print(sys.path)'` prints it without the
// script's directory and PYTHONPATH: the standard library, then every
// site directory that exists in root, each followed by the existing
// directories its .pth files name (in file name order). root is the
// host path of the image root; entries are paths inside it.
func (in Interpreter) SysPath(root, home string) []string {
	out := in.StdLib()
	for _, s := range in.SitePackages(home) {
		if !isDir(filepath.Join(root, s)) {
			continue
		}
		for _, e := range append([]string{s}, PthEntries(root, s)...) {
			if !slices.Contains(out, e) {
				out = append(out, e)
			}
		}
	}
	return out
}

// PthEntries are the directories the .pth files of site directory site
// (a path inside root) add, as site.addpackage does: in .pth file name
// order, lines that are neither comments nor import statements, relative
// ones taken from site, and only those that exist.
func PthEntries(root, site string) []string {
	hostSite := filepath.Join(root, site)
	entries, err := os.ReadDir(hostSite)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries { // ReadDir sorts by name, as site.addsitedir does
		if !strings.HasSuffix(e.Name(), ".pth") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		for _, line := range PthLines(filepath.Join(hostSite, e.Name())) {
			p := line
			if !path.IsAbs(p) {
				p = path.Join(site, p)
			}
			p = path.Clean(p)
			if isDir(filepath.Join(root, p)) && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// PthLines are the path lines of a .pth file: neither blank, nor
// comments, nor "import" statements (which site executes).
func PthLines(file string) []string {
	data, err := boundedread.File(file, boundedread.SmallText)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimRight(l, " \t\r")
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "import ") || strings.HasPrefix(l, "import\t") {
			continue
		}
		out = append(out, l)
	}
	return out
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
			in.Venv, in.SystemSite = true, cfg["include-system-site-packages"] == "true"
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

// SiteDirs are the site directories of every installation of root that
// exist, as host paths: each installation's in its site.py order, the
// installations in Find's order, each directory once.
func SiteDirs(root string) []string {
	var out []string
	for _, in := range Find(root) {
		for _, s := range in.SitePackages(UserHome) {
			hp := filepath.Join(root, s)
			if isDir(hp) && !slices.Contains(out, hp) {
				out = append(out, hp)
			}
		}
	}
	return out
}

// SiteDirsAt are the site directories, as host paths, of the
// installations at prefix (a path inside root: a venv such as
// /app/.venv, a conda environment, an installation's prefix), in
// SiteDirs' order; none when prefix holds no CPython installation.
func SiteDirsAt(root, prefix string) []string {
	var out []string
	for _, in := range atPrefix(root, path.Clean("/"+prefix)) {
		for _, s := range in.SitePackages(UserHome) {
			hp := filepath.Join(root, s)
			if isDir(hp) && !slices.Contains(out, hp) {
				out = append(out, hp)
			}
		}
	}
	return out
}

// SearchPath is the sys.path of every installation of root, joined in
// Find's order, each entry once, as host paths of existing directories
// (what a lookup of a name in the image walks).
func SearchPath(root string) []string {
	var out []string
	for _, in := range Find(root) {
		for _, e := range in.SysPath(root, UserHome) {
			hp := filepath.Join(root, e)
			if isDir(hp) && !slices.Contains(out, hp) {
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
