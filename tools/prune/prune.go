// Package prune removes from a pure-Python tree (pip install --target)
// the distributions a base image already provides. pip resolves a tree
// on its own, so it re-installs what the base has, often at another
// version; first on PYTHONPATH, the tree's copy then shadows the base's
// (numpy 2.5.1 over the base's 2.3.5 broke the base's numba at import).
// Distributions are matched by canonical name; each is removed with every
// file its RECORD lists.
package prune

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/infera/infera-exec/internal/distinfo"
	"github.com/infera/infera-exec/internal/progress"
	"github.com/infera/infera-exec/internal/sitepath"
)

// Options are the inputs of one prune.
type Options struct {
	Tree   string   // the tree (a site directory: pip --target)
	Base   string   // the base root
	Keep   []string // distributions to keep even when the base has them
	DryRun bool     // say what would be removed, remove nothing
	// Sites are where the base's packages live, paths inside Base: a
	// venv or installation prefix (/app/.venv), or a site directory
	// itself; empty: every installation found (distinfo.SiteDirs).
	Sites []string

	Progress *progress.Reporter // how far the removal is; nil: quiet
}

// Match is a distribution of the tree that the base provides too.
type Match struct {
	Name        string `json:"name"`
	TreeVersion string `json:"tree_version"`
	BaseVersion string `json:"base_version"`
	BaseMeta    string `json:"base_meta"` // the base's metadata directory
	Kept        bool   `json:"kept"`      // on the allow-list
	Files       int    `json:"files"`     // removed (or that would be)
}

// Shadow reports whether the tree's copy is another version than the base's.
func (m Match) Shadow() bool { return m.TreeVersion != m.BaseVersion }

// Result is what the prune did.
type Result struct {
	Tree    string
	Sites   []string // the base's site directories compared with
	Matches []Match
	Left    int // distributions left in the tree
}

// Run prunes.
func Run(o Options) (*Result, error) {
	for _, d := range []string{o.Tree, o.Base} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%s is not a directory", d)
		}
	}
	dists, err := distinfo.List(o.Tree)
	if err != nil {
		return nil, err
	}
	r := &Result{Tree: o.Tree}
	if len(o.Sites) > 0 {
		if r.Sites, err = baseSites(o.Base, o.Sites); err != nil {
			return nil, err
		}
	} else if r.Sites = distinfo.SiteDirs(o.Base); len(r.Sites) == 0 {
		return nil, fmt.Errorf("the base %s has no site directory of an interpreter where one is looked for (PREFIX/lib/python3.X/site-packages under /usr, /usr/local or /opt/*, Debian's dist-packages, a venv under /opt); name where its packages live with -base-site, e.g. -base-site /app/.venv", o.Base)
	}
	inBase := map[string]distinfo.Dist{}
	for _, s := range r.Sites {
		ds, err := distinfo.List(s)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if _, ok := inBase[d.Key()]; !ok {
				inBase[d.Key()] = d
			}
		}
	}
	keep := map[string]bool{}
	for _, k := range o.Keep {
		keep[distinfo.Canonical(k)] = true
	}
	var removals [][]string // each match's files, in r.Matches' order
	var total, totalBytes int64
	for _, d := range dists {
		b, ok := inBase[d.Key()]
		if !ok {
			r.Left++
			continue
		}
		m := Match{Name: d.Name, TreeVersion: d.Version, BaseVersion: b.Version, BaseMeta: b.Meta, Kept: keep[d.Key()]}
		var files []string
		if m.Kept {
			r.Left++
		} else {
			if files, err = d.Files(); err != nil {
				return nil, fmt.Errorf("%s: %w (without its RECORD the files it installed are not known; remove it by hand or keep it with -keep %s)", d.Meta, err, d.Name)
			}
			m.Files = len(files)
			total += int64(len(files))
			totalBytes += sizes(o.Tree, files)
		}
		r.Matches = append(r.Matches, m)
		removals = append(removals, files)
	}
	if o.DryRun {
		return r, nil
	}
	removed := o.Progress.Start("prune", total, totalBytes)
	for _, files := range removals {
		if err := remove(o.Tree, files, removed); err != nil {
			return nil, err
		}
	}
	removed.Done()
	return r, nil
}

