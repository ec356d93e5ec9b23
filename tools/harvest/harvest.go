// Package harvest makes a native tree from a builder root: the named
// Python packages with native extensions, and the libraries of their
// DT_NEEDED closure that the target base does not provide, with soname
// links made from the files actually copied. Nothing is claimed that was
// not proven: every ELF of the tree must load against the base (elfload's
// closure check, the one the shim runs), and with a base root its
// interpreter must import every extension module with the tree on its
// paths; a capability whose evidence fails either check is not written.
//
// It works on directories only (an unpacked image root, any root
// filesystem): no container runtime.
package harvest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/infera/infera-exec/internal/distinfo"
	"github.com/infera/infera-exec/internal/elfload"
	"github.com/infera/infera-exec/internal/progress"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/tools/outdir"
)

// TreeFile is the tree's entry for payload.toml, written into the tree:
// a one-tree manifest (dir = "."), which `infera-payload index` merges
// into the payload's manifest with the tree's place in the payload.
const TreeFile = "tree.toml"

// Policy names the libraries a ROCm engine base provides, used when no
// base root is given (as v0.2.2 did): the glibc family, the C++ runtime,
// the ROCm runtime, libnuma, libibverbs, and the interpreter's own
// library. Patterns match library file names.
var Policy = []string{
	"ld-linux*.so*", "libc.so.*", "libm.so.*", "libdl.so.*", "libpthread.so.*", "librt.so.*", "libutil.so.*",
	"libresolv.so.*", "libanl.so.*", "libnsl.so.*", "libcrypt.so.*", "libmvec.so.*",
	"libstdc++.so.*", "libgcc_s.so.*", "libatomic.so.*",
	"libamdhip64.so.*", "libhsa-runtime64.so.*", "libhsakmt.so.*", "libamd_comgr.so.*", "librocprofiler-register.so.*",
	"librocm_smi64.so.*", "librocm-core.so.*", "libdrm.so.*", "libdrm_amdgpu.so.*",
	"libnuma.so.*", "libibverbs.so.*", "libpython3*.so*",
}

// Options are the inputs of one harvest.
type Options struct {
	Root     string   // the builder root
	Packages []string // import names of the packages to take
	Out      string   // the tree directory to write (replaced)
	Base     string   // the target base root; "" = Policy
	Name     string   // the tree's name in payload.toml; "" = Out's base name
	ROCm     int      // the ROCm major the tree is for; 0 = detected from the closure
	Caps     []string // NAME=PACKAGE[,PACKAGE]: capability NAME is proven by those packages; default: one per package
	Python   string   // the base's interpreter, a path inside Base; "" = the first of Interpreters
	NoImport bool     // skip the import check (the load check still runs)
	Force    bool     // replace Out even when an earlier run did not write it

	Progress *progress.Reporter // how far the copies are; nil: quiet
}

// Interpreters are tried in order in a base root.
var Interpreters = []string{"/usr/bin/python3", "/usr/local/bin/python3", "/opt/conda/bin/python3", "/usr/bin/python3.*"}

// Result is what the harvest did and proved.
type Result struct {
	Tree       string
	Packages   map[string][]string // import name -> extension modules copied (relative to the tree)
	From       map[string][]string // import name -> the builder's directories taken (a namespace package's portions)
	Files      map[string]int      // import name -> files copied
	Also       map[string][]string // import name -> other copies in the builder that differ from the one taken
	LocateNote string              // whether the builder's interpreter confirmed where the packages are
	Copied     []Lib               // libraries copied into lib/
	Provided   []Lib               // libraries the base provides, not copied
	Links      []string            // soname links made in lib/ ("libx.so.1 -> libx.so.1.2.3")
	Python     string              // constraint written, "= 3.12"
	ROCm       string              // constraint written, ">= 7, < 8"
	Verified   []*elfload.LoadCheck
	Imports    *ImportResult // nil: not run
	ImportNote string        // why the import check did not run
	Granted    map[string][]string
	Refused    map[string][]string // capability -> why
}

