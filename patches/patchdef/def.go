// Package patchdef is the patch definition format: its TOML, its
// validation, the built-in definitions decoded at build time, and the
// state an edit is in for a given file content. Package patches applies
// definitions at start; a payload build validates them with Load.
package patchdef

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
	goversion "github.com/hashicorp/go-version"
	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/digest"
)

// Definition is one patch: one or more edits that stand or fall together.
// Upstream code moves, so a patch may carry several variants, each a
// complete set of edits for one range of upstream code; top-level edits
// are a patch with a single, unnamed variant.
type Definition struct {
	ID           string    `toml:"id" json:"id"`
	Summary      string    `toml:"summary" json:"summary"`
	Package      string    `toml:"package" json:"package"`
	Distribution string    `toml:"distribution" json:"distribution"`
	Versions     string    `toml:"versions" json:"versions,omitempty"`
	Required     bool      `toml:"required" json:"required"`
	Guards       []Guard   `toml:"guard" json:"guards,omitempty"`
	Edits        []Edit    `toml:"edit" json:"edits,omitempty"`
	Variants     []Variant `toml:"variant" json:"variants,omitempty"`
	// Supersedes names v0.2.2 patch scripts (file names under
	// patches/<package>/) that fix the same bug; they are not run.
	Supersedes []string `toml:"supersedes" json:"supersedes,omitempty"`
	// Requires names patches (ids, of the same package) this fix is
	// wrong without: it is applied only where each of them is applied or
	// upstream, or is applied by the same run. Merge orders a set so that a
	// requirement is decided before the patches that need it.
	Requires []string `toml:"requires" json:"requires,omitempty"`
	// Caveat is what an operator must know about keeping the fix on (a
	// guard that hides a race instead of fixing it); --check shows it.
	Caveat string `toml:"caveat" json:"caveat,omitempty"`
	// Status is where the fix stands upstream, and when to drop the patch.
	Status *UpstreamStatus `toml:"upstream" json:"upstream,omitempty"`

	Source string `toml:"-" json:"source"` // file it was read from

	constraint goversion.Constraints
}

// UpstreamStatus is where a fix stands in the project it patches: the
// upstream issue and pull request (or "none found"), the pull request's
// state when it was last looked at, and what has to happen upstream for
// the patch to be dropped.
type UpstreamStatus struct {
	Issue string `toml:"issue" json:"issue"`
	PR    string `toml:"pr" json:"pr"`
	State string `toml:"state" json:"state,omitempty"`
	Drop  string `toml:"drop" json:"drop"`
}

// String is the status on one line, as --check prints it.
func (u *UpstreamStatus) String() string {
	if u == nil {
		return ""
	}
	s := "upstream issue " + u.Issue + ", PR " + u.PR
	if u.State != "" {
		s += " (" + u.State + ")"
	}
	return s + "; drop when " + u.Drop
}

// Variant is one complete, self-consistent set of edits for a range of
// upstream code. Its own guards and version range narrow where it is
// tried; the first variant whose anchors all match is the one applied.
type Variant struct {
	Name     string  `toml:"name" json:"name"`
	Versions string  `toml:"versions" json:"versions,omitempty"`
	Guards   []Guard `toml:"guard" json:"guards,omitempty"`
	Edits    []Edit  `toml:"edit" json:"edits"`

	constraint goversion.Constraints
}

// Guard names the code a fix is about: the file (relative to the package
// directory) and, optionally, text it must contain. Where a guard does
// not hold, the bug cannot exist and the patch (or variant) is
// not-applicable, never drift.
//
// Absent turns a guard around: it holds where the file is absent or (with
// Contains) lacks the text. A variant for a release without a second
// implementation of the behaviour says so with it, so that it never
// reads as the fix in force where that implementation exists.
type Guard struct {
	File     string `toml:"file" json:"file"`
	Contains string `toml:"contains" json:"contains,omitempty"`
	Absent   bool   `toml:"absent" json:"absent,omitempty"`
	// ContainsAny: the file must also contain one of these (the code as
	// upstream has it, or as a v0.2.2 script left it).
	ContainsAny []string `toml:"contains_any" json:"contains_any,omitempty"`
}

// Holds reports whether content has what the guard asks for (before
// Absent turns it around).
func (g *Guard) Holds(count func(string) int) bool {
	if g.Contains != "" && count(g.Contains) == 0 {
		return false
	}
	if len(g.ContainsAny) == 0 {
		return true
	}
	for _, c := range g.ContainsAny {
		if count(c) > 0 {
			return true
		}
	}
	return false
}

