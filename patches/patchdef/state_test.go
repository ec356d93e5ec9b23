package patchdef

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEvaluate(t *testing.T) {
	swap := &Edit{Anchor: "conv, _ = cache\n", Replacement: "conv = cache[0]\n", Count: 1}
	insert := &Edit{Anchor: "def f():\n", Replacement: "def f():\n    g()\n", Count: 1}
	shrink := &Edit{Anchor: "x = 1  # old\n", Replacement: "x = 1", Count: 1}
	twice := &Edit{Anchor: "a()\n", Replacement: "b()\n", Count: 2}
	marked := &Edit{Anchor: "conv, _ = cache\n", Replacement: "conv = cache[0]\n", Count: 1, Upstream: "_physical_blocks"}
	cases := []struct {
		name    string
		edit    *Edit
		content string
		want    State
		anchors int
		repls   int
	}{
		{"swap pending", swap, "x\nconv, _ = cache\ny\n", Pending, 1, 0},
		{"swap applied", swap, "x\nconv = cache[0]\ny\n", Applied, 0, 1},
		{"swap anchor twice", swap, "conv, _ = cache\nconv, _ = cache\n", Drift, 2, 0},
		{"swap anchor gone", swap, "conv, _, _ = cache\n", Drift, 0, 0},
		{"swap half applied", swap, "conv, _ = cache\nconv = cache[0]\n", Drift, 1, 1},
		{"insertion pending", insert, "def f():\n    pass\n", Pending, 1, 0},
		{"insertion applied keeps its anchor", insert, "def f():\n    g()\n    pass\n", Applied, 0, 1},
		{"insertion applied plus a stray anchor", insert, "def f():\n    g()\ndef f():\n", Drift, 1, 1},
		{"shrink pending (replacement inside anchor)", shrink, "x = 1  # old\n", Pending, 1, 0},
		{"shrink applied", shrink, "x = 1\n", Applied, 0, 1},
		{"count 2 pending", twice, "a()\na()\n", Pending, 2, 0},
		{"count 2 found once", twice, "a()\n", Drift, 1, 0},
		{"count 2 applied", twice, "b()\nb()\n", Applied, 0, 2},
		{"upstream marker wins", marked, "self._physical_blocks = 2\nconv, _ = cache\n", Upstream, 0, 0},
		{"empty file", swap, "", Drift, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := Evaluate(c.edit, counter(c.content))
			assert.Equal(t, c.want, ev.State)
			if c.want != Upstream {
				assert.Equal(t, c.anchors, ev.Anchors, "anchors")
				assert.Equal(t, c.repls, ev.Replacement, "replacements")
			}
			if c.want == Drift {
				assert.Contains(t, ev.Why, "expected the anchor")
			}
		})
	}
}

// Applying a pending edit always yields an applied one, whatever the
// relation between anchor and replacement.
func TestCombine(t *testing.T) {
	cases := []struct {
		in   []State
		want State
	}{
		{[]State{Pending}, Pending},
		{[]State{Applied, Applied}, Applied},
		{[]State{Applied, Pending}, Pending}, // a start that died between two files
		{[]State{Pending, Drift}, Drift},
		{[]State{Applied, Drift}, Partial}, // in force in one place, not in the other
		{[]State{Applied, Pending, Drift}, Partial},
		{[]State{Upstream, Upstream}, Upstream},
		{[]State{Upstream, NotApplicable}, Upstream},
		{[]State{Upstream, Pending}, Drift}, // half fixed upstream: neither
		{[]State{Upstream, Applied}, Drift},
		{[]State{NotApplicable, NotApplicable}, NotApplicable},
		{[]State{NotApplicable, Pending}, Pending},
		{[]State{NotApplicable, Applied}, Applied},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Combine(c.in), "%v", c.in)
	}
}

// counter counts in content as Evaluate expects.
func counter(content string) func(string) int {
	return func(s string) int { return strings.Count(content, s) }
}

// A legacy marker only the script writes decides before the upstream
// marker (the script borrowed upstream's names); without legacy_unique
// the upstream marker decides first (the script's change is upstream's
// text).
func TestLegacyUniqueDecidesBeforeUpstream(t *testing.T) {
	e := &Edit{Anchor: "n = shape[0]\n", Replacement: "n = shape[0] // ours\n", Count: 1, Upstream: "_per_logical",
		LegacyMarker: "n = shape[0] // ratio", LegacyScript: "patch_x.py", LegacyUnique: true}
	script := "self._per_logical = 1\nratio = self._per_logical\nn = shape[0] // ratio\n"
	upstream := "self._per_logical = 1\nn = shape[0]\nexpand(self._per_logical)\n"
	assert.Equal(t, Evaluation{State: Applied, Why: "by the v0.2.2 script patch_x.py"}, Evaluate(e, counter(script)))
	assert.Equal(t, Upstream, Evaluate(e, counter(upstream)).State)
	assert.Equal(t, Pending, Evaluate(e, counter("n = shape[0]\n")).State)
	assert.Equal(t, Applied, Evaluate(e, counter("n = shape[0] // ours\n")).State)

	shared := *e
	shared.LegacyUnique = false
	assert.Equal(t, Upstream, Evaluate(&shared, counter(script)).State, "without legacy_unique the upstream marker decides first")

	bad := *e
	bad.File, bad.Replacement = "a.py", "n = shape[0] // ratio  # ours\n"
	d := &Definition{ID: "x", Summary: "s", Package: "demo", Distribution: "demo", Edits: []Edit{bad}}
	assert.ErrorContains(t, d.Validate(), "the legacy marker occurs in the replacement")
}