// Lib is one library of the closure and where it came from.
type Lib struct {
	Name string // the DT_NEEDED name
	From string // the builder's file
	By   string // what provides it in the base ("policy" or the base's path)
}

// Run harvests.
func Run(o Options) (*Result, error) {
	if len(o.Packages) == 0 {
		return nil, errors.New("name at least one package (-package NAME)")
	}
	for _, d := range []string{o.Root, o.Base} {
		if d == "" {
			continue
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("root %s is not a directory", d)
		}
	}
	// Out is replaced: it must not hold or sit inside a root, and must be
	// new, empty or an earlier harvest's (outdir.Check), before anything
	// is read.
	out := outdir.Path{Flag: "-out", Path: o.Out}
	inputs := []outdir.Path{{Flag: "-root", Path: o.Root}, {Flag: "-base", Path: o.Base}}
	if err := outdir.Check(out, inputs, o.Force); err != nil {
		return nil, err
	}
	if o.Name == "" {
		o.Name = filepath.Base(filepath.Clean(o.Out))
	}
	caps, err := capabilityMap(o.Caps, o.Packages)
	if err != nil {
		return nil, err
	}
	loc, err := patches.LocateOffline(o.Root, o.Packages)
	if err != nil {
		return nil, err
	}
	// The builder's own interpreter, asked in the sandbox, must agree with
	// the offline lookup; where it cannot be asked, the offline lookup
	// (CPython's and Debian's order, tested against the real interpreter)
	// stands and the account says so.
	locateNote, err := askBuilder(o, loc)
	if err != nil {
		return nil, err
	}
	if len(loc.Notes) > 0 {
		locateNote += "; the offline lookup passed over what it cannot follow: " + strings.Join(loc.Notes, "; ")
	}
	if err := outdir.Replace(out, inputs, o.Force); err != nil {
		return nil, err
	}
	r := &Result{Tree: o.Out, Packages: map[string][]string{}, From: map[string][]string{}, Files: map[string]int{}, Also: map[string][]string{},
		Granted: map[string][]string{}, Refused: map[string][]string{}, LocateNote: locateNote}

	// 1. The packages, with their distributions' metadata and files.
	builder := elfload.NewLoader(o.Root, nil)
	type portion struct {
		name, site, dir string
		files           []string
	}
	var portions []portion
	var total, totalBytes int64
	for _, name := range o.Packages {
		pkg := loc.Packages[name]
		if !pkg.Found {
			return nil, fmt.Errorf("package %s: %s", name, pkg.Why)
		}
		// The copy the builder's interpreter imports (patches.LocateOffline:
		// the start's resolver, package pyimport, over the root's
		// interpreters):
		// the package directory, or every portion of a namespace package.
		for _, dir := range pkg.Dirs {
			site := filepath.Dir(dir)
			files, err := packageFiles(site, dir, name)
			if err != nil {
				return nil, fmt.Errorf("package %s: %w", name, err)
			}
			portions = append(portions, portion{name, site, dir, files})
			for _, rel := range files {
				if fi, err := os.Lstat(filepath.Join(site, filepath.FromSlash(rel))); err == nil && !fi.IsDir() {
					total++
					totalBytes += fi.Size()
				}
			}
		}
	}
	copied := o.Progress.Start("harvest copy", total, totalBytes)
	var sources []string // the builder's ELF files taken
	for _, p := range portions {
		name := p.name
		r.From[name] = append(r.From[name], p.dir)
		r.Files[name] += len(p.files)
		for _, rel := range p.files {
			src := filepath.Join(p.site, filepath.FromSlash(rel))
			if err := copyEntry(src, filepath.Join(o.Out, filepath.FromSlash(rel))); err != nil {
				return nil, fmt.Errorf("package %s: %w", name, err)
			}
			fi, err := os.Lstat(src)
			if err == nil && !fi.IsDir() {
				copied.Add(1, fi.Size())
			}
			if err == nil && fi.Mode().IsRegular() && elfload.IsLibraryName(path.Base(rel)) {
				if _, err := elfload.Read(src); err == nil {
					sources = append(sources, src)
					r.Packages[name] = append(r.Packages[name], rel)
				}
			}
		}
	}
	copied.Done()
	for _, name := range o.Packages {
		pkg := loc.Packages[name]
		for _, other := range pkg.Others {
			if note := differs(other, pkg.Dirs); note != "" {
				r.Also[name] = append(r.Also[name], other+" ("+note+")")
			}
		}
	}

	// 2. Their closure in the builder root; what the base lacks is copied.
	var base *elfload.Loader
	if o.Base != "" {
		base = elfload.NewLoader(o.Base, nil)
	}
	libDir := filepath.Join(o.Out, "lib")
	taken := map[string]bool{}
	libs := o.Progress.Start("harvest libraries", 0, 0) // how many, the closure tells as it goes
	for _, src := range sources {
		c := builder.Check(src)
		if !c.OK {
			return nil, fmt.Errorf("%s does not load in the builder root %s itself: %s", src, o.Root, strings.Join(c.Problems, "; "))
		}
		for _, l := range c.Libraries {
			if taken[l.File] {
				continue
			}
			taken[l.File] = true
			if by := provided(base, l.Name); by != "" {
				r.Provided = append(r.Provided, Lib{Name: l.Name, From: l.File, By: by})
				continue
			}
			if err := fixture.CopyFile(l.File, filepath.Join(libDir, filepath.Base(l.File)), 0o755); err != nil {
				return nil, err
			}
			if fi, err := os.Stat(l.File); err == nil {
				libs.Add(1, fi.Size())
			}
			r.Copied = append(r.Copied, Lib{Name: l.Name, From: l.File})
		}
	}
	libs.Done()
	if r.Links, err = sonameLinks(libDir, neededNames(r.Copied)); err != nil {
		return nil, err
	}

	// 3. Constraints from what was found.
	if r.Python, err = pythonConstraint(r.Packages); err != nil {
		return nil, err
	}
	major := o.ROCm
	if major == 0 {
		major = rocmMajor(append(slices.Clone(r.Copied), r.Provided...))
	}
	if major == 0 {
		return nil, fmt.Errorf("no ROCm library (libamdhip64.so.N) in the closure of %s: give the ROCm major the tree is for (-rocm 7)", strings.Join(o.Packages, ", "))
	}
	r.ROCm = fmt.Sprintf(">= %d, < %d", major, major+1)

	// 4. Proof: every ELF of the tree loads against the base, and the
	// base's interpreter imports every extension module.
	target := elfload.NewLoader(o.Root, []string{libDir})
	if base != nil {
		target = elfload.NewLoader(o.Base, []string{libDir})
	}
	if r.Verified, err = target.CheckTree(o.Out); err != nil {
		return nil, err
	}
	if base != nil && !o.NoImport {
		namespace := map[string]bool{}
		for _, name := range o.Packages {
			namespace[name] = loc.Packages[name].Namespace
		}
		r.Imports, err = Import(o.Base, o.Python, o.Out, modules(r.Packages), namespace)
		if err != nil {
			r.ImportNote = err.Error()
		}
	} else if base == nil {
		r.ImportNote = "no base root (-base): the import check needs the base's interpreter; the load check ran against the builder root with the policy libraries"
	} else {
		r.ImportNote = "skipped (-no-import)"
	}

	// 5. Capabilities: granted only on proof.
	for _, c := range sortedKeys(caps) {
		var globs, why []string
		for _, pkg := range caps[c] {
			globs = append(globs, evidenceGlobs(r.Packages[pkg])...)
			for _, rel := range r.Packages[pkg] {
				for _, v := range r.Verified {
					if v.Path == filepath.Join(o.Out, filepath.FromSlash(rel)) && !v.OK {
						why = append(why, v.Problems...)
					}
				}
			}
			why = append(why, r.Imports.failures(pkg)...)
		}
		if base != nil && !o.NoImport && r.Imports == nil {
			why = append(why, "the import check did not run ("+r.ImportNote+"); run where user namespaces are allowed, or pass -no-import to rely on the load check alone")
		}
		switch {
		case len(globs) == 0:
			r.Refused[c] = []string{"no extension module found in " + strings.Join(caps[c], ", ")}
		case len(why) > 0:
			r.Refused[c] = why
		default:
			r.Granted[c] = globs
		}
	}
	return r, writeTreeFile(o, r)
}

