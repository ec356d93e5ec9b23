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
// that decided it and where in the file it looked.
type Evaluation struct {
	State       State  `json:"state"`
	Anchors     int    `json:"anchors"`      // anchor occurrences outside replacements
	Replacement int    `json:"replacements"` // replacement occurrences
	Why         string `json:"why,omitempty"`
	// At is where the edit looked and what it found there: the anchor's
	// and the replacement's occurrences, the markers found at a site, and,
	// when none of them decided it, the sites it looked at.
	At []LineRange `json:"at,omitempty"`
}

// Evaluate decides the state of e in content at e's sites (see site.go):
// the anchor there is pending, our replacement there applied, the v0.2.2
// script's marker there applied (by the script), upstream's marker there
// upstream. A marker's text elsewhere in the file decides nothing. find
// lists a needle's occurrences in content (nil: the strings package; a
// run passes its index). Anchor and replacement may contain one another
// (an insertion keeps its anchor inside the replacement); occurrences
// inside the other string are not counted twice. An anchor and a
// replacement both in the file, at different sites, are partial: the
// fix stands in one place and not in the other.
func Evaluate(e *Edit, content string, find Finder) Evaluation {
	if find == nil {
		find = Find(content)
	}
	anchors, repls := find(e.Anchor), find(e.Replacement)
	ownA := outside(anchors, len(e.Anchor), repls, len(e.Replacement))
	ownR := outside(repls, len(e.Replacement), anchors, len(e.Anchor))
	ev := Evaluation{Anchors: len(ownA), Replacement: len(ownR)}
	for _, p := range ownA {
		ev.At = append(ev.At, rangeOf(content, p, len(e.Anchor), "anchor"))
	}
	for _, p := range ownR {
		ev.At = append(ev.At, rangeOf(content, p, len(e.Replacement), "replacement"))
	}
	var sites []span
	if e.Upstream != "" || e.LegacyMarker != "" {
		sites = e.sites(content, find)
	}
	// A marker counts where it stands at a site, outside our own
	// replacement (a marker we write ourselves is ours, not theirs).
	at := func(marker, found string) int {
		if marker == "" {
			return 0
		}
		n := 0
		for _, p := range outside(find(marker), len(marker), repls, len(e.Replacement)) {
			for _, s := range sites {
				if s.holds(p, len(marker)) {
					ev.At = append(ev.At, rangeOf(content, p, len(marker), found))
					n++
					break
				}
			}
		}
		return n
	}
	script := "by " + e.LegacyBy() + " (its marker at the edit's site)"
	r := len(ownR)
	if e.LegacyUnique && r == 0 && at(e.LegacyMarker, "legacy") > 0 {
		ev.State, ev.Why = Applied, script
		return ev
	}
	if at(e.Upstream, "upstream") > 0 {
		ev.State, ev.Why = Upstream, "upstream marker present at the edit's site"
		return ev
	}
	if !e.LegacyUnique && r == 0 && at(e.LegacyMarker, "legacy") > 0 {
		// What an earlier script or diff left in place of the anchor (an
		// image that ran it at build time) is the fix, in its words.
		ev.State, ev.Why = Applied, script
		return ev
	}
	a := len(ownA)
	switch {
	case a == e.Count && r == 0:
		ev.State = Pending
	case r == e.Count && a == 0:
		ev.State = Applied
	case a > 0 && r > 0:
		ev.State = Partial
		ev.Why = fmt.Sprintf("the anchor is still at %s while the replacement is at %s: the fix stands at one site and not at the other", linesOf(ev.At, "anchor"), linesOf(ev.At, "replacement"))
	default:
		ev.State = Drift
		ev.Why = fmt.Sprintf("anchor found %d times and replacement %d times; expected the anchor %d times (pending) or the replacement %d times (applied)", a, r, e.Count, e.Count)
		for _, s := range sites {
			ev.At = append(ev.At, rangeOf(content, s.from, s.to-s.from, "site"))
		}
	}
	return ev
}

// outside lists the occurrences in at (each n long) that do not lie
// inside one of the occurrences in other (each m long).
func outside(at []int, n int, other []int, m int) []int {
	if len(other) == 0 || m <= n {
		return at
	}
	var out []int
	for _, p := range at {
		in := false
		for _, q := range other {
			if p >= q && p+n <= q+m {
				in = true
				break
			}
		}
		if !in {
			out = append(out, p)
		}
	}
	return out
}

// linesOf names the line ranges of what was found, for messages.
func linesOf(at []LineRange, found string) string {
	var s []string
	for _, r := range at {
		if r.Found == found {
			if r.From == r.To {
				s = append(s, fmt.Sprintf("line %d", r.From))
			} else {
				s = append(s, fmt.Sprintf("lines %d-%d", r.From, r.To))
			}
		}
	}
	return strings.Join(s, ", ")
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
	case count[Partial] > 0, count[Drift] > 0 && count[Applied] > 0:
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
