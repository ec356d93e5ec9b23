// Package payloadindex assembles a payload in the v0.2.2 layout and writes
// its index (payload.index.json), which `infera-exec --install` checks
// every byte against:
//
//	bin/infera-exec             the static binary
//	py3XX/, native/rocmN-py3XX/ the trees given as SRC:DEST, or the demo
//	                            trees (py39..py314 holding a tiny worker;
//	                            native trees for ROCm 7 with CAPABILITIES and
//	                            a real ELF library)
//	patches/<import-name>/      extra patch definitions
//
// Demo also makes what `make demo` mounts beside the payload: a fake
// /opt/rocm whose libamdhip64 is a real ELF with SONAME libamdhip64.so.7,
// a vLLM install with pending fixes and a model directory.
package payloadindex

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/infera/infera-exec/internal/progress"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/preflight/rules"
	"github.com/infera/infera-exec/tools/harvest"
	"github.com/infera/infera-exec/tools/outdir"
)

// Options are the inputs of one payload build. The defaults (Flags) are
// paths from the repository root, where `make` runs the tool.
type Options struct {
	Out     string   // payload directory to write (replaced)
	Bin     string   // the infera-exec binary to put in bin/
	Src     string   // pure-Python content of the demo trees
	Patches string   // directory of extra patch definitions; empty: none
	Rules   string   // directory of extra preflight rules (*.toml); empty: none
	Trees   []string // SRC:DEST trees to copy; empty: the demo trees
	Demo    string   // also make the demo's ROCm, engine and model here; empty: no
	Engine  string   // with Demo: a vLLM install whose fixes are pending
	Force   bool     // replace Out (and Demo) even when an earlier run did not write it

	Progress *progress.Reporter // how far the copy and the hashing are; nil: quiet
}

// Flags registers the options on fl, with their defaults.
func (o *Options) Flags(fl *flag.FlagSet) {
	fl.StringVar(&o.Out, "out", "build/payload", "payload `DIR` to write (replaced)")
	fl.StringVar(&o.Bin, "bin", "bin/infera-exec", "the static infera-exec `BINARY` to put in bin/")
	fl.StringVar(&o.Src, "src", "testdata/demo/python", "`DIR` with the pure-Python content of the demo trees")
	fl.StringVar(&o.Patches, "patches", "", "`DIR` of extra patch definitions (<import-name>/*.toml), copied to patches/")
	fl.StringVar(&o.Rules, "rules", "", "`DIR` of extra preflight rules (*.toml), copied to rules/")
	fl.StringVar(&o.Demo, "demo", "", "also make the demo's fake ROCm 7, engine and model in `DIR`")
	fl.StringVar(&o.Engine, "engine", "patches/testdata/trees/vllm-pending/site-packages", "with -demo: `DIR`, a vLLM install whose fixes are pending")
	fl.Var((*trees)(&o.Trees), "tree", "copy the tree SRC to DEST in the payload: `SRC:DEST` (repeatable); default: the demo trees")
	fl.BoolVar(&o.Force, "force", false, "replace -out and -demo even when they are non-empty directories an earlier run did not write")
}

// inputs are what a build reads, each with its flag; with exclude, the
// output of that flag is left out and the other output counted in (an
// output must not hold, or sit inside, the other).
func (o Options) inputs(exclude string) []outdir.Path {
	in := []outdir.Path{{Flag: "-bin", Path: o.Bin}, {Flag: "-patches", Path: o.Patches}, {Flag: "-rules", Path: o.Rules}}
	if len(o.Trees) == 0 {
		in = append(in, outdir.Path{Flag: "-src", Path: o.Src})
	}
	for _, t := range o.Trees {
		if from, _, ok := strings.Cut(t, ":"); ok {
			in = append(in, outdir.Path{Flag: "-tree", Path: from})
		}
	}
	if o.Demo != "" {
		in = append(in, outdir.Path{Flag: "-engine", Path: o.Engine})
	}
	switch exclude {
	case "-out":
		if o.Demo != "" {
			in = append(in, outdir.Path{Flag: "-demo", Path: o.Demo, Output: true})
		}
	case "-demo":
		in = append(in, outdir.Path{Flag: "-out", Path: o.Out, Output: true})
	}
	return in
}

