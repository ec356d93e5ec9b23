package capability

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Evidence is what a manifest says must exist in a tree for a capability
// to be granted, and what was found: a capability list that can lie is
// worse than none, so every glob must match at least one file.
type Evidence struct {
	Capability string              `json:"capability"`
	Globs      []string            `json:"globs"`
	Found      map[string][]string `json:"found,omitempty"`   // glob -> matching files (a few)
	Missing    []string            `json:"missing,omitempty"` // globs that matched nothing
	Granted    bool                `json:"granted"`
	// Evidence ELF files that exist but do not load against the image:
	// file -> the library or symbol version missing. Any withdraws the
	// capability.
	DoesNotLoad map[string][]string `json:"does_not_load,omitempty"`
}

// Verify checks each capability's evidence in dir and returns the granted
// set and, per capability, what was found and what was missing.
func Verify(dir string, decl map[string][]string) (Set, []Evidence) {
	names := make([]string, 0, len(decl))
	for n := range decl {
		names = append(names, n)
	}
	sort.Strings(names)
	// Globbing an fs.FS rooted at the tree: nothing outside it can match,
	// whatever the pattern.
	fsys := os.DirFS(dir)
	var granted []string
	var out []Evidence
	for _, n := range names {
		ev := Evidence{Capability: n, Globs: decl[n], Found: map[string][]string{}}
		for _, g := range decl[n] {
			matches, err := doublestar.Glob(fsys, g, doublestar.WithFilesOnly(), doublestar.WithFailOnIOErrors())
			matches = slices.DeleteFunc(matches, func(m string) bool { return leavesTree(dir, m) })
			if err != nil || len(matches) == 0 {
				ev.Missing = append(ev.Missing, g)
				continue
			}
			sort.Strings(matches)
			if len(matches) > 3 {
				matches = matches[:3]
			}
			ev.Found[g] = matches
		}
		ev.Granted = len(decl[n]) > 0 && len(ev.Missing) == 0
		if ev.Granted {
			granted = append(granted, n)
		}
		out = append(out, ev)
	}
	return newSet(granted), out
}

// leavesTree reports whether match (relative to dir) resolves, through a
// symbolic link, to a file outside dir: os.DirFS follows links, and a
// library outside the tree is no evidence of what the tree ships.
func leavesTree(dir, match string) bool {
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return true
	}
	real, err := filepath.EvalSymlinks(filepath.Join(dir, filepath.FromSlash(match)))
	if err != nil {
		return true
	}
	rel, err := filepath.Rel(realDir, real)
	return err != nil || rel == ".." || strings.HasPrefix(rel, "../")
}
