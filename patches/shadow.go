package patches

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/pyimport"
	"github.com/infera/infera-exec/internal/shadowtree"
	"github.com/infera/infera-exec/internal/statedir"
	"github.com/infera/infera-exec/patches/patchdef"
)

// shadowing is where a start writes the patches of a package whose
// directory cannot be written in place (INFERA_PATCH_WRITE, see
// docs/patches.md): a shadow tree of the package in the state directory
// (package shadowtree), whose copies are patched as any file is, and
// which is put first on the worker's PYTHONPATH once the worker's
// interpreter is seen to import the package from it. A package is
// written all in place or all in its tree, never some of each.
type shadowing struct {
	trees map[string]*shadowtree.Tree // by package name
	image map[string]string           // the image's package directory, by name
	loc   *Location                   // the location the patches are applied at: each shadowed package in its tree
}

// shadowDir is the state directory's subdirectory that holds the trees.
const shadowDir = "shadow"

// planShadows decides, per package of loc that set patches, whether its
// patches go into a shadow tree, and makes the tree: with
// INFERA_PATCH_WRITE=shadow always, with auto when a directory holding a
// file to edit cannot be written (EROFS, EACCES, EPERM, or a file of
// another owner for a start that is not root) and something is to be
// written there (a tree already made for the package's present files is
// used as it is). A dry run makes none and says what a start would do.
func planShadows(in Input, set *patchdef.Set, loc *Location, log *slog.Logger) *shadowing {
	sh := &shadowing{trees: map[string]*shadowtree.Tree{}, image: map[string]string{}, loc: loc}
	mode := in.Config.PatchWrite
	if mode == config.PatchWriteInPlace || loc == nil {
		return sh
	}
	ignores := ignoresPythonPath(in, in.Env)
	for _, name := range slices.Sorted(maps.Keys(loc.Packages)) {
		pkg := loc.Packages[name]
		files := editedFiles(set, name)
		if !pkg.Found || len(files) == 0 {
			continue
		}
		why, short := "INFERA_PATCH_WRITE=shadow", "INFERA_PATCH_WRITE=shadow"
		if mode != config.PatchWriteShadow {
			err := shadowtree.Blocked(pkg.Dir, files)
			if err == nil {
				continue
			}
			why, short = err.Error(), err.Error()
			if errno := syscall.Errno(0); errors.As(err, &errno) {
				short = errno.Error() // the text line's; the record's detail has the directory
			}
		}
		switch {
		case ignores != "":
			log.Warn(fmt.Sprintf("%s at %s: %s; no shadow tree: the worker reads no PYTHONPATH; its patches are tried in place", name, pkg.Dir, short),
				"detail", fmt.Sprintf("%s, and a shadow tree would not be in force: %s", why, ignores))
			continue
		case pkg.Namespace || len(pkg.Dirs) > 1:
			log.Warn(fmt.Sprintf("%s at %s: %s, and a namespace package of several directories gets no shadow tree; its patches are tried in place", name, pkg.Dir, why))
			continue
		case in.StateDir == "":
			log.Warn(fmt.Sprintf("%s at %s: %s, and there is no state directory for a shadow tree; its patches are tried in place", name, pkg.Dir, why))
			continue
		case in.DryRun:
			log.Info(fmt.Sprintf("%s at %s: %s; a start writes its patches in a shadow tree in %s", name, pkg.Dir, why, filepath.Join(in.StateDir, shadowDir)))
			continue
		}
		parent := filepath.Join(in.StateDir, shadowDir)
		spec := shadowtree.Spec{Pkg: pkg.Dir, Name: name, Files: files, Beside: distInfoBeside(pkg)}
		tree, found, err := shadowtree.Find(parent, spec)
		if err == nil && !found {
			if mode == config.PatchWriteAuto && !toWrite(set, name, loc, in) {
				continue // in force in the image as it is (a baked image): nothing to shadow
			}
			if err = statedir.Dir(parent); err == nil {
				for _, r := range shadowtree.Sweep(parent) {
					log.Info(fmt.Sprintf("%s: removed %s, a shadow tree a killed start left half-built", parent, r))
				}
				tree, err = shadowtree.Ensure(parent, spec)
			}
		}
		if err != nil {
			log.Warn(fmt.Sprintf("%s at %s: %s, and no shadow tree could be made (%v); its patches are tried in place", name, pkg.Dir, why, err))
			continue
		}
		if sh.loc == loc {
			c := *loc
			c.Packages = maps.Clone(loc.Packages)
			sh.loc = &c
		}
		p := pkg
		p.Dir, p.Dirs = tree.Dir, []string{tree.Dir}
		sh.loc.Packages[name] = p
		sh.trees[name], sh.image[name] = tree, pkg.Dir
		made := "made"
		if tree.Reused {
			made = "an earlier start's"
		}
		log.Info(fmt.Sprintf("%s at %s: %s; its patches go into the shadow tree %s (%s)", name, pkg.Dir, short, tree.Root, made), "detail", why)
		for _, n := range tree.Notes {
			log.Warn(fmt.Sprintf("%s: shadow tree %s: %s", name, tree.Root, n))
		}
	}
	return sh
}

// toWrite reports whether a patch of package name is pending in the image
// as it is (a dry evaluation of the package alone).
func toWrite(set *patchdef.Set, name string, loc *Location, in Input) bool {
	only := *loc
	only.Packages = map[string]Package{name: loc.Packages[name]}
	res, _ := apply(set, &only, options{DryRun: true, PyMinor: in.PyMinor})
	for _, r := range res {
		if r.Package == name && (r.State == patchdef.Pending || r.State == patchdef.Partial) {
			return true
		}
	}
	return false
}