// What names the text a guard looks for, for messages.
func (g *Guard) What() string {
	var parts []string
	if g.Contains != "" {
		parts = append(parts, fmt.Sprintf("%q", strings.TrimSpace(g.Contains)))
	}
	if len(g.ContainsAny) > 0 {
		var any []string
		for _, c := range g.ContainsAny {
			any = append(any, fmt.Sprintf("%q", strings.TrimSpace(c)))
		}
		parts = append(parts, "any of "+strings.Join(any, ", "))
	}
	return strings.Join(parts, " and ")
}

// Edit replaces Count occurrences of Anchor in File with Replacement.
type Edit struct {
	File        string `toml:"file" json:"file"`
	Anchor      string `toml:"anchor" json:"-"`
	Replacement string `toml:"replacement" json:"-"`
	Count       int    `toml:"count" json:"count"`
	Upstream    string `toml:"upstream" json:"-"`
	// Optional: the file may be absent in some versions of the package;
	// the edit is then not-applicable rather than drift.
	Optional bool `toml:"optional" json:"optional,omitempty"`
	// LegacyMarker is text that an earlier patch (LegacyScript, the file
	// name of a script or of a seed diff, from LegacyFrom) leaves in the
	// file when it has made this fix: with our replacement absent and the
	// marker present, the edit is applied, by that patch.
	LegacyMarker string `toml:"legacy_marker" json:"-"`
	LegacyScript string `toml:"legacy_script" json:"legacy_script,omitempty"`
	// LegacyFrom is whose LegacyScript is: LegacyV022 (the default, "") or
	// LegacySeed. A diff (*.diff) is the seed's only.
	LegacyFrom string `toml:"legacy_from" json:"legacy_from,omitempty"`
	// LegacyUnique says the legacy marker is text only the script writes,
	// never upstream: where it is, the file is the script's result even
	// when the upstream marker is there too (a script that borrowed
	// upstream's names). Without it the upstream marker decides first, for
	// a script whose change is the same text as upstream's fix.
	LegacyUnique bool `toml:"legacy_unique" json:"-"`
	// Site is text on the line that opens the Python block (def or class)
	// the fix is in, for an edit whose anchor and replacement share no
	// whole line or whose upstream fix stands elsewhere in that block: its
	// upstream and legacy markers are looked for only inside such a block
	// (see site.go). Without it the site is where the lines the anchor and
	// the replacement share at their start and end stand.
	Site string `toml:"site" json:"-"`
	// SiteLines is how many lines a site without Site spans beyond its
	// context; 0 = 12 more than the longer of anchor and replacement.
	SiteLines int `toml:"site_lines" json:"-"`
}