// baseSites are the site directories of the places given (paths inside
// base): a site directory itself (site-packages, dist-packages), or the
// site directories of the installations at a prefix or venv. A place
// that holds none is an error naming what was looked for.
func baseSites(base string, places []string) ([]string, error) {
	var out []string
	for _, pl := range places {
		inside := filepath.Clean("/" + pl)
		hp := filepath.Join(base, inside)
		fi, err := os.Stat(hp)
		if err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("-base-site %s: %s is not a directory", pl, hp)
		}
		var found []string
		switch filepath.Base(inside) {
		case "site-packages", "dist-packages":
			found = []string{hp}
		default:
			found = sitepath.SiteDirsAt(base, inside)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("-base-site %s: %s holds no site-packages: want a venv or installation prefix (with lib/python3.X/site-packages), or a site-packages or dist-packages directory itself", pl, hp)
		}
		for _, f := range found {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out, nil
}

// sizes is the bytes of the files (relative to tree) that exist.
func sizes(tree string, files []string) int64 {
	var n int64
	for _, rel := range files {
		if fi, err := os.Lstat(filepath.Join(tree, filepath.FromSlash(rel))); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// remove deletes the files (relative to tree), then the directories they
// leave empty (or holding only __pycache__), deepest first.
func remove(tree string, files []string, m *progress.Meter) error {
	dirs := map[string]bool{}
	for _, rel := range files {
		p := filepath.Join(tree, filepath.FromSlash(rel))
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			m.Add(1, 0)
			continue
		}
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		} else if err := os.Remove(p); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			m.Add(1, fi.Size())
		} else {
			m.Add(1, 0)
		}
		for d := filepath.Dir(p); d != tree && strings.HasPrefix(d, tree); d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	list := make([]string, 0, len(dirs))
	for d := range dirs {
		list = append(list, d)
	}
	sort.Slice(list, func(i, j int) bool { return strings.Count(list[i], "/") > strings.Count(list[j], "/") })
	for _, d := range list {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		if len(entries) == 1 && entries[0].Name() == "__pycache__" {
			os.RemoveAll(filepath.Join(d, "__pycache__"))
			entries = nil
		}
		if len(entries) == 0 {
			os.Remove(d)
		}
	}
	return nil
}

// WriteText lists what was removed and each version shadow.
func (r *Result) WriteText(w io.Writer, dry bool) {
	verb := "removed"
	if dry {
		verb = "would remove"
	}
	removed := 0
	for _, m := range r.Matches {
		switch {
		case m.Kept && m.Shadow():
			fmt.Fprintf(w, "kept     %s %s (allow-list): it shadows the base's %s (%s)\n", m.Name, m.TreeVersion, m.BaseVersion, m.BaseMeta)
		case m.Kept:
			fmt.Fprintf(w, "kept     %s %s (allow-list), the base has the same version\n", m.Name, m.TreeVersion)
		case m.Shadow():
			removed++
			fmt.Fprintf(w, "%s %s %s (%d files): it would have shadowed the base's %s (%s)\n", verb, m.Name, m.TreeVersion, m.Files, m.BaseVersion, m.BaseMeta)
		default:
			removed++
			fmt.Fprintf(w, "%s %s %s (%d files): the base has the same version\n", verb, m.Name, m.TreeVersion, m.Files)
		}
	}
	fmt.Fprintf(w, "%s: %d distribution%s %s, %d left (compared with %s)\n", r.Tree, removed, map[bool]string{true: "", false: "s"}[removed == 1], verb, r.Left, strings.Join(r.Sites, ", "))
}

// Shadows are the matches at another version than the base's.
func (r *Result) Shadows() []Match {
	return slices.DeleteFunc(slices.Clone(r.Matches), func(m Match) bool { return !m.Shadow() })
}
