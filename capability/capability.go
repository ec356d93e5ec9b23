// Package capability decides what a native tree provides and whether that
// covers what the deployment requires.
package capability

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/closest"
)

// Known names the capabilities infera-exec knows the meaning of. A payload
// may declare others; they are kept and reported, with a note.
var Known = map[string]string{
	"mooncake": "Mooncake transfer engine (prefill/decode KV transfer)",
	"hipfile":  "hipFile GPU-direct storage for the kvd L3 cache (vLLM only)",
}

// knownList is Known's names in a stable order, for messages.
func knownList() string {
	names := make([]string, 0, len(Known))
	for n := range Known {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func knownNames() []string {
	names := make([]string, 0, len(Known))
	for n := range Known {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// didYouMean is "; did you mean NAME?" for a word close to a known
// capability, else "".
func didYouMean(w string) string {
	if c := closest.Name(w, knownNames()); c != "" {
		return "; did you mean " + c + "?"
	}
	return ""
}

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`) })

// Set is a sorted list of distinct capability names.
type Set []string

// Has reports whether name is in s.
func (s Set) Has(name string) bool {
	i := sort.SearchStrings(s, name)
	return i < len(s) && s[i] == name
}

func (s Set) String() string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

func newSet(names []string) Set {
	sort.Strings(names)
	out := Set{}
	for i, n := range names {
		if i == 0 || n != names[i-1] {
			out = append(out, n)
		}
	}
	return out
}

// Parse reads the content of a CAPABILITIES file. The format is one line of
// space-separated names; tabs, several lines and CRLF endings are accepted
// because editors and heredocs produce them, but each deviation gets a note
// so the payload can be fixed. Words that are not capability names are
// dropped with a note; unknown but well-formed names are kept with a note.
func Parse(content string) (Set, []string) {
	var notes []string
	if strings.Contains(content, "\r") {
		notes = append(notes, "has CRLF line endings")
	}
	if strings.ContainsFunc(content, func(r rune) bool { return unicode.IsSpace(r) && r != ' ' && r != '\n' && r != '\r' }) {
		notes = append(notes, "separates names with tabs or other whitespace (expected spaces)")
	}
	lines := 0
	for _, l := range strings.Split(strings.ReplaceAll(content, "\r", ""), "\n") {
		if strings.TrimSpace(l) != "" {
			lines++
		}
	}
	if lines > 1 {
		notes = append(notes, fmt.Sprintf("spans %d lines (expected one line)", lines))
	}
	var names []string
	for _, w := range strings.Fields(content) {
		switch {
		case !nameRE().MatchString(w):
			notes = append(notes, fmt.Sprintf("ignored %q: not a capability name (lower-case letters, digits, '_', '.', '-')", w))
		case Known[w] == "":
			notes = append(notes, fmt.Sprintf("unknown capability %q kept (known: %s)", w, knownList()))
			names = append(names, w)
		default:
			names = append(names, w)
		}
	}
	return newSet(names), notes
}

// ReadFile reads and parses a CAPABILITIES file. A missing file is not an
// error: the tree then declares no capabilities.
func ReadFile(path string) (set Set, notes []string, exists bool, err error) {
	data, err := boundedread.File(path, boundedread.SmallText)
	if errors.Is(err, fs.ErrNotExist) {
		return Set{}, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("read capabilities: %w", boundedread.Reason(err))
	}
	set, notes = Parse(string(data))
	if len(set) == 0 && len(notes) == 0 {
		notes = append(notes, "is empty: the tree declares no capabilities")
	}
	return set, notes, true, nil
}

// Requirement is what the deployment asks of the native tree
// (INFERA_REQUIRE_NATIVE).
type Requirement struct {
	Raw   string   `json:"raw"`
	All   bool     `json:"all,omitempty"`   // 1/true/all: the tree must exist; everything it declares is required
	Auto  bool     `json:"auto,omitempty"`  // auto: what the worker's arguments imply is required
	Names []string `json:"names,omitempty"` // explicit list
	// Sources says where each implied name came from.
	Sources map[string]string `json:"sources,omitempty"`
}

// None reports whether nothing is required.
func (r Requirement) None() bool { return !r.All && len(r.Names) == 0 }

// With adds the implied capabilities to an "auto" requirement; other
// requirements are returned as they are.
func (r Requirement) With(implied []Implication) Requirement {
	if !r.Auto {
		return r
	}
	names := append([]string(nil), r.Names...)
	r.Sources = map[string]string{}
	for _, i := range implied {
		if i.Optional {
			continue
		}
		names = append(names, i.Capability)
		r.Sources[i.Capability] = i.Source
	}
	r.Names = newSet(names)
	return r
}

func (r Requirement) String() string {
	switch {
	case r.All:
		return "the native tree and all it declares"
	case len(r.Names) == 0:
		return "nothing"
	}
	return strings.Join(r.Names, " ")
}

// ParseRequirement parses INFERA_REQUIRE_NATIVE: "1", "true" or "all" require
// the native tree with everything it declares; "0", "false", "none" or empty
// require nothing; otherwise a comma- or space-separated list of names, in
// which "auto" stands for what the worker's arguments imply.
func ParseRequirement(raw string) (Requirement, error) {
	r := Requirement{Raw: raw}
	v := strings.ToLower(strings.TrimSpace(raw))
	switch v {
	case "1", "true", "all":
		r.All = true
		return r, nil
	case "", "0", "false", "none":
		return r, nil
	}
	var names []string
	for _, w := range strings.FieldsFunc(v, func(c rune) bool { return c == ',' || c == ' ' || c == '\t' }) {
		if w == "auto" {
			r.Auto = true
			continue
		}
		if !nameRE().MatchString(w) {
			return Requirement{}, fmt.Errorf("INFERA_REQUIRE_NATIVE=%q: %q is not a capability name%s; use on/all, off/none, auto, or a comma-separated list such as \"mooncake,hipfile\"", raw, w, didYouMean(w))
		}
		names = append(names, w)
	}
	r.Names = newSet(names)
	return r, nil
}

// Tree is a native tree as far as capabilities are concerned.
type Tree struct {
	Name string `json:"name"`
	Dir  string `json:"dir"`
	Caps Set    `json:"capabilities"`
}

// Unavailable is the refusal when a requirement is not met.
type Unavailable struct {
	Requirement Requirement
	Missing     []string
	Tree        *Tree  // nil: no native tree for this container
	NoTreeWhy   string // why there is no tree, when Tree is nil
	Available   []Tree
	SGLang      bool // the worker is SGLang, whose trees never carry hipfile
	// Declared by the tree but withdrawn because its evidence does not
	// load against the image: capability -> the file and what it misses.
	Withdrawn map[string]string
}

func (e *Unavailable) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "INFERA_REQUIRE_NATIVE=%s: ", e.Requirement.Raw)
	if e.Tree == nil {
		fmt.Fprintf(&b, "a native tree is required but %s", e.NoTreeWhy)
		if len(e.Missing) > 0 {
			fmt.Fprintf(&b, "; required: %s", strings.Join(e.Missing, " "))
		}
	} else {
		word := "capability"
		if len(e.Missing) > 1 {
			word = "capabilities"
		}
		fmt.Fprintf(&b, "%s %s not provided by native tree %s (it provides: %s)",
			word, strings.Join(e.Missing, " "), e.Tree.Dir, e.Tree.Caps)
	}
	b.WriteString("; trees available: ")
	if len(e.Available) == 0 {
		b.WriteString("none")
	}
	for i, t := range e.Available {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s [%s]", t.Name, t.Caps)
	}
	for _, m := range e.Missing {
		if src, ok := e.Requirement.Sources[m]; ok {
			fmt.Fprintf(&b, "; %s is required by INFERA_REQUIRE_NATIVE=auto because the worker was started with %s", m, src)
		}
		if why, ok := e.Withdrawn[m]; ok {
			fmt.Fprintf(&b, "; the tree declares %s but it was withdrawn: %s", m, why)
		}
		if m == "hipfile" && e.SGLang {
			b.WriteString("; note: this worker is SGLang, and hipfile is vLLM-only by design (SGLang trees never carry it): do not require it for SGLang workers")
		}
		if _, ok := Known[m]; !ok {
			fmt.Fprintf(&b, "; note: %q is not a capability infera-exec knows (known: %s)", m, knownList())
		}
	}
	return b.String()
}

// Check verifies req against the selected tree (nil when there is none;
// noTreeWhy then says why). It returns the capabilities that are required,
// or an *Unavailable error.
func Check(req Requirement, tree *Tree, noTreeWhy string, available []Tree) (Set, error) {
	if req.None() {
		return Set{}, nil
	}
	if err := unknownNames(req, tree, available); err != nil {
		return nil, err
	}
	if tree == nil {
		return nil, &Unavailable{Requirement: req, Missing: req.Names, NoTreeWhy: noTreeWhy, Available: available}
	}
	if req.All {
		return tree.Caps, nil
	}
	var missing []string
	for _, n := range req.Names {
		if !tree.Caps.Has(n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, &Unavailable{Requirement: req, Missing: missing, Tree: tree, Available: available}
	}
	return Set(req.Names), nil
}

// UnknownNameError is a required name that neither infera-exec knows nor
// any tree of the payload declares: a typo, not a missing capability, so
// a configuration error (78) rather than 69.
type UnknownNameError struct {
	Raw  string
	Name string
}

func (e *UnknownNameError) Error() string {
	return fmt.Sprintf("INFERA_REQUIRE_NATIVE=%s: %q is not a capability name: infera-exec knows %s and no tree of the payload declares it%s",
		e.Raw, e.Name, knownList(), didYouMean(e.Name))
}

// unknownNames refuses an explicitly required name that is no known
// capability and that no tree declares. Payloads may declare names of
// their own, which stay requirable.
func unknownNames(req Requirement, tree *Tree, available []Tree) error {
	for _, n := range req.Names {
		if _, ok := Known[n]; ok {
			continue
		}
		if _, implied := req.Sources[n]; implied {
			continue
		}
		declared := tree != nil && tree.Caps.Has(n)
		for _, t := range available {
			declared = declared || t.Caps.Has(n)
		}
		if !declared {
			return &UnknownNameError{Raw: req.Raw, Name: n}
		}
	}
	return nil
}