// askBuilder asks the builder's interpreter where it imports each package
// from and compares with the offline lookup: a difference is an error
// naming both. The note says what was confirmed, or why it was not asked.
func askBuilder(o Options, loc *patches.Location) (string, error) {
	if o.NoImport {
		return "located offline (-no-import: the builder's interpreter was not asked)", nil
	}
	py, specs, err := Specs(o.Root, "", o.Packages)
	if err != nil {
		return "located offline; the builder's interpreter could not be asked: " + err.Error(), nil
	}
	inside := func(dirs []string) []string {
		out := make([]string, 0, len(dirs))
		for _, d := range dirs {
			rel, err := filepath.Rel(o.Root, d)
			if err != nil || strings.HasPrefix(rel, "..") {
				out = append(out, d)
				continue
			}
			out = append(out, "/"+filepath.ToSlash(rel))
		}
		return out
	}
	for _, name := range o.Packages {
		sp, pkg := specs[name], loc.Packages[name]
		offline := inside(pkg.Dirs)
		switch {
		case sp.Err != "":
			return "", fmt.Errorf("package %s: the builder's %s cannot locate it: %s", name, py, sp.Err)
		case !sp.Found && !pkg.Found:
			continue // reported as not found below
		case sp.Found != pkg.Found || !slices.Equal(sp.Locations, offline):
			where := "nowhere"
			if sp.Found {
				where = strings.Join(sp.Locations, ", ")
				if len(sp.Locations) == 0 {
					where = sp.Origin + " (a module, not a package)"
				}
			}
			found := "nothing"
			if pkg.Found {
				found = strings.Join(offline, ", ")
			}
			return "", fmt.Errorf("package %s: the builder's %s imports it from %s, the offline search found %s; the harvest takes what the interpreter imports and cannot tell here", name, py, where, found)
		}
	}
	return "located by the builder's " + py + " (find_spec), as the offline search found", nil
}