type trees []string

func (t *trees) String() string     { return strings.Join(*t, ",") }
func (t *trees) Set(v string) error { *t = append(*t, v); return nil }

// Result is what Build wrote.
type Result struct {
	Dir     string   // the payload directory
	Index   string   // its index file
	Entries int      // entries in the index
	Notes   []string // what the build noticed and the operator should read
}

// Native trees as a vLLM (py312) and an SGLang (py310) payload would ship
// them; hipfile is vLLM-only.
var native = map[string]string{
	"rocm7-py310": "mooncake\n",
	"rocm7-py311": "mooncake\n",
	"rocm7-py312": "mooncake hipfile\n",
}

// Build replaces o.Out with a payload and its index. The demo fixtures
// (o.Demo) are made by Demo, not here. o.Out (and o.Demo) are checked
// first (outdir.Check): neither may hold or sit inside an input or the
// other, and each must be new, empty or an earlier run's, unless o.Force.
func Build(o Options) (*Result, error) {
	out := outdir.Path{Flag: "-out", Path: o.Out}
	if err := outdir.Check(out, o.inputs("-out"), o.Force); err != nil {
		return nil, err
	}
	if o.Demo != "" {
		if err := outdir.Check(outdir.Path{Flag: "-demo", Path: o.Demo}, o.inputs("-demo"), o.Force); err != nil {
			return nil, err
		}
	}
	var notes []string
	if o.Patches != "" {
		var err error
		if notes, err = checkPatches(o.Patches); err != nil {
			return nil, err
		}
	}
	if o.Rules != "" {
		if err := checkRules(o.Rules); err != nil {
			return nil, err
		}
	}
	if err := outdir.Replace(out, o.inputs("-out"), o.Force); err != nil {
		return nil, err
	}
	// What is copied, counted first: the binary, the patches, the trees.
	sources := []string{o.Bin, o.Patches}
	for _, t := range o.Trees {
		from, _, _ := strings.Cut(t, ":")
		sources = append(sources, from)
	}
	files, bytes := tally(sources...)
	var trees []string // pristine trees beside definitions: checked, not copied
	if o.Patches != "" {
		trees, _ = filepath.Glob(filepath.Join(o.Patches, "*", "*"+patchdef.TreesSuffix))
	}
	f, b := tally(trees...)
	files, bytes = files-f, bytes-b
	copied := o.Progress.Start("index copy", files, bytes)
	each := func(size int64) { copied.Add(1, size) }
	if err := fixture.CopyFile(o.Bin, filepath.Join(o.Out, "bin", "infera-exec"), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(o.Bin); err == nil {
		each(fi.Size())
	}
	if o.Patches != "" {
		if err := fixture.CopyTreeSkip(o.Patches, filepath.Join(o.Out, "patches"), each, patchdef.IsTreesDir); err != nil {
			return nil, err
		}
	}
	if o.Rules != "" {
		if err := fixture.CopyTree(o.Rules, filepath.Join(o.Out, "rules")); err != nil {
			return nil, err
		}
	}
	if len(o.Trees) > 0 {
		var specs []overlay.TreeSpec
		harvested := false
		for _, t := range o.Trees {
			from, to, ok := strings.Cut(t, ":")
			if !ok || to == "" || filepath.IsAbs(to) || strings.Contains(to, "..") {
				return nil, fmt.Errorf("-tree %q: want SRC:DEST with DEST relative, e.g. build/py312:py312", t)
			}
			if err := fixture.CopyTreeEach(from, filepath.Join(o.Out, to), each); err != nil {
				return nil, err
			}
			// A harvested tree carries the marker of its own output
			// directory; in the payload it is not an output of its own.
			if err := os.Remove(filepath.Join(o.Out, to, outdir.Marker)); err != nil && !os.IsNotExist(err) {
				return nil, err
			}
			spec, ok, err := treeEntry(filepath.Join(o.Out, to), filepath.ToSlash(filepath.Clean(to)))
			if err != nil {
				return nil, fmt.Errorf("-tree %q: %w", t, err)
			}
			harvested = harvested || ok
			specs = append(specs, spec)
		}
		if harvested {
			for _, sp := range specs {
				if sp.Name == "" {
					return nil, fmt.Errorf("tree %s has no %s and its name does not say what it is; with a harvested tree in the payload every tree needs an entry (make native trees with 'infera-payload harvest')", sp.Dir, harvest.TreeFile)
				}
			}
			if err := writeManifest(o.Out, specs); err != nil {
				return nil, err
			}
		}
	} else if err := demoTrees(o.Out, o.Src); err != nil {
		return nil, err
	}
	copied.Done()
	names, err := PythonEnvNames(o.Out)
	if err != nil {
		return nil, err
	}
	entries, bytes := tally(o.Out)
	if _, err := os.Lstat(filepath.Join(o.Out, overlay.OutMarker)); err == nil {
		entries-- // not indexed
	}
	hashed := o.Progress.Start("index hash", entries, bytes)
	ix, err := overlay.WriteIndexMetered(o.Out, names, hashed)
	if err != nil {
		return nil, err
	}
	hashed.Done()
	return &Result{Dir: o.Out, Index: filepath.Join(o.Out, overlay.IndexName), Entries: len(ix.Entries), Notes: notes}, nil
}

// tally counts what the progress lines count against: the files and
// symlinks under each root (a file root counts as one; __pycache__ is
// left out, as the copy leaves it out) and their bytes. Roots that
// cannot be read count nothing: the copy reports them.
func tally(roots ...string) (files, bytes int64) {
	for _, root := range roots {
		if root == "" {
			continue
		}
		filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return nil
			case d.IsDir() && d.Name() == "__pycache__":
				return filepath.SkipDir
			case d.IsDir():
				return nil
			}
			files++
			if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
				bytes += fi.Size()
			}
			return nil
		})
	}
	return files, bytes
}

