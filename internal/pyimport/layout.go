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
	// getpath reads the ._pth file of the executable as found and of
	// the one its links lead to: the path with "._pth" appended
	// (python3._pth, python3.11._pth), not any other name beside it.
	for _, p := range []string{exe, real} {
		if pth := p + "._pth"; fs.exists(pth) {
			return in, fmt.Errorf("%s is a ._pth file, which replaces sys.path", pth)
		}
	}
	for _, d := range []string{filepath.Dir(exe), filepath.Dir(real)} {
		if fs.isFile(filepath.Join(d, "pybuilddir.txt")) {
			return in, fmt.Errorf("%s runs from a build directory (%s)", exe, filepath.Join(d, "pybuilddir.txt"))
		}
	}
	home := ""
	if v, ok := getenv(env, c.Flags, "PYTHONHOME"); ok && v != "" {
		home = v
	}
	if v, ok := getenv(env, c.Flags, "PYTHONPLATLIBDIR"); ok && v != "" {
		return in, fmt.Errorf("PYTHONPLATLIBDIR=%s changes the library directory", v)
	}
	var cfg map[string]string
	cfgFile := ""
	for _, d := range []string{filepath.Dir(exe), filepath.Dir(filepath.Dir(exe))} {
		if f := filepath.Join(d, "pyvenv.cfg"); fs.isFile(f) {
			if cfg, err = readCfg(fs, f); err != nil {
				return in, err
			}
			cfgFile = f
			break
		}
	}
	version := ""
	if m := majorMinor(cfg["version"]); m != "" {
		version = m
	} else if b := filepath.Base(real); strings.HasPrefix(b, "python3.") {
		version = strings.TrimPrefix(b, "python")
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
		sys := cfg["include-system-site-packages"]
		in.SystemSite = sys == "" || sys == "true" // site.py's default is true
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

// readCfg reads pyvenv.cfg as site.py does: "key = value" lines, keys
// stripped and lower case, values stripped; include-system-site-packages
// lower case.
func readCfg(fs fsys, file string) (map[string]string, error) {
	data, err := fs.readFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the venv's configuration: %w", err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	out["include-system-site-packages"] = strings.ToLower(out["include-system-site-packages"])
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
