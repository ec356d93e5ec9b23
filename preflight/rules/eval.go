package rules

import (
	"fmt"
	"slices"
	"strings"
)

// Value is what a fact is in this run.
type Value struct {
	Values []string // none: the fact is absent (an option not given, a variable not set)
	// Unknown: the fact could not be read (config.json of a hub id, a
	// config.json that is not JSON, remote code); Why says why, and a
	// rule that needs it is skipped with that note.
	Unknown bool
	Why     string
	Read    string // what was looked at, for the report: "config.json model_type=kimi_k3"
}

// Outcome of evaluating a rule.
type Outcome int

const (
	Holds      Outcome = iota // every condition holds: the rule fires
	DoesNot                   // a condition does not hold
	NotFor                    // another engine, or a version outside the range
	CannotTell                // a fact it needs could not be read
)

// Verdict is a rule's outcome with what it read.
type Verdict struct {
	Outcome Outcome
	Read    []string // what each fact looked at, in order
	Note    string   // why it does not apply, or could not tell
}

// Eval evaluates r: engine and version are the worker's engine and its
// installed version ("" when unknown); fact answers each fact, once per
// run whatever the number of rules asking.
func (r *Rule) Eval(engine, version string, fact func(string) Value) Verdict {
	var v Verdict
	if len(r.Engines) > 0 && !slices.Contains(r.Engines, engine) {
		if engine == "" {
			engine = "none recognised"
		}
		v.Outcome, v.Note = NotFor, fmt.Sprintf("for %s; the command's engine: %s", strings.Join(r.Engines, ", "), engine)
		return v
	}
	if r.Versions != "" {
		in, ok := r.InVersions(version)
		switch {
		case !ok && version == "":
			v.Outcome, v.Note = CannotTell, fmt.Sprintf("for %s %s, and the installed version is unknown", engine, r.Versions)
			return v
		case !ok:
			v.Outcome, v.Note = CannotTell, fmt.Sprintf("for %s %s, and %q is not a release number", engine, r.Versions, version)
			return v
		case !in:
			v.Outcome, v.Note = NotFor, fmt.Sprintf("for %s %s; installed: %s", engine, r.Versions, version)
			return v
		}
		v.Read = append(v.Read, fmt.Sprintf("%s %s (in %s)", engine, version, r.Versions))
	}
	for _, c := range r.When {
		val := fact(c.Fact)
		if val.Read != "" {
			v.Read = append(v.Read, val.Read)
		}
		if val.Unknown {
			v.Outcome, v.Note = CannotTell, val.Why
			return v
		}
		if !c.holds(val.Values) {
			v.Outcome = DoesNot
			return v
		}
	}
	v.Outcome = Holds
	return v
}

func (c Cond) holds(vals []string) bool {
	any := func(set []string) bool {
		for _, x := range vals {
			if slices.Contains(set, x) {
				return true
			}
		}
		return false
	}
	switch {
	case c.Present:
		return len(vals) > 0
	case c.Absent:
		return len(vals) == 0
	case len(c.In) > 0:
		return any(c.In)
	}
	return !any(c.NotIn)
}