// confirm asks the worker's interpreter (the resolver, else the probe),
// with the trees first on PYTHONPATH, where it imports each shadowed
// package from. A tree it imports goes on PYTHONPATH (the edits returned)
// and its patches are in force; for one it does not (an interpreter
// started with -I or -E ignores PYTHONPATH), the patches written in the
// tree are not in force: shadowed, loading from the image's file, and the
// tree stays off the path. The location returned is the worker's with the
// edits.
func (sh *shadowing) confirm(ctx context.Context, in Input, names []string, dists map[string]string, results []Result, log *slog.Logger) ([]environ.Edit, *Location) {
	if len(sh.trees) == 0 {
		return nil, nil
	}
	var roots, shadowed []string
	for _, n := range slices.Sorted(maps.Keys(sh.trees)) {
		roots = append(roots, sh.trees[n].Root)
		shadowed = append(shadowed, n)
	}
	env := in.Env.Clone()
	env.Apply(environ.Prepend("PYTHONPATH", roots...))
	probe := in
	probe.Env = env
	l := locator(probe, dists)
	if l.CacheDir != "" {
		// Its answer is kept apart from the start's own question (the
		// same interpreter, directory and names, without the trees),
		// which would otherwise replace each other's at every start.
		l.CacheDir = filepath.Join(l.CacheDir, shadowDir)
	}
	got, err := l.locate(ctx, names)
	// The worker's own command line decides first: an interpreter started
	// with -E or -I reads no PYTHONPATH, whatever a probe without its
	// options answered.
	if why := ignoresPythonPath(in, env); why != "" {
		got, err = nil, errors.New(why)
	}
	var kept []string
	for _, n := range shadowed {
		t := sh.trees[n]
		var imports, reason string
		switch {
		case err != nil:
			reason = err.Error()
		case !got.Packages[n].Found:
			reason = "with the tree first on PYTHONPATH it does not find " + n + " at all"
		default:
			imports = got.Packages[n].Dir
			reason = "with the tree first on PYTHONPATH it imports " + n + " from " + imports + " (an entry before PYTHONPATH holds it)"
		}
		if imports == t.Dir {
			kept = append(kept, t.Root)
			for i := range results {
				if results[i].Package == n {
					results[i].Shadow = t.Root
				}
			}
			continue
		}
		why := fmt.Sprintf("written in the shadow tree %s, which the worker's interpreter does not import %s from: %s", t.Root, n, reason)
		log.Warn(fmt.Sprintf("%s: the shadow tree %s is not in force, and not put on PYTHONPATH: %s", n, t.Root, reason))
		for i := range results {
			r := &results[i]
			if r.Package != n || r.State != patchdef.Applied || sameAsImage(r, t.Dir, sh.image[n]) {
				continue
			}
			r.State, r.NotImported, r.LoadsInstead, r.Why = patchdef.Shadowed, true, sh.image[n], why
		}
	}
	if len(kept) == 0 {
		return nil, nil
	}
	return []environ.Edit{environ.Prepend("PYTHONPATH", kept...)}, got
}

// ignoresPythonPath says why the worker's interpreter reads no
// PYTHONPATH, as its command line shows (-E, -I); "" when it reads it or
// the command is not an interpreter's (the probe's question decides then).
func ignoresPythonPath(in Input, env *environ.Env) string {
	if in.Worker == nil {
		return ""
	}
	c, err := pyimport.ParseCommand(in.Worker.Argv, in.Worker.Path, env.Get, in.Worker.Cwd)
	if err == nil && c.Flags.IgnoreEnv {
		return "the worker's interpreter is started with -E or -I, so it reads no PYTHONPATH"
	}
	return ""
}

// sameAsImage reports whether every file r edited reads in the tree as
// the image's file does: then r's state holds for the image as well.
func sameAsImage(r *Result, treeDir, imageDir string) bool {
	for _, e := range r.Edits {
		rel, err := filepath.Rel(treeDir, e.Path)
		if err != nil || strings.HasPrefix(rel, "..") {
			return false
		}
		a, err1 := os.ReadFile(e.Path)
		b, err2 := os.ReadFile(filepath.Join(imageDir, rel))
		if err1 != nil || err2 != nil || string(a) != string(b) {
			return false
		}
	}
	return len(r.Edits) > 0
}

// editedFiles are the files, relative to the package directory, that
// any variant of any definition of package name edits.
func editedFiles(set *patchdef.Set, name string) []string {
	var files []string
	for _, d := range set.Defs {
		if d.Package != name {
			continue
		}
		for _, v := range d.EditSets() {
			for _, e := range v.Edits {
				if !slices.Contains(files, e.File) {
					files = append(files, e.File)
				}
			}
		}
	}
	slices.Sort(files)
	return files
}

// distInfoBeside is the distribution's metadata directory when it lies
// beside the package (a regular install): linked at the tree's root.
func distInfoBeside(pkg Package) []string {
	if pkg.VersionFrom == "" {
		return nil
	}
	di := filepath.Dir(pkg.VersionFrom)
	if filepath.Dir(di) != filepath.Dir(pkg.Dir) || !strings.HasSuffix(di, ".dist-info") {
		return nil
	}
	return []string{filepath.Base(di)}
}
