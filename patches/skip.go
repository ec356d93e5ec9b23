package patches

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/infera/infera-exec/internal/closest"
	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/patches/patchdef"
)

// selection is what INFERA_REQUIRE_PATCHES and INFERA_SKIP_PATCHES make
// of a definition set: the ids required, and the set without the skipped
// definitions (with results saying so).
type selection struct {
	set     *patchdef.Set
	require map[string]bool
	skipped []Result
}

// unknownID is the configuration error for an id no definition has,
// suggesting the closest one.
func unknownID(variable, id string, set *patchdef.Set) error {
	known := make([]string, 0, len(set.Defs))
	for _, d := range set.Defs {
		known = append(known, d.ID)
	}
	msg := fmt.Sprintf("%s names %q, which no patch definition has", variable, id)
	if c := closest.Name(id, known); c != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", c)
	}
	return logging.WithBrief(fmt.Errorf("%s (known: %s)", msg, strings.Join(known, ", ")), msg)
}

// selectDefs checks the ids of require and skip against set. An unknown
// id, an id in both lists, or a skipped definition marked required is a
// configuration error: each is a deployment contradicting itself or a
// typo that would silently leave a fix on (or off).
func selectDefs(set *patchdef.Set, require, skip []string) (*selection, error) {
	sel := &selection{set: set, require: map[string]bool{}}
	for _, id := range require {
		if set.Lookup(id) == nil {
			return nil, unknownID("INFERA_REQUIRE_PATCHES", id, set)
		}
		sel.require[id] = true
	}
	off := map[string]bool{}
	for _, id := range skip {
		d := set.Lookup(id)
		switch {
		case d == nil:
			return nil, unknownID("INFERA_SKIP_PATCHES", id, set)
		case sel.require[id]:
			return nil, fmt.Errorf("patch %s is named in both INFERA_REQUIRE_PATCHES and INFERA_SKIP_PATCHES", id)
		case d.Required:
			return nil, fmt.Errorf("INFERA_SKIP_PATCHES names %s, which its definition (%s) marks required", id, d.Source)
		}
		off[id] = true
	}
	if len(off) == 0 {
		return sel, nil
	}
	kept := &patchdef.Set{Notes: set.Notes}
	for _, d := range set.Defs {
		if !off[d.ID] {
			kept.Defs = append(kept.Defs, d)
			continue
		}
		sel.skipped = append(sel.skipped, Result{ID: d.ID, Summary: d.Summary, Source: d.Source, Package: d.Package,
			State: patchdef.Skipped, Before: patchdef.Skipped, Action: "none", Why: "INFERA_SKIP_PATCHES names it; neither applied nor checked",
			Caveat: d.Caveat, Upstream: d.Status})
	}
	// What is recorded about a set holds only for the definitions in it.
	ids := make([]string, 0, len(off))
	for id := range off {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	kept.Digest = digest.Bytes([]byte(set.Digest + "\x00skip:" + strings.Join(ids, ",")))
	sel.set = kept
	return sel, nil
}

// withSkipped puts the skipped patches' results back in the set's order.
func (sel *selection) withSkipped(all *patchdef.Set, results []Result) []Result {
	if len(sel.skipped) == 0 {
		return results
	}
	out := make([]Result, 0, len(all.Defs))
	i := 0
	for _, d := range all.Defs {
		if k := slices.IndexFunc(sel.skipped, func(r Result) bool { return r.ID == d.ID }); k >= 0 {
			out = append(out, sel.skipped[k])
			continue
		}
		if i < len(results) {
			out = append(out, results[i])
			i++
		}
	}
	return out
}
