// Package capability decides what a native tree provides and whether that
// covers what the deployment requires.
package capability

import (
	"fmt"
	"sort"
	"strings"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/closest"
)

// knownList is the names of the capabilities infera-exec knows, in a
// stable order, for messages.
func knownList() string { return strings.Join(config.KnownCapabilities(), ", ") }

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

// withImplied adds the implied capabilities to an "auto" requirement;
// other requirements are returned as they are.
func withImplied(r config.Requirement, implied []Implication) config.Requirement {
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

// Tree is a native tree as far as capabilities are concerned.
type Tree struct {
	Name string `json:"name"`
	Dir  string `json:"dir"`
	Caps Set    `json:"capabilities"`
}

// Unavailable is the refusal when a requirement is not met.
type Unavailable struct {
	Requirement config.Requirement
	Missing     []string
	Tree        *Tree  // nil: no native tree for this container
	NoTreeWhy   string // why there is no tree, when Tree is nil
	Available   []Tree
	SGLang      bool // the worker is SGLang, whose trees never carry hipfile
	// Declared by the tree but withdrawn because its evidence does not
	// load against the image: capability -> the file and what it misses.
	Withdrawn map[string]string
}

// ExitCode is EX_UNAVAILABLE.
func (e *Unavailable) ExitCode() int { return 69 }

// Brief is the refusal's text line (logging.Briefer): what is missing,
// the trees available, and why in a few words; Error has the whole why.
func (e *Unavailable) Brief() string {
	var b strings.Builder
	e.head(&b, true)
	for _, m := range e.Missing {
		if _, ok := e.Requirement.Sources[m]; ok {
			fmt.Fprintf(&b, "; %s: implied by the worker's arguments", m)
		}
		if _, ok := e.Withdrawn[m]; ok {
			fmt.Fprintf(&b, "; %s: declared, but its files do not load here", m)
		}
		if m == "hipfile" && e.SGLang {
			b.WriteString("; hipfile is vLLM-only")
		}
	}
	return b.String()
}

func (e *Unavailable) Error() string {
	var b strings.Builder
	e.head(&b, false)
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
		if _, ok := config.Capabilities[m]; !ok {
			fmt.Fprintf(&b, "; note: %q is not a capability infera-exec knows (known: %s)", m, knownList())
		}
	}
	return b.String()
}

// head is what is missing, and the trees available; brief: the tree by
// its name, not its directory.
func (e *Unavailable) head(b *strings.Builder, brief bool) {
	fmt.Fprintf(b, "INFERA_REQUIRE_NATIVE=%s: ", e.Requirement.Raw)
	if e.Tree == nil {
		why := e.NoTreeWhy
		if i := strings.Index(why, " ("); brief && i > 0 {
			why = why[:i] // what it looked in: the whole why
		}
		fmt.Fprintf(b, "a native tree is required but %s", why)
		if len(e.Missing) > 0 && !brief {
			fmt.Fprintf(b, "; required: %s", strings.Join(e.Missing, " "))
		}
	} else {
		word := "capability"
		if len(e.Missing) > 1 {
			word = "capabilities"
		}
		if brief { // what the tree has is in the list of trees available
			fmt.Fprintf(b, "native tree %s lacks %s", e.Tree.Name, strings.Join(e.Missing, " "))
		} else {
			fmt.Fprintf(b, "%s %s not provided by native tree %s (it provides: %s)",
				word, strings.Join(e.Missing, " "), e.Tree.Dir, e.Tree.Caps)
		}
	}
	b.WriteString("; trees available: ")
	if len(e.Available) == 0 {
		b.WriteString("none")
	}
	for i, t := range e.Available {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, "%s [%s]", t.Name, t.Caps)
	}
}

// Check verifies req against the selected tree (nil when there is none;
// noTreeWhy then says why). It returns the capabilities that are required,
// or an *Unavailable error.
func Check(req config.Requirement, tree *Tree, noTreeWhy string, available []Tree) (Set, error) {
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
	Raw      string
	Name     string
	Declared []string // the names the payload's trees declare, for the suggestion
}

// ExitCode is EX_CONFIG: the requirement names nothing anyone provides.
func (e *UnknownNameError) ExitCode() int { return 78 }

func (e *UnknownNameError) Error() string {
	hint := config.SuggestCapability(e.Name)
	if c := closest.Name(e.Name, e.Declared); hint == "" && c != "" {
		hint = "; did you mean " + c + " (declared by the payload)?"
	}
	return fmt.Sprintf("INFERA_REQUIRE_NATIVE=%s: %q is not a capability name: infera-exec knows %s and no tree of the payload declares it%s",
		e.Raw, e.Name, knownList(), hint)
}

// unknownNames refuses an explicitly required name that is no known
// capability and that no tree declares. Payloads may declare names of
// their own, which stay requirable.
func unknownNames(req config.Requirement, tree *Tree, available []Tree) error {
	for _, n := range req.Names {
		if _, ok := config.Capabilities[n]; ok {
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
			var all []string
			for _, t := range available {
				all = append(all, t.Caps...)
			}
			return &UnknownNameError{Raw: req.Raw, Name: n, Declared: newSet(all)}
		}
	}
	return nil
}