// capabilityMap reads NAME=PACKAGE[,PACKAGE] flags; none: one capability
// per package, named after it.
func capabilityMap(flags, packages []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, f := range flags {
		name, pkgs, ok := strings.Cut(f, "=")
		if !ok || name == "" || pkgs == "" {
			return nil, fmt.Errorf("-capability %q: want NAME=PACKAGE[,PACKAGE]", f)
		}
		for _, p := range strings.Split(pkgs, ",") {
			if !slices.Contains(packages, p) {
				return nil, fmt.Errorf("-capability %q: %s is not a -package", f, p)
			}
			out[name] = append(out[name], p)
		}
	}
	if len(flags) == 0 {
		for _, p := range packages {
			out[strings.ToLower(p)] = []string{p}
		}
	}
	return out, nil
}

// packageFiles are the files to take for an import name, relative to its
// site directory: the package directory, and the distribution that
// provides it (its metadata directory and every file its RECORD lists
// inside the site directory, e.g. a wheel's bundled "pkg.libs/").
func packageFiles(site, dir, name string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(site, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	dists, err := distinfo.List(site)
	if err != nil {
		return nil, err
	}
	for _, d := range dists {
		if !slices.Contains(d.TopLevel(), name) && d.Key() != distinfo.Canonical(name) {
			continue
		}
		recorded, err := d.Files()
		if err != nil {
			return nil, err
		}
		metaRel, _ := filepath.Rel(site, d.Meta)
		_ = filepath.WalkDir(d.Meta, func(p string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				rel, _ := filepath.Rel(site, p)
				recorded = append(recorded, filepath.ToSlash(rel))
			}
			return nil
		})
		for _, rel := range recorded {
			if rel == filepath.ToSlash(metaRel) || strings.Contains(rel, "__pycache__/") || slices.Contains(files, rel) {
				continue
			}
			if fi, err := os.Lstat(filepath.Join(site, filepath.FromSlash(rel))); err == nil && !fi.IsDir() {
				files = append(files, rel)
			}
		}
	}
	sort.Strings(files)
	return files, nil
}

