package pyimport

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/infera/infera-exec/internal/sitepath"
)

// majorMinor is the "3.X" a version string such as pyvenv.cfg's
// ("3.11.2", "3.11") begins with, followed by a dot or nothing; "" when
// it does not.
func majorMinor(v string) string {
	rest, ok := strings.CutPrefix(v, "3.")
	if !ok {
		return ""
	}
	n := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
	if n == 0 || n < len(rest) && rest[n] != '.' {
		return ""
	}
	return v[:2+n]
}

// layout finds the installation the interpreter runs, as CPython's getpath
// does on POSIX: a pyvenv.cfg beside the executable or one directory up
// makes it a venv whose `home` is where the base installation is searched
// from; otherwise the search starts beside the executable with its links
// resolved, or PYTHONHOME names the prefix. The prefix is the first
// directory upwards holding lib/python3.X/os.py. It fails for any layout
// it cannot place with certainty (._pth files, a build directory, a
// lib64 platlibdir, PYTHONHOME with a venv, another executable named by
// PYTHONEXECUTABLE, no standard library found).
func layout(fs fsys, c Command, env Env, want string) (sitepath.Interpreter, error) {
	var in sitepath.Interpreter
	exe := filepath.Clean(c.Executable)
	real, err := fs.evalSymlinks(exe)
	if err != nil {
		return in, fmt.Errorf("resolving the links of the interpreter %s: %w", exe, err)
	}
	// Read even under -E and -I, these put another path in the place of
	// the executable getpath looks for pyvenv.cfg and ._pth files beside.
	for _, k := range []string{"PYTHONEXECUTABLE", "__PYVENV_LAUNCHER__"} {
		if v, ok := env(k); ok && v != "" {
			return in, fmt.Errorf("%s=%s changes the executable getpath starts from", k, v)
		}
	}
	home := ""
	if v, ok := getenv(env, c.Flags, "PYTHONHOME"); ok && v != "" {
		home = v
	}
	if v, ok := getenv(env, c.Flags, "PYTHONPLATLIBDIR"); ok && v != "" {
		return in, fmt.Errorf("PYTHONPLATLIBDIR=%s changes the library directory", v)
	}
	cfgFile, err := venvCfg(fs, exe)
	if err != nil {
		return in, err
	}
	var cfg map[string]string
	if cfgFile != "" {
		if cfg, err = readCfg(fs, cfgFile); err != nil {
			return in, err
		}
	}
	version := ""
	if m := majorMinor(cfg["version"]); m != "" {
		version = m
	} else if b := filepath.Base(real); strings.HasPrefix(b, "python3.") {
		version = strings.TrimPrefix(b, "python")
	}
	var bases []string
	if cfg != nil {
		v := version
		if v == "" {
			v = want
		}
		b, err := baseExecutable(fs, exe, real, cfg["home"], v)
		if err != nil {
			return in, err
		}
		bases = []string{b}
	}
	for _, f := range startFiles(fs, exe, real, cfg["home"], bases) {
		if !fs.exists(f.path) {
			continue
		}
		if f.pth {
			return in, fmt.Errorf("%s is a ._pth file, which replaces sys.path", f.path)
		}
		return in, fmt.Errorf("%s runs from a build directory (%s)", exe, f.path)
	}
	start := filepath.Dir(real)
	if cfg != nil {
		if home != "" {
			return in, fmt.Errorf("PYTHONHOME=%s with the venv of %s", home, cfgFile)
		}
		start = cfg["home"]
		if !filepath.IsAbs(start) {
			return in, fmt.Errorf("%s has no absolute home (%q)", cfgFile, start)
		}
		in.Venv = true
		in.Prefix = filepath.Dir(filepath.Dir(exe))
		// site.py: true unless the key is there with another value
		// (an empty one included), compared in lower case.
		sys, given := cfg["include-system-site-packages"]
		in.SystemSite = !given || strings.ToLower(sys) == "true"
	}
	var base string
	if home != "" {
		if strings.Contains(home, ":") {
			return in, fmt.Errorf("PYTHONHOME=%s names a separate exec prefix", home)
		}
		base = filepath.Clean(home)
		if version == "" {
			version = onlyVersion(fs, base)
		}
	} else {
		base, version = searchUp(fs, start, version)
	}
	if base == "" || version == "" {
		return in, fmt.Errorf("no standard library (lib/python3.X/os.py) found upwards of %s for %s", start, exe)
	}
	if want != "" && want != version {
		return in, fmt.Errorf("%s runs CPython %s by its layout, the ABI step found %s", exe, version, want)
	}
	lib := filepath.Join(base, "lib", "python"+version)
	if !fs.isFile(filepath.Join(lib, "os.py")) && !fs.isFile(filepath.Join(lib, "os.pyc")) {
		return in, fmt.Errorf("PYTHONHOME=%s holds no standard library for CPython %s", home, version)
	}
	if !fs.isDir(filepath.Join(lib, "lib-dynload")) {
		return in, fmt.Errorf("%s has no lib-dynload: the exec prefix is elsewhere", lib)
	}
	if l64 := filepath.Join(base, "lib64", "python"+version); fs.isDir(l64) && !fs.sameFile(l64, lib) {
		return in, fmt.Errorf("%s exists: the interpreter may read lib64 (platlibdir)", l64)
	}
	if !fs.isFile(filepath.Join(lib, "site.py")) {
		return in, fmt.Errorf("%s has no site.py to read", lib)
	}
	in.Base, in.Version, in.PlatLibDir = base, version, "lib"
	if !in.Venv {
		in.Prefix = base
	}
	in.Debian = sitepath.DebianSite(fs.root, base, version, "lib")
	return in, nil
}