// PythonEnvNames are the INFERA_* names the Python code of the payload at
// root reads (string literals in its .py files, in every tree), for the
// index: a start does not call them typos (overlay.PayloadEnvNames).
func PythonEnvNames(root string) ([]string, error) {
	var names []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(p, ".py") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		names = append(names, overlay.PythonEnvNames(src)...)
		return nil
	})
	return names, err
}

func demoTrees(out, src string) error {
	for minor := 9; minor <= 14; minor++ {
		if err := fixture.CopyTree(src, filepath.Join(out, fmt.Sprintf("py3%d", minor))); err != nil {
			return err
		}
	}
	for name, caps := range native {
		dir := filepath.Join(out, "native", name)
		if err := fixture.SharedObject(filepath.Join(dir, "lib", "libinfera_demo.so.1"), "libinfera_demo.so.1"); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "CAPABILITIES"), []byte(caps), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// DemoDirs are the directories Demo makes under its directory.
type DemoDirs struct {
	ROCm, Engine, Models string
}

// Demo replaces o.Demo with the demo's stand-ins for the engine image:
// ROCm 7 and a vLLM install (a copy of o.Engine) shaped like the real one,
// with the anchors of the project's fixes, for infera-exec to patch; and a
// model directory with one small shard for the model-dir check. o.Demo is
// replaced only as Build replaces o.Out (outdir.Replace).
func Demo(o Options) (*DemoDirs, error) {
	dir, engine := o.Demo, o.Engine
	d := &DemoDirs{
		ROCm:   filepath.Join(dir, "rocm"),
		Engine: filepath.Join(dir, "engine"),
		Models: filepath.Join(dir, "models"),
	}
	if err := outdir.Replace(outdir.Path{Flag: "-demo", Path: dir}, o.inputs("-demo"), o.Force); err != nil {
		return nil, err
	}
	if err := fixture.ROCm(d.ROCm, 7, "7.1.70100"); err != nil {
		return nil, err
	}
	if err := fixture.CopyTree(engine, d.Engine); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(d.Models, "demo"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(d.Models, "demo", "model-00001-of-00001.safetensors"), make([]byte, 1<<20), 0o644); err != nil {
		return nil, err
	}
	return d, nil
}

// treeEntry is a tree's payload.toml entry: the tree.toml that
// `infera-payload harvest` wrote into it (taken out of the payload, with
// dir set to DEST), or, for a tree without one, what its name implies
// (py3XX: a python tree for CPython 3.XX; otherwise none, Name ""). ok
// says whether the tree had its own entry.
func treeEntry(dir, dest string) (spec overlay.TreeSpec, ok bool, err error) {
	file := filepath.Join(dir, harvest.TreeFile)
	data, err := os.ReadFile(file)
	if err == nil {
		var m overlay.Manifest
		if _, err := toml.Decode(string(data), &m); err != nil || len(m.Trees) != 1 {
			return spec, false, fmt.Errorf("%s: want one [[tree]] (%v)", file, err)
		}
		spec = m.Trees[0]
		spec.Dir = dest
		return spec, true, os.Remove(file)
	}
	base := path.Base(dest)
	if m := pyTreeRE.FindStringSubmatch(base); m != nil {
		return overlay.TreeSpec{Name: base, Kind: "python", Dir: dest, Python: "= 3." + m[1]}, false, nil
	}
	return overlay.TreeSpec{Dir: dest}, false, nil // no entry: only a v0.2.2 layout can hold it
}

var pyTreeRE = regexp.MustCompile(`^py3(\d+)$`)

// writeManifest writes payload.toml from the trees' entries and reads it
// back as infera-exec will.
func writeManifest(out string, specs []overlay.TreeSpec) error {
	var b strings.Builder
	b.WriteString("# Written by infera-payload index from the trees' entries.\nschema = 1\n")
	for _, t := range specs {
		fmt.Fprintf(&b, "\n[[tree]]\nname = %q\nkind = %q\ndir = %q\npython = %q\n", t.Name, t.Kind, t.Dir, t.Python)
		if t.ROCm != "" {
			fmt.Fprintf(&b, "rocm = %q\n", t.ROCm)
		}
		if len(t.Capabilities) > 0 {
			b.WriteString("[tree.capabilities]\n")
			names := make([]string, 0, len(t.Capabilities))
			for c := range t.Capabilities {
				names = append(names, c)
			}
			sort.Strings(names)
			for _, c := range names {
				q := make([]string, len(t.Capabilities[c]))
				for i, g := range t.Capabilities[c] {
					q[i] = strconv.Quote(g)
				}
				fmt.Fprintf(&b, "%q = [%s]\n", c, strings.Join(q, ", "))
			}
		}
	}
	if err := os.WriteFile(filepath.Join(out, overlay.ManifestName), []byte(b.String()), 0o644); err != nil {
		return err
	}
	_, err := overlay.ReadManifest(out)
	return err
}

// checkRules loads the preflight rules in dir as a start will load them
// from the payload's rules/: a file a start would refuse (exit 78 on every
// start) fails the build, naming the file and the line.
func checkRules(dir string) error {
	extra, err := rules.LoadDir(dir)
	if err == nil {
		_, err = rules.Merge(rules.Builtin(), extra)
	}
	if err != nil {
		return fmt.Errorf("-rules %s: %w; a start with this payload would refuse to run (exit 78)", dir, err)
	}
	return nil
}

// checkPatches loads the definitions in dir as a start will load them from
// the payload's patches/, before anything is written: a definition a start
// would refuse (exit 78 on every start) fails the build, and so does a
// .toml file no start reads, and so does a marker of a definition that
// one of the pristine trees shipped beside it holds outside the edit's
// site (checkPristine). It returns notes for definitions that will work
// but read as drift on engine releases without the code they fix, and
// for those whose markers no tree checks.
func checkPatches(dir string) ([]string, error) {
	set, err := patchdef.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("-patches %s: %w; a start with this payload would refuse to run (exit 78)", dir, err)
	}
	stray, err := patchdef.Stray(dir)
	if err != nil {
		return nil, fmt.Errorf("-patches %s: %w", dir, err)
	}
	if len(stray) > 0 {
		return nil, fmt.Errorf("-patches %s: %s: not at <import-name>/<file>.toml, where a start reads definitions (e.g. vllm/my-fix.toml), so it would never be in force",
			dir, strings.Join(stray, ", "))
	}
	var notes []string
	for _, d := range set.Defs {
		if !strings.HasPrefix(d.Source, dir+"/") {
			continue // a built-in definition
		}
		note, err := checkPristine(d)
		if err != nil {
			return nil, fmt.Errorf("-patches %s: %w", dir, err)
		}
		if note != "" {
			notes = append(notes, note)
		}
		if v := d.Unguarded(); len(v) > 0 {
			what := "it has no [[guard]]"
			if v[0] != "" {
				what = "variants " + strings.Join(v, ", ") + " have no guard"
			}
			notes = append(notes, fmt.Sprintf("patch definition %s (%s): %s, so on an engine release without the code it fixes it reads as drift (--check exits 65, every start warns); name that code in a [[guard]] (file, contains)", d.Source, d.ID, what))
		}
	}
	return notes, nil
}