// differs says how another copy of a package (a directory or a module
// file) differs from the directories taken: "" when it holds the same
// files at the same sizes.
func differs(other string, taken []string) string {
	sizes := func(dir string) map[string]int64 {
		out := map[string]int64{}
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && d.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			if fi, err := d.Info(); err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(dir, p)
				out[rel] = fi.Size()
			}
			return nil
		})
		return out
	}
	theirs := sizes(other)
	ours := map[string]int64{}
	for _, d := range taken {
		for k, v := range sizes(d) {
			ours[k] = v
		}
	}
	if maps.Equal(theirs, ours) {
		return ""
	}
	return fmt.Sprintf("%d files, the copy taken has %d; the builder's interpreter does not import it", len(theirs), len(ours))
}

func copyEntry(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		t, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(t, dst)
	}
	return fixture.CopyFile(src, dst, fi.Mode().Perm())
}

// provided says what provides a library in the base: its path there, or
// "policy" when no base root is given and the name is in Policy.
func provided(base *elfload.Loader, name string) string {
	if base != nil {
		return base.Find(name)
	}
	for _, p := range Policy {
		if ok, _ := path.Match(p, name); ok {
			return "policy (" + p + ")"
		}
	}
	return ""
}

func neededNames(libs []Lib) map[string]string {
	out := map[string]string{}
	for _, l := range libs {
		out[filepath.Base(l.From)] = l.Name
	}
	return out
}

// sonameLinks makes, for every library file in dir, the links the loader
// will look for: its SONAME, and the DT_NEEDED name it was found by when
// that differs, each pointing at the file (relative). Links of the
// builder are not copied: a link that pointed at libx.so.0.3.0 after the
// image moved to 0.4.0 is how v0.2.2 lost hipfile.
func sonameLinks(dir string, neededBy map[string]string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var links []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		obj, err := elfload.Read(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		for _, n := range []string{obj.Soname, neededBy[e.Name()]} {
			if n == "" || n == e.Name() || strings.Contains(n, "/") {
				continue
			}
			lp := filepath.Join(dir, n)
			if _, err := os.Lstat(lp); err == nil {
				continue
			}
			if err := os.Symlink(e.Name(), lp); err != nil {
				return nil, err
			}
			links = append(links, n+" -> "+e.Name())
		}
	}
	sort.Strings(links)
	return links, nil
}

var cpythonTagRE = regexp.MustCompile(`\.cpython-3(\d+)[a-z]*-`)

// pythonConstraint is "= 3.X" from the extension modules' tags; modules
// for several Pythons in one tree are an error.
func pythonConstraint(pkgs map[string][]string) (string, error) {
	minors := map[string]bool{}
	for _, files := range pkgs {
		for _, f := range files {
			if m := cpythonTagRE.FindStringSubmatch(path.Base(f)); m != nil {
				minors[m[1]] = true
			}
		}
	}
	switch len(minors) {
	case 0:
		return "", errors.New("no extension module carries a CPython tag (.cpython-3XY-...so): the tree's Python cannot be told")
	case 1:
		for m := range minors {
			return "= 3." + m, nil
		}
	}
	return "", fmt.Errorf("extension modules for several CPython versions (3.%s) in one tree", strings.Join(sortedKeys(minors), ", 3."))
}

var hipRE = regexp.MustCompile(`^libamdhip64\.so\.(\d+)`)