var (
	idRE      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`) })
	importRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	distRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`) })
	releaseRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\d+(\.\d+)*`) })
)

// Parse reads one TOML definition. Unknown keys are an error: a misspelt
// "anchor" must not turn into an edit that matches nothing.
func Parse(data []byte, source string) (*Definition, error) {
	var d Definition
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&d)
	if err != nil {
		return nil, fmt.Errorf("patch definition %s: %w", source, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("patch definition %s: unknown keys %s", source, strings.Join(keys, ", "))
	}
	d.Source = source
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("patch definition %s: %w", source, err)
	}
	return &d, nil
}

// Validate checks a definition built in code (Parse validates what it
// reads) and prepares its version ranges.
func (d *Definition) Validate() error {
	switch {
	case !idRE().MatchString(d.ID):
		return fmt.Errorf("id %q: want lower-case letters, digits, '.', '_' or '-'", d.ID)
	case strings.TrimSpace(d.Summary) == "":
		return fmt.Errorf("%s: summary is empty", d.ID)
	case !importRE().MatchString(d.Package):
		return fmt.Errorf("%s: package %q is not a top-level import name", d.ID, d.Package)
	case !distRE().MatchString(d.Distribution):
		return fmt.Errorf("%s: distribution %q is not a distribution name", d.ID, d.Distribution)
	case len(d.Edits) == 0 && len(d.Variants) == 0:
		return fmt.Errorf("%s: no [[edit]] and no [[variant]]", d.ID)
	case len(d.Edits) > 0 && len(d.Variants) > 0:
		return fmt.Errorf("%s: both [[edit]] and [[variant]]; put every edit in a variant", d.ID)
	}
	if u := d.Status; u != nil && (strings.TrimSpace(u.Issue) == "" || strings.TrimSpace(u.PR) == "" || strings.TrimSpace(u.Drop) == "") {
		return fmt.Errorf("%s: [upstream] wants issue, pr and drop (\"none found\" where there is none)", d.ID)
	}
	var err error
	if d.constraint, err = parseVersions(d.Versions); err != nil {
		return fmt.Errorf("%s: %w", d.ID, err)
	}
	if err := validateGuards(d.ID, d.Guards); err != nil {
		return err
	}
	for i, r := range d.Requires {
		switch {
		case !idRE().MatchString(r):
			return fmt.Errorf("%s: requires %q: want the id of a patch definition", d.ID, r)
		case r == d.ID:
			return fmt.Errorf("%s: requires itself", d.ID)
		case slices.Contains(d.Requires[:i], r):
			return fmt.Errorf("%s: requires %s twice", d.ID, r)
		}
	}
	for _, s := range d.Supersedes {
		if path.Base(s) != s || !strings.HasSuffix(s, ".py") {
			return fmt.Errorf("%s: supersedes %q: want the file name of a patch script (*.py)", d.ID, s)
		}
	}
	if len(d.Variants) == 0 {
		return validateEdits(d.ID, d.Edits)
	}
	names := map[string]bool{}
	for i := range d.Variants {
		v := &d.Variants[i]
		where := fmt.Sprintf("%s: variant %d", d.ID, i+1)
		switch {
		case !idRE().MatchString(v.Name):
			return fmt.Errorf("%s: name %q: want lower-case letters, digits, '.', '_' or '-'", where, v.Name)
		case names[v.Name]:
			return fmt.Errorf("%s: name %q is used twice", where, v.Name)
		case len(v.Edits) == 0:
			return fmt.Errorf("%s (%s): no [[variant.edit]]", where, v.Name)
		}
		names[v.Name] = true
		if v.constraint, err = parseVersions(v.Versions); err != nil {
			return fmt.Errorf("%s (%s): %w", where, v.Name, err)
		}
		if err := validateGuards(d.ID+": variant "+v.Name, v.Guards); err != nil {
			return err
		}
		if err := validateEdits(d.ID+": variant "+v.Name, v.Edits); err != nil {
			return err
		}
	}
	return d.checkOverlap()
}

func parseVersions(s string) (goversion.Constraints, error) {
	if s == "" {
		return nil, nil
	}
	c, err := goversion.NewConstraint(s)
	if err != nil {
		return nil, fmt.Errorf("versions %q: %w", s, err)
	}
	return c, nil
}

// checkFile refuses a path that could name a file outside the package.
func checkFile(where, file string) error {
	switch {
	case file == "":
		return fmt.Errorf("%s: file is empty", where)
	case path.IsAbs(file) || filepath.IsAbs(file):
		return fmt.Errorf("%s (%s): file must be relative to the package directory", where, file)
	case path.Clean(file) != file || strings.Contains(file, `\`):
		return fmt.Errorf("%s (%s): file must be a clean relative path (no \"..\", \".\", \"//\" or trailing /)", where, file)
	case file == ".." || strings.HasPrefix(file, "../"):
		return fmt.Errorf("%s (%s): file must stay inside the package directory", where, file)
	}
	return nil
}

func validateGuards(owner string, guards []Guard) error {
	for i, g := range guards {
		if err := checkFile(fmt.Sprintf("%s: guard %d", owner, i+1), g.File); err != nil {
			return err
		}
		if slices.Contains(g.ContainsAny, "") {
			return fmt.Errorf("%s: guard %d (%s): contains_any holds an empty string", owner, i+1, g.File)
		}
	}
	return nil
}

func validateEdits(owner string, edits []Edit) error {
	for i := range edits {
		e := &edits[i]
		where := fmt.Sprintf("%s: edit %d (%s)", owner, i+1, e.File)
		if err := checkFile(fmt.Sprintf("%s: edit %d", owner, i+1), e.File); err != nil {
			return err
		}
		switch {
		case e.Anchor == "":
			return fmt.Errorf("%s: anchor is empty", where)
		case e.Replacement == "":
			return fmt.Errorf("%s: replacement is empty (to delete code, replace it with a comment)", where)
		case e.Anchor == e.Replacement:
			return fmt.Errorf("%s: replacement equals the anchor", where)
		case e.Count < 0:
			return fmt.Errorf("%s: count %d is negative", where, e.Count)
		case strings.Contains(e.Anchor, e.Replacement) && strings.Contains(e.Replacement, e.Anchor):
			return fmt.Errorf("%s: anchor and replacement contain each other", where)
		}
		if e.Count == 0 {
			e.Count = 1
		}
		// The marker may occur in our replacement (a file we patched must
		// read as fixed to scripts that look for the method we add); such
		// occurrences are not counted. In the anchor it could never tell
		// unpatched code from upstream's fix.
		if e.Upstream != "" && strings.Contains(e.Anchor, e.Upstream) {
			return fmt.Errorf("%s: the upstream marker occurs in the anchor, so it cannot tell upstream's fix from the code to patch", where)
		}
		switch {
		case (e.LegacyMarker == "") != (e.LegacyScript == ""):
			return fmt.Errorf("%s: legacy_marker and legacy_script go together", where)
		case e.LegacyUnique && e.LegacyMarker == "":
			return fmt.Errorf("%s: legacy_unique without a legacy_marker", where)
		case e.LegacyUnique && strings.Contains(e.Replacement, e.LegacyMarker):
			return fmt.Errorf("%s: the legacy marker occurs in the replacement, so it cannot tell the script's result from ours", where)
		case e.LegacyScript != "" && (path.Base(e.LegacyScript) != e.LegacyScript || !strings.HasSuffix(e.LegacyScript, ".py") && !strings.HasSuffix(e.LegacyScript, ".diff")):
			return fmt.Errorf("%s: legacy_script %q: want the file name of a patch script (*.py) or of a seed diff (*.diff)", where, e.LegacyScript)
		case e.LegacyFrom != "" && e.LegacyFrom != LegacyV022 && e.LegacyFrom != LegacySeed:
			return fmt.Errorf("%s: legacy_from %q: want %q (the v0.2.2 payload's scripts, the default) or %q (the seed's scripts and diffs)", where, e.LegacyFrom, LegacyV022, LegacySeed)
		case e.LegacyFrom != "" && e.LegacyScript == "":
			return fmt.Errorf("%s: legacy_from %q without a legacy_script", where, e.LegacyFrom)
		case strings.HasSuffix(e.LegacyScript, ".diff") && e.LegacyFrom != LegacySeed:
			return fmt.Errorf("%s: legacy_script %q is a diff, and the v0.2.2 payload ships scripts only: add legacy_from = %q", where, e.LegacyScript, LegacySeed)
		case e.LegacyMarker != "" && strings.Contains(e.Anchor, e.LegacyMarker):
			return fmt.Errorf("%s: the legacy marker occurs in the anchor, so it cannot tell the script's result from the code to patch", where)
		case e.SiteLines < 0:
			return fmt.Errorf("%s: site_lines %d is negative", where, e.SiteLines)
		}
		if head, tail := e.Context(); head == "" && tail == "" && (e.Upstream != "" || e.LegacyMarker != "") {
			key := "upstream"
			if e.Upstream == "" {
				key = "legacy_marker"
			}
			return fmt.Errorf("%s: %s is decided at the edit's site, and this edit has none: the anchor and the replacement share no whole line; add site = '<text of the def or class line the fix is in>' (markers are then looked for in that block only)", where, key)
		}
	}
	return nil
}

// Whose earlier patches an edit's legacy marker may come from.
const (
	LegacyV022 = "v0.2.2" // the scripts of the v0.2.2 payload (patches/<package>/*.py)
	LegacySeed = "seed"   // the scripts and diffs the seed repository bakes into its images
)

// LegacyBy names the earlier patch whose marker the edit recognises, as a
// state's reason says it: "the v0.2.2 script X", "the seed's script X" or
// "the seed's diff X"; "" without one.
func (e *Edit) LegacyBy() string {
	switch {
	case e.LegacyScript == "":
		return ""
	case e.LegacyFrom != LegacySeed:
		return "the v0.2.2 script " + e.LegacyScript
	case strings.HasSuffix(e.LegacyScript, ".diff"):
		return "the seed's diff " + e.LegacyScript
	default:
		return "the seed's script " + e.LegacyScript
	}
}

// EditSets are the variants to try, in order: a definition without
// variants is one unnamed variant of its top-level edits.
func (d *Definition) EditSets() []Variant {
	if len(d.Variants) > 0 {
		return d.Variants
	}
	return []Variant{{Edits: d.Edits}}
}

//go:embed builtin
var builtinFS embed.FS

// Builtin returns the project's own definitions, carried in the binary so
// that a payload without patches still gets them. They were decoded from
// builtin/*/*.toml at build time (go generate writes builtin_gen.go; a
// test checks that it matches the TOML), so no start parses TOML for them.
func Builtin() ([]*Definition, error) {
	defs := builtinDefs()
	for _, d := range defs {
		if err := d.prepare(); err != nil {
			return nil, fmt.Errorf("patch definition %s: %w", d.Source, err)
		}
	}
	return defs, nil
}

// builtinFromTOML parses the embedded TOML: the source of truth that
// builtin_gen.go is generated from and checked against.
func builtinFromTOML() ([]*Definition, string, error) {
	sub, err := fs.Sub(builtinFS, "builtin")
	if err != nil {
		return nil, "", err
	}
	files, err := fs.Glob(sub, definitionGlob)
	if err != nil {
		return nil, "", err
	}
	return loadFiles(files, "builtin:", func(f string) ([]byte, error) { return fs.ReadFile(sub, f) })
}

// prepare parses the version constraints of a definition that was not
// read by Parse (the generated built-ins).
func (d *Definition) prepare() error {
	var err error
	if d.constraint, err = parseVersions(d.Versions); err != nil {
		return err
	}
	for i := range d.Variants {
		if d.Variants[i].constraint, err = parseVersions(d.Variants[i].Versions); err != nil {
			return err
		}
	}
	return nil
}

// maxDefinitionBytes caps a payload definition file.
const maxDefinitionBytes = 1 << 20

// Load reads the built-in definitions and those in dir, laid out as a
// payload's patches/ (<import-name>/*.toml; a missing directory holds
// none). A start calls it on the payload's patches/, and a payload build
// on the definitions it is about to ship, so one that a start would refuse
// (exit 78 on every start) fails the build instead.
func Load(dir string) (*Set, error) {
	builtin, err := Builtin()
	if err != nil {
		return nil, fmt.Errorf("built-in patch definitions: %w", err)
	}
	own, ownDigest, err := loadDir(dir)
	if err != nil {
		return nil, err
	}
	set, err := Merge(builtin, own)
	if err != nil {
		return nil, err
	}
	set.Digest = digest.Bytes([]byte("builtin:" + builtinDigest + "\x00payload:" + ownDigest))
	return set, nil
}

// loadDir reads <dir>/<import-name>/*.toml and digests the files read.
func loadDir(dir string) ([]*Definition, string, error) {
	files, err := filepath.Glob(filepath.Join(dir, definitionGlob))
	if err != nil || len(files) == 0 {
		return nil, "", err
	}
	for i, f := range files {
		files[i], _ = filepath.Rel(dir, f)
	}
	return loadFiles(files, dir+"/", func(f string) ([]byte, error) {
		return boundedread.File(filepath.Join(dir, f), maxDefinitionBytes)
	})
}

// definitionGlob is where in a patches/ directory definitions are read
// from: one directory per import name, one TOML file per patch.
const definitionGlob = "*/*.toml"

// Stray lists the .toml files under dir (a payload's patches/) that no
// start reads, because they are not at <import-name>/<file>.toml: a
// definition there would silently not be in force.
func Stray(dir string) ([]string, error) {
	var stray []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if err == nil && e.IsDir() && IsTreesDir(rel) {
			return filepath.SkipDir // pristine trees beside a definition (pristine.go)
		}
		if err != nil || e.IsDir() || !strings.HasSuffix(e.Name(), ".toml") {
			return err
		}
		if ok, _ := filepath.Match(definitionGlob, rel); !ok {
			stray = append(stray, rel)
		}
		return nil
	})
	return stray, err
}

// Unguarded names the variants of d that no guard covers ("" stands for a
// definition without variants): on an engine release without the code the
// fix is about, a missing anchor then reads as drift instead of
// not-applicable.
func (d *Definition) Unguarded() []string {
	var out []string
	for _, v := range d.EditSets() {
		if len(d.Guards) == 0 && len(v.Guards) == 0 {
			out = append(out, v.Name)
		}
	}
	return out
}

// loadFiles parses each named definition file (slash-separated,
// <import-name>/<file>.toml) and digests their names and contents.
func loadFiles(files []string, prefix string, read func(string) ([]byte, error)) ([]*Definition, string, error) {
	sort.Strings(files)
	var defs []*Definition
	h := sha256.New()
	for _, f := range files {
		f = filepath.ToSlash(f)
		data, err := read(f)
		if err != nil {
			return nil, "", fmt.Errorf("patch definition %s%s: %w", prefix, f, err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(data))
		h.Write(data)
		d, err := Parse(data, prefix+f)
		if err != nil {
			return nil, "", err
		}
		if dir := path.Dir(f); dir != d.Package {
			return nil, "", fmt.Errorf("patch definition %s%s: package %q lives under %s/, not %s/", prefix, f, d.Package, d.Package, dir)
		}
		defs = append(defs, d)
	}
	if len(files) == 0 {
		return nil, "", nil
	}
	return defs, hex.EncodeToString(h.Sum(nil)), nil
}