// venvCfg is the pyvenv.cfg that makes exe a venv's interpreter, "" when
// none does. getpath reads the one a directory above the executable's
// first and site.py the one beside it first: with both present they may
// disagree, and that is an error.
func venvCfg(fs fsys, exe string) (string, error) {
	beside, above := filepath.Join(filepath.Dir(exe), "pyvenv.cfg"), filepath.Join(filepath.Dir(filepath.Dir(exe)), "pyvenv.cfg")
	switch a, b := fs.isFile(beside), fs.isFile(above); {
	case a && b && beside != above:
		return "", fmt.Errorf("both %s and %s exist: getpath reads the second, site.py the first", beside, above)
	case a:
		return beside, nil
	case b:
		return above, nil
	}
	return "", nil
}

// A startFile is a file getpath looks for before it computes sys.path:
// a ._pth file (pth), which replaces it, or a build directory's marker.
type startFile struct {
	path string
	pth  bool
}

// startFiles are the files getpath looks for beside the interpreter exe
// (real: with its links resolved) before it computes sys.path, present or
// not, given a venv's home ("" outside one) and its base executables:
//
//   - the ._pth file (the path with "._pth" appended, no other name) of
//     the executable as found, of where its links lead and of each base
//     executable and where its links lead;
//   - pybuilddir.txt and Modules/Setup.local, which mark a build
//     directory, in the directory getpath takes for the real
//     executable's (home, in a venv) and, to be safe, beside the
//     executable and where its links lead.
func startFiles(fs fsys, exe, real, home string, bases []string) []startFile {
	exes, dirs := []string{exe, real}, []string{filepath.Dir(exe), filepath.Dir(real)}
	for _, b := range bases {
		exes = append(exes, b)
		if r, err := fs.evalSymlinks(b); err == nil {
			exes = append(exes, r)
		}
	}
	if home != "" {
		dirs = append(dirs, filepath.Clean(home))
	}
	var out []startFile
	seen := map[string]bool{}
	add := func(p string, pth bool) {
		if !seen[p] {
			seen[p] = true
			out = append(out, startFile{p, pth})
		}
	}
	for _, e := range exes {
		add(e+"._pth", true)
	}
	for _, d := range dirs {
		add(filepath.Join(d, "pybuilddir.txt"), false)
		add(filepath.Join(d, "Modules", "Setup.local"), false)
	}
	return out
}