func rocmMajor(libs []Lib) int {
	for _, l := range libs {
		if m := hipRE.FindStringSubmatch(l.Name); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return 0
}

// evidenceGlobs: one "DIR/*.so" per directory holding extension modules.
func evidenceGlobs(files []string) []string {
	var out []string
	for _, f := range files {
		g := path.Join(path.Dir(f), "*.so")
		if strings.Contains(path.Base(f), ".so.") {
			g = f
		}
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// modules are the dotted names of the extension modules.
func modules(pkgs map[string][]string) map[string][]string {
	out := map[string][]string{}
	for p, files := range pkgs {
		for _, f := range files {
			if !strings.HasSuffix(f, ".so") {
				continue
			}
			mod, _, _ := strings.Cut(path.Base(f), ".")
			out[p] = append(out[p], strings.ReplaceAll(path.Join(path.Dir(f), mod), "/", "."))
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// writeTreeFile writes the tree's manifest entry with the granted
// capabilities only.
func writeTreeFile(o Options, r *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by infera-payload harvest from %s (base: %s).\n", o.Root, or(o.Base, "policy list"))
	fmt.Fprintf(&b, "# 'infera-payload index -tree %s:native/%s' puts it in the payload's payload.toml.\n", o.Out, o.Name)
	fmt.Fprintf(&b, "schema = 1\n\n[[tree]]\nname = %q\nkind = \"native\"\ndir = \".\"\npython = %q\nrocm = %q\n", o.Name, r.Python, r.ROCm)
	if len(r.Granted) > 0 {
		b.WriteString("\n[tree.capabilities]\n")
		for _, c := range sortedKeys(r.Granted) {
			q := make([]string, len(r.Granted[c]))
			for i, g := range r.Granted[c] {
				q[i] = strconv.Quote(g)
			}
			fmt.Fprintf(&b, "%q = [%s]\n", c, strings.Join(q, ", "))
		}
	}
	return os.WriteFile(filepath.Join(o.Out, TreeFile), []byte(b.String()), 0o644)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// WriteText is the harvest's account: what was copied and why, what the
// base provides, the proof, and each capability's verdict.
func (r *Result) WriteText(w io.Writer) {
	fmt.Fprintf(w, "tree %s: python %s, rocm %s\n", r.Tree, r.Python, r.ROCm)
	if r.LocateNote != "" {
		fmt.Fprintf(w, "  packages %s\n", r.LocateNote)
	}
	for _, p := range sortedKeys(r.From) {
		fmt.Fprintf(w, "  package %s: %d files from %s, %d extension modules\n", p, r.Files[p], strings.Join(r.From[p], ", "), len(r.Packages[p]))
		for _, a := range r.Also[p] {
			fmt.Fprintf(w, "    also present at %s\n", a)
		}
	}
	for _, l := range r.Copied {
		fmt.Fprintf(w, "  copied   %s (%s)\n", l.Name, l.From)
	}
	for _, l := range r.Provided {
		fmt.Fprintf(w, "  in base  %s (%s)\n", l.Name, l.By)
	}
	for _, l := range r.Links {
		fmt.Fprintf(w, "  link     lib/%s\n", l)
	}
	bad := 0
	for _, v := range r.Verified {
		if !v.OK {
			bad++
			for _, p := range v.Problems {
				fmt.Fprintf(w, "  does not load: %s\n", p)
			}
		}
	}
	fmt.Fprintf(w, "load check: %d ELF files, %d load\n", len(r.Verified), len(r.Verified)-bad)
	switch {
	case r.Imports != nil:
		r.Imports.WriteText(w)
	default:
		fmt.Fprintf(w, "import check: not run: %s\n", r.ImportNote)
	}
	for _, c := range sortedKeys(r.Granted) {
		fmt.Fprintf(w, "capability %s: written (evidence %s)\n", c, strings.Join(r.Granted[c], ", "))
	}
	for _, c := range sortedKeys(r.Refused) {
		fmt.Fprintf(w, "capability %s: NOT written: %s\n", c, strings.Join(r.Refused[c], "; "))
	}
}

// Failed says whether any capability was refused or any ELF fails.
func (r *Result) Failed() bool {
	if len(r.Refused) > 0 {
		return true
	}
	for _, v := range r.Verified {
		if !v.OK {
			return true
		}
	}
	return false
}

// Verify checks every ELF of tree against base, the tree's lib/ first.
func Verify(tree, base string) ([]*elfload.LoadCheck, error) {
	return elfload.NewLoader(base, []string{filepath.Join(tree, "lib")}).CheckTree(tree)
}
