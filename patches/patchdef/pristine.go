package patchdef

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TreesSuffix names where a payload definition's pristine trees are: a
// definition <import-name>/<name>.toml may ship, beside it, the engine's
// files as upstream releases them, where the fix is pending, in
// <import-name>/<name>.trees/<tree>/, each tree laid out as site-packages
// (<tree>/<package>/<file>, e.g. sglang/my-fix.trees/v0.5.16/sglang/srt/
// disaggregation/prefill.py). `infera-payload index` checks every marker
// of the definition against every tree (AmbiguousIn) and leaves the
// trees out of the payload; a start reads none.
const TreesSuffix = ".trees"

// TreesDir is where the pristine trees of d, read from a payload's
// patches/, are: its file with TreesSuffix for .toml.
func (d *Definition) TreesDir() string {
	return strings.TrimSuffix(d.Source, ".toml") + TreesSuffix
}

// IsTreesDir says whether rel (within a patches/ directory) is the trees
// directory of a definition: <import-name>/<name>.trees.
func IsTreesDir(rel string) bool {
	ok, _ := filepath.Match("*/*"+TreesSuffix, filepath.ToSlash(rel))
	return ok
}

// Ambiguity is a marker of an edit (upstream, legacy_marker, or our
// replacement) that a pristine file holds outside every site of the
// edit: text that is there where the fix is not, so a definition to fix
// (a longer marker, one with its indentation, or a narrower site), never
// one to ship.
type Ambiguity struct {
	Def     string // the definition's id
	Source  string // the definition's file
	Variant string // "" for a definition without variants
	Edit    int    // 1-based, in the variant
	File    string // the pristine file
	Marker  string // "<key> at line N" (Edit.Ambiguous)
}

func (a Ambiguity) String() string {
	v := ""
	if a.Variant != "" {
		v = " variant " + a.Variant + ":"
	}
	return fmt.Sprintf("patch definition %s (%s):%s edit %d: %s in %s, a pristine file, outside the edit's site",
		a.Def, a.Source, v, a.Edit, a.Marker, a.File)
}

// AmbiguousIn checks the edits of d's variants named in variants (none
// named: every variant) against the pristine tree root, laid out as a
// site-packages directory: the package's files at root/<package>/<file>.
// An edit whose file the tree does not hold is not checked. It returns
// every marker found outside its edit's site, and how many edits were
// checked (a tree that checks none holds none of d's files).
func (d *Definition) AmbiguousIn(root string, variants ...string) (found []Ambiguity, checked int, err error) {
	named := func(v string) bool {
		if len(variants) == 0 {
			return true
		}
		for _, n := range variants {
			if n == v {
				return true
			}
		}
		return false
	}
	for _, v := range d.EditSets() {
		if !named(v.Name) {
			continue
		}
		for i := range v.Edits {
			e := &v.Edits[i]
			path := filepath.Join(root, filepath.FromSlash(d.Package), filepath.FromSlash(e.File))
			data, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, 0, fmt.Errorf("patch definition %s: pristine tree %s: %w", d.Source, root, err)
			}
			checked++
			for _, m := range e.Ambiguous(string(data)) {
				found = append(found, Ambiguity{Def: d.ID, Source: d.Source, Variant: v.Name, Edit: i + 1, File: path, Marker: m})
			}
		}
	}
	return found, checked, nil
}