// baseExecutable is the base executable getpath takes for the venv
// interpreter exe (real: with its links resolved; home: pyvenv.cfg's;
// version: 3.X, or "" when not known): where exe's links lead, or, when
// it is no link (a venv made with --copies), its name in home, or when
// that is no file, python3 or python3.X there, the first that is one.
func baseExecutable(fs fsys, exe, real, home, version string) (string, error) {
	if real != exe {
		return real, nil
	}
	name := filepath.Base(exe)
	base := filepath.Join(home, name)
	if fs.isFile(base) {
		return base, nil
	}
	if version == "" {
		return "", fmt.Errorf("%s is no link and %s is absent: which base executable the venv has depends on the interpreter's version, which is not known", exe, base)
	}
	for _, n := range []string{"python3", "python" + version} {
		if c := filepath.Join(home, n); n != name && fs.isFile(c) {
			return c, nil
		}
	}
	return base, nil
}

// StartFiles are the paths on this machine of the files CPython's getpath
// looks for beside the interpreter exe before it computes sys.path
// (._pth files, build directory markers; see startFiles), present or not,
// for any base executable a venv's interpreter may have: for a key of an
// answer that one of them appearing would change.
func StartFiles(exe string) []string {
	exe = filepath.Clean(exe)
	real, err := hostFS.evalSymlinks(exe)
	if err != nil {
		real = exe
	}
	home := ""
	var bases []string
	if f, err := venvCfg(hostFS, exe); err == nil && f != "" {
		if cfg, err := readCfg(hostFS, f); err == nil && cfg["home"] != "" {
			home = cfg["home"]
			for _, n := range []string{filepath.Base(exe), "python3", "python" + majorMinor(cfg["version"])} {
				bases = append(bases, filepath.Join(home, n))
			}
		}
	}
	var out []string
	for _, f := range startFiles(hostFS, exe, real, home, bases) {
		out = append(out, f.path)
	}
	return out
}

// searchUp is getpath's search for the standard library's landmark from
// dir upwards: the prefix and the version (given, or the one version
// whose lib/python3.X/os.py the first matching directory holds).
func searchUp(fs fsys, dir, version string) (string, string) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if version != "" {
			lib := filepath.Join(d, "lib", "python"+version)
			if fs.isFile(filepath.Join(lib, "os.py")) || fs.isFile(filepath.Join(lib, "os.pyc")) {
				return d, version
			}
		} else if v := onlyVersion(fs, d); v != "" {
			return d, v
		}
		if d == "/" {
			return "", version
		}
	}
}

// onlyVersion is the version of the one lib/python3.X/os.py under prefix,
// "" when there are none or several.
func onlyVersion(fs fsys, prefix string) string {
	var found []string
	for _, d := range fs.glob(filepath.Join(prefix, "lib", "python3.*")) {
		if fs.isFile(filepath.Join(d, "os.py")) {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return ""
	}
	return strings.TrimPrefix(filepath.Base(found[0]), "python")
}

// readCfg reads pyvenv.cfg as site.py does: "key = value" lines (split
// at the first "="), keys stripped and lower case, values stripped, the
// last of a key winning. getpath reads its home by rules of its own, and
// site.py reads the file as UTF-8 with universal newlines: a file with a
// byte outside printable ASCII (a bare \r, a character str.strip and the
// C reader may strip differently) is one the two may read differently,
// and an error.
func readCfg(fs fsys, file string) (map[string]string, error) {
	data, err := fs.readFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the venv's configuration: %w", err)
	}
	for i, b := range data {
		if b >= 0x7f || b < 0x20 && b != '\t' && b != '\n' {
			return nil, fmt.Errorf("%s: byte %d (%#x) is one that site.py and getpath may read differently", file, i, b)
		}
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	return out, nil
}

// getenv reads a PYTHON* variable the interpreter reads at start-up;
// none under -E or -I.
func getenv(env Env, f Flags, key string) (string, bool) {
	if f.IgnoreEnv {
		return "", false
	}
	return env(key)
}