// checkPristine checks every marker of every variant of d (upstream,
// legacy_marker and the replacement) against every pristine tree shipped
// beside it (patchdef.TreesSuffix): one that a tree holds outside the
// edit's site fails the build, naming definition, variant, edit, file and
// line, and so does a tree that holds none of d's files (a tree laid out
// wrongly checks nothing). With no trees it returns a note: the markers
// were not checked against upstream's code.
func checkPristine(d *patchdef.Definition) (note string, _ error) {
	dir := d.TreesDir()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("patch definition %s (%s): no pristine tree beside it (%s/<tree>/%s/...: the engine's files as a release installs them, where the fix is pending), so no build checked that its markers stand nowhere else in upstream's code; a marker that does can read as applied where the fix is not",
			d.Source, d.ID, filepath.Base(dir), d.Package), nil
	}
	if err != nil {
		return "", fmt.Errorf("patch definition %s: pristine trees: %w", d.Source, err)
	}
	var bad []string
	for _, e := range entries {
		tree := filepath.Join(dir, e.Name())
		if !e.IsDir() {
			return "", fmt.Errorf("patch definition %s: %s is not a directory: %s/ holds pristine trees only, each a directory laid out as site-packages (<tree>/%s/...)", d.Source, tree, dir, d.Package)
		}
		found, checked, err := d.AmbiguousIn(tree)
		if err != nil {
			return "", err
		}
		if checked == 0 {
			return "", fmt.Errorf("patch definition %s (%s): pristine tree %s holds none of the files it edits (want %s/%s/<file>, e.g. %s)", d.Source, d.ID, tree, tree, d.Package, firstFile(d))
		}
		for _, a := range found {
			bad = append(bad, a.String())
		}
	}
	if len(bad) > 0 {
		return "", fmt.Errorf("a marker stands outside its edit's site in a pristine tree, where it would decide the edit the day the site moves (make it longer, give it its indentation, or narrow the site; a start refuses the definition, exit 78, where an engine file holds its upstream or legacy marker outside the site):\n  %s",
			strings.Join(bad, "\n  "))
	}
	return "", nil
}

// firstFile is the file of d's first edit.
func firstFile(d *patchdef.Definition) string {
	for _, v := range d.EditSets() {
		for _, e := range v.Edits {
			return e.File
		}
	}
	return ""
}
