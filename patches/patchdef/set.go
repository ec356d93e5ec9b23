package patchdef

// The set of definitions in force: the built-ins merged with a payload's,
// ordered so that a fix comes after the fixes it requires.

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	goversion "github.com/hashicorp/go-version"
)

// Supersede reports the id of the definition in s that supersedes the
// v0.2.2 script file (a path under patches/<package>/), or "".
func (s *Set) Supersede(script, pkg string) string {
	base := filepath.Base(script)
	for _, d := range s.Defs {
		if d.Package == pkg && slices.Contains(d.Supersedes, base) {
			return d.ID
		}
	}
	return ""
}

// Set is the definitions in force, in the order they apply.
type Set struct {
	Defs  []*Definition
	Notes []string // e.g. a payload definition replacing a built-in one
	// Digest identifies the definitions' source text (built-in and
	// payload): anything recorded about a set holds only for its digest.
	Digest string
}

// Merge combines the built-in definitions with a payload's. A payload
// definition with a built-in's id replaces it (a newer payload may carry a
// corrected anchor); two definitions with one id from the same source are
// an error.
func Merge(builtin, payload []*Definition) (*Set, error) {
	s := &Set{}
	seen := map[string]*Definition{}
	for _, group := range [][]*Definition{builtin, payload} {
		local := map[string]*Definition{}
		for _, d := range group {
			if prev, ok := local[d.ID]; ok {
				return nil, fmt.Errorf("patch id %q is defined twice: %s and %s", d.ID, prev.Source, d.Source)
			}
			local[d.ID] = d
			if prev, ok := seen[d.ID]; ok {
				s.Notes = append(s.Notes, fmt.Sprintf("%s replaces the built-in definition of %s", d.Source, d.ID))
				for i, x := range s.Defs {
					if x == prev {
						s.Defs[i] = d
					}
				}
			} else {
				s.Defs = append(s.Defs, d)
			}
			seen[d.ID] = d
		}
	}
	if err := s.orderRequirements(); err != nil {
		return nil, err
	}
	return s, nil
}

// orderRequirements checks every requires of the set (the id exists and
// patches the same package; no cycle) and moves each definition after the
// ones it requires, keeping the order otherwise.
func (s *Set) orderRequirements() error {
	byID := map[string]*Definition{}
	for _, d := range s.Defs {
		byID[d.ID] = d
	}
	for _, d := range s.Defs {
		for _, r := range d.Requires {
			switch req := byID[r]; {
			case req == nil:
				return fmt.Errorf("patch definition %s: %s requires %s, which no patch definition has", d.Source, d.ID, r)
			case req.Package != d.Package:
				return fmt.Errorf("patch definition %s: %s (package %s) requires %s, which patches %s: a requirement must patch the same package", d.Source, d.ID, d.Package, r, req.Package)
			}
		}
	}
	const (
		visiting = 1
		done     = 2
	)
	mark := map[string]int{}
	ordered := make([]*Definition, 0, len(s.Defs))
	var visit func(d *Definition, path []string) error
	visit = func(d *Definition, path []string) error {
		switch mark[d.ID] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("patch definition %s: requirements form a cycle: %s", d.Source, strings.Join(append(path, d.ID), " requires "))
		}
		mark[d.ID] = visiting
		for _, r := range d.Requires {
			if err := visit(byID[r], append(path, d.ID)); err != nil {
				return err
			}
		}
		mark[d.ID] = done
		ordered = append(ordered, d)
		return nil
	}
	for _, d := range s.Defs {
		if err := visit(d, nil); err != nil {
			return err
		}
	}
	s.Defs = ordered
	return nil
}

// Packages lists the import names the set patches, sorted.
func (s *Set) Packages() []string {
	m := map[string]bool{}
	for _, d := range s.Defs {
		m[d.Package] = true
	}
	out := make([]string, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Distributions names the distribution whose version decides each import name's
// definitions: the first definition's for that package, else the name.
func (s *Set) Distributions(names []string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		out[n] = n
	}
	for i := len(s.Defs) - 1; i >= 0; i-- {
		if d := s.Defs[i]; d.Distribution != "" {
			out[d.Package] = d.Distribution
		}
	}
	return out
}

// Gated reports whether a definition for package pkg is limited to a
// version range.
func (s *Set) Gated(pkg string) bool {
	for _, d := range s.Defs {
		if d.Package == pkg && d.Gated() {
			return true
		}
	}
	return false
}

// Lookup returns the definition with id, or nil.
func (s *Set) Lookup(id string) *Definition {
	for _, d := range s.Defs {
		if d.ID == id {
			return d
		}
	}
	return nil
}

// InScope reports whether version satisfies the definition's constraint.
// Engine versions are PEP 440 (0.11.1rc2.dev161+g6a6bd8ad3.rocm700); the
// constraint is checked against the release segments (0.11.1), since a
// ROCm build of a release is that release. An unknown version is never in
// scope (Scope says whether it is out of it or cannot be told).
func (d *Definition) InScope(version string) (bool, string) {
	st, why := d.Scope(version, "")
	return st == "", why
}

// Scope decides the definition's version range for version: "" within
// it, NotApplicable outside it, Drift when it cannot be told (the version
// is unknown, versionWhy saying why, or not a release number). A range
// that cannot be checked says nothing about the code, so a version-gated
// patch on an unknown version is never applied, and never passes for
// "not applicable" either.
func (d *Definition) Scope(version, versionWhy string) (State, string) {
	return scope(d.constraint, d.Versions, d.Distribution, version, versionWhy)
}

// Scope is Definition.Scope for the variant's own range, dist being the
// definition's distribution.
func (v *Variant) Scope(dist, version, versionWhy string) (State, string) {
	return scope(v.constraint, v.Versions, dist, version, versionWhy)
}

// Gated reports whether the definition, or one of its variants, is
// limited to a version range.
func (d *Definition) Gated() bool {
	if d.Versions != "" {
		return true
	}
	for _, v := range d.Variants {
		if v.Versions != "" {
			return true
		}
	}
	return false
}

func scope(c goversion.Constraints, text, dist, version, versionWhy string) (State, string) {
	if c == nil {
		return "", ""
	}
	if version == "" {
		if versionWhy == "" {
			versionWhy = "no " + dist + " dist-info found"
		}
		return Drift, fmt.Sprintf("the version of %s is unknown (%s), so the range %s cannot be checked; not applied", dist, versionWhy, text)
	}
	rel := releaseRE().FindString(version)
	v, err := goversion.NewVersion(rel)
	if rel == "" || err != nil {
		return Drift, fmt.Sprintf("version %q of %s is not a release number, so the range %s cannot be checked; not applied", version, dist, text)
	}
	if !c.Check(v) {
		return NotApplicable, fmt.Sprintf("%s %s is outside %s", dist, version, text)
	}
	return "", ""
}

//go:generate go test -run ^TestBuiltinGenerated$ -update-builtin .
