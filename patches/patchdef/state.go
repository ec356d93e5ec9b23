package patchdef

import (
	"fmt"
	"strings"
)

// State of an edit or a patch.
type State string

const (
	Pending       State = "pending"        // anchor found as expected: the fix can be applied
	Applied       State = "applied"        // replacement present, anchor gone
	Upstream      State = "upstream"       // the upstream marker is present: upstream fixed it
	NotApplicable State = "not-applicable" // version outside the range, a guard does not hold (the code the fix is about is absent), package or optional file absent
	Drift         State = "drift"          // the code the fix is about is there but no variant's anchors match: never written
	// Shadowed: the source is patched, but cached bytecode that could not
	// be removed would run instead of it (an unchecked-hash .pyc, which
	// Python never revalidates, or a timestamp .pyc that matches the new
	// source's mtime and size). Not in force.
	Shadowed State = "shadowed"
	// Partial: the fix is in some of the places that need it and the
	// code it is about is also somewhere no variant's anchors match: a
	// behaviour implemented twice in a release (vLLM's V1 and V2 model
	// runners) with only one of them patched, or a file of a patch that
	// changed after the patch was applied. Not in force, never applied.
	Partial State = "partial"
	// Skipped: named in INFERA_SKIP_PATCHES; the operator turned it off,
	// so it is neither applied nor checked.
	Skipped State = "skipped"
)

// Evaluation is the state of one edit in one file content, with the counts
// that decided it.
type Evaluation struct {
	State       State  `json:"state"`
	Anchors     int    `json:"anchors"`      // anchor occurrences outside replacements
	Replacement int    `json:"replacements"` // replacement occurrences
	Why         string `json:"why,omitempty"`
}

// Evaluate decides the state of e in a file content, given as count: the
// number of non-overlapping occurrences of a string in it (strings.Count,
// or an index that answers the same). Anchor and replacement may contain
// one another (an insertion keeps its anchor inside the replacement);
// occurrences inside the other string are not counted twice.
func Evaluate(e *Edit, count func(string) int) Evaluation {
	if e.LegacyUnique && count(e.Replacement) == 0 && count(e.LegacyMarker) > 0 {
		return Evaluation{State: Applied, Anchors: count(e.Anchor), Why: "by the v0.2.2 script " + e.LegacyScript}
	}
	if e.Upstream != "" {
		// Occurrences inside our own replacement are ours, not upstream's.
		m := count(e.Upstream)
		if k := strings.Count(e.Replacement, e.Upstream); k > 0 {
			m -= count(e.Replacement) * k
		}
		if m > 0 {
			return Evaluation{State: Upstream, Why: "upstream marker present"}
		}
	}
	a := count(e.Anchor)
	r := count(e.Replacement)
	if k := strings.Count(e.Replacement, e.Anchor); k > 0 {
		a -= r * k // anchors that are part of a replacement
	}
	if j := strings.Count(e.Anchor, e.Replacement); j > 0 {
		r -= a * j // replacements that are part of an anchor
	}
	ev := Evaluation{Anchors: a, Replacement: r}
	if r == 0 && e.LegacyMarker != "" {
		// What a v0.2.2 script left in place of the anchor (an image that
		// ran it at build time) is the fix, in its words.
		m := count(e.LegacyMarker)
		if k := strings.Count(e.Replacement, e.LegacyMarker); k > 0 {
			m -= count(e.Replacement) * k
		}
		if m > 0 {
			ev.State, ev.Why = Applied, "by the v0.2.2 script "+e.LegacyScript
			return ev
		}
	}
	switch {
	case a == e.Count && r == 0:
		ev.State = Pending
	case r == e.Count && a == 0:
		ev.State = Applied
	default:
		ev.State = Drift
		ev.Why = fmt.Sprintf("anchor found %d times and replacement %d times; expected the anchor %d times (pending) or the replacement %d times (applied)", a, r, e.Count, e.Count)
	}
	return ev
}

// Combine decides a patch's state from its edits' states: drift beside
// an applied edit is partial (the fix is in force in some places and
// cannot be made so in the others); any other drift is drift; upstream only when every edit that applies is upstream (a partial
// upstream fix mixed with ours would be neither); pending when at least one
// edit is still pending and the rest are applied (a start that died
// half-way is finished by the next); applied when all are applied.
func Combine(states []State) State {
	count := map[State]int{}
	for _, s := range states {
		count[s]++
	}
	live := len(states) - count[NotApplicable]
	switch {
	case count[Drift] > 0 && count[Applied] > 0:
		return Partial
	case count[Drift] > 0:
		return Drift
	case live == 0:
		return NotApplicable
	case count[Upstream] == live:
		return Upstream
	case count[Upstream] > 0:
		return Drift
	case count[Pending] > 0:
		return Pending
	}
	return Applied
}
