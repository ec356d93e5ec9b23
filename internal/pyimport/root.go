package pyimport

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/infera/infera-exec/internal/sitepath"
)

// The offline lookups (infera-exec --check ROOT, the payload build's
// harvest) ask where an image's interpreters import a name from, with no
// worker command: each interpreter installation as `python3 -c` would
// start there, as root (HOME=/root), without PYTHONPATH or other PYTHON*
// variables, and without the working directory's entry. What cannot be
// followed is noted (Answer.Notes) and passed over, so that the answer is
// the best one that can be read; the start, by contrast, asks the
// interpreter whenever the answer is not certain.

// Root is the answer of an offline lookup: one Answer per interpreter
// installation, in the order they are preferred. Paths in the answers are
// as the installation sees them (inside the image); Host gives each one's
// path on this machine.
type Root struct {
	Root          string // "/" for this machine
	Installations []*Answer
	// Notes are what the lookup could not read as a whole (an interpreter
	// it could not place).
	Notes []string
}

// Host is the path on this machine of p, a path inside the root, with its
// links resolved inside the root.
func (r *Root) Host(p string) string {
	fs := fsys{root: r.Root}
	if hp, err := fs.host(p); err == nil {
		return hp
	}
	return filepath.Join(r.Root, p)
}

var pyExeRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^python3\.\d+$`) })

// ResolveImage answers for every interpreter installation of an unpacked
// image root (root "/" = this machine): venvs (a pyvenv.cfg one or two
// directories down, /app/.venv, /opt/venv), conda environments
// (/opt/*/envs/*), installations under /opt, /usr/local and /usr, each
// placed from its bin/python3.X as CPython's getpath places it. Paths
// recorded in the image (a venv's home, .pth lines, finders' MAPPING) are
// taken inside root. A prefix holding lib/python3.X but no interpreter
// that can be placed is still read, from its directories, with a note.
// On this machine's own root ("/", a running container) venvs are looked
// for under /opt only: its other top-level directories include mounts
// (a model directory on NFS) that listing could hang on.
func ResolveImage(root string, names []string) *Root {
	fs := fsys{root: filepath.Clean(root)}
	return resolveInstallations(fs, imagePrefixes(fs), true, names)
}

// ResolveVenv answers for the venv (or installation prefix) dir of this
// machine: its bin/python3.X, paths as they are.
func ResolveVenv(dir string, names []string) *Root {
	return resolveInstallations(hostFS, []string{filepath.Clean(dir)}, false, names)
}

// ResolveSiteDir answers for a bare site directory of this machine: the
// directory, then what its .pth files add (paths as they are), then the
// editable finders they install, as site.addsitedir reads it.
func ResolveSiteDir(dir string, names []string) *Root {
	dir = filepath.Clean(dir)
	s := &state{fs: hostFS, cwd: "/", lenient: true, known: map[string]bool{}}
	a := &Answer{Specs: map[string]Spec{}}
	err := s.addSites([]string{dir})
	if err == nil {
		err = s.doubt(s.customize("sitecustomize"))
	}
	s.answer(a, names, err, "the site directory "+dir+" and its .pth files")
	return &Root{Root: "/", Installations: []*Answer{a}}
}

// imagePrefixes are the directories that may hold an installation, in
// the order they are preferred: venvs, conda environments, /opt, then
// /usr/local (before /usr on every default PATH) and /usr.
func imagePrefixes(fs fsys) []string {
	var venvs []string
	var tops []os.DirEntry
	if !fs.local() { // an unpacked image: a directory tree, no mounts
		tops, _ = fs.readDir("/")
	}
	for _, t := range tops {
		switch t.Name() {
		case "proc", "sys", "dev":
			continue
		}
		top := "/" + t.Name()
		if !fs.isDir(top) {
			continue
		}
		if fs.isFile(top + "/pyvenv.cfg") {
			venvs = append(venvs, top)
			continue
		}
		subs, _ := fs.readDir(top)
		for _, s := range subs {
			if d := top + "/" + s.Name(); fs.isFile(d + "/pyvenv.cfg") {
				venvs = append(venvs, d)
			}
		}
	}
	out := venvs
	opt := fs.glob("/opt/*")
	sort.Strings(opt)
	var conda []string
	for _, o := range opt {
		envs := fs.glob(o + "/envs/*")
		sort.Strings(envs)
		conda = append(conda, envs...)
	}
	for _, d := range append(conda, opt...) {
		if fs.isDir(d) && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	for _, d := range []string{"/usr/local", "/usr"} {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// interpreters are prefix's bin/python3.X (else bin/python3), the one
// bin/python3 runs first, then newest first.
func interpreters(fs fsys, prefix string) []string {
	bin := filepath.Join(prefix, "bin")
	entries, _ := fs.readDir(bin)
	var out []string
	for _, e := range entries {
		if pyExeRE().MatchString(e.Name()) && fs.isFile(filepath.Join(bin, e.Name())) {
			out = append(out, filepath.Join(bin, e.Name()))
		}
	}
	def := ""
	if real, err := fs.evalSymlinks(filepath.Join(bin, "python3")); err == nil {
		def = filepath.Base(real)
	}
	if len(out) == 0 && def != "" {
		return []string{filepath.Join(bin, "python3")}
	}
	sort.Slice(out, func(i, j int) bool {
		bi, bj := filepath.Base(out[i]), filepath.Base(out[j])
		if (bi == def) != (bj == def) {
			return bi == def
		}
		return minor(bi) > minor(bj)
	})
	return out
}

func minor(name string) int {
	var m int
	fmt.Sscanf(strings.TrimPrefix(name, "python"), "3.%d", &m)
	return m
}

// resolveInstallations places the interpreters of each prefix and answers
// for each installation once; with fallback, a prefix with a standard
// library or site directories but no interpreter that could be placed
// (sitepath.Find) is read from its directories.
func resolveInstallations(fs fsys, prefixes []string, fallback bool, names []string) *Root {
	r := &Root{Root: fs.root}
	if fs.local() {
		r.Root = "/"
	}
	type key struct{ prefix, version string }
	seen := map[key]bool{}
	failed := map[string]string{} // prefix -> why its interpreters could not be placed
	var found []sitepath.Interpreter
	var exes []string
	for _, p := range prefixes {
		for _, exe := range interpreters(fs, p) {
			c := Command{Executable: exe, Flags: Flags{SafePath: true}, Main: MainCode}
			in, err := layout(fs, c, noEnv, "")
			if err != nil {
				failed[p] = err.Error()
				continue
			}
			k := key{in.Prefix, in.Version}
			if seen[k] {
				continue
			}
			seen[k] = true
			found = append(found, in)
			exes = append(exes, exe)
		}
	}
	if fallback {
		for _, in := range sitepath.Find(fs.root) {
			k := key{in.Prefix, in.Version}
			if seen[k] {
				continue
			}
			seen[k] = true
			note := fmt.Sprintf("no interpreter of %s for CPython %s could be placed (%s/bin/python%s)", in.Prefix, in.Version, in.Prefix, in.Version)
			if why := failed[in.Prefix]; why != "" {
				note += ": " + why
			}
			found = append(found, in)
			exes = append(exes, note)
		}
	}
	// Preferred order: the prefixes' order, the fallback ones by theirs.
	rank := func(in sitepath.Interpreter) int {
		if i := slices.Index(prefixes, in.Prefix); i >= 0 {
			return i
		}
		return len(prefixes)
	}
	idx := make([]int, len(found))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return rank(found[idx[i]]) < rank(found[idx[j]]) })
	for _, i := range idx {
		r.Installations = append(r.Installations, resolveOffline(fs, found[i], exes[i], names))
	}
	for p, why := range failed {
		if !slices.ContainsFunc(found, func(in sitepath.Interpreter) bool { return in.Prefix == p }) {
			r.Notes = append(r.Notes, fmt.Sprintf("the interpreters of %s were not read: %s", p, why))
		}
	}
	sort.Strings(r.Notes)
	return r
}

func noEnv(string) (string, bool) { return "", false }

// resolveOffline answers for one installation; exe is its interpreter, or
// the note saying why there is none.
func resolveOffline(fs fsys, in sitepath.Interpreter, exe string, names []string) *Answer {
	s := &state{fs: fs, in: in, cwd: "/", lenient: true}
	kind := "CPython " + in.Version + " at " + in.Base
	if in.Venv {
		kind += ", venv " + in.Prefix
	}
	a := &Answer{Specs: map[string]Spec{}, Version: in.Version}
	if strings.HasPrefix(exe, "/") {
		a.Interpreter = exe
	} else {
		s.notes = append(s.notes, exe)
		a.Interpreter = filepath.Join(in.Prefix, "bin", "python"+in.Version)
	}
	home := func(k string) (string, bool) {
		if k == "HOME" {
			return sitepath.UserHome, true
		}
		return "", false
	}
	c := Command{Executable: a.Interpreter, Flags: Flags{SafePath: true}, Main: MainCode}
	err := s.build(c, home, Query{Home: func() string { return sitepath.UserHome }})
	s.answer(a, names, err, "sys.path of "+a.Interpreter+" ("+kind+")")
	return a
}

// answer fills a from the state: the specs of names, certain when nothing
// was noted.
func (s *state) answer(a *Answer, names []string, err error, what string) {
	a.SysPath, a.SiteDirs = s.path, s.siteDirs
	for _, n := range names {
		if err != nil {
			break
		}
		var spec Spec
		spec, err = s.find(n)
		a.Specs[n] = spec
	}
	if err != nil {
		s.notes = append(s.notes, err.Error())
	}
	a.Notes = s.notes
	a.Certain = len(s.notes) == 0
	a.Reason = what + " read without starting Python"
	if !a.Certain {
		a.Reason += "; not certain: " + strings.Join(s.notes, "; ")
	}
}
