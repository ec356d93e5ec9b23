package patchdef

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEvaluate(t *testing.T) {
	swap := &Edit{Anchor: "conv, _ = cache\n", Replacement: "conv = cache[0]\n", Count: 1}
	insert := &Edit{Anchor: "def f():\n", Replacement: "def f():\n    g()\n", Count: 1}
	shrink := &Edit{Anchor: "x = 1  # old\n", Replacement: "x = 1", Count: 1}
	twice := &Edit{Anchor: "a()\n", Replacement: "b()\n", Count: 2}
	marked := &Edit{Anchor: "conv, _ = cache\n", Replacement: "conv = cache[0]\n", Count: 1, Upstream: "_physical_blocks", Site: "def register("}
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
		{"swap half applied", swap, "conv, _ = cache\nconv = cache[0]\n", Partial, 1, 1},
		{"insertion pending", insert, "def f():\n    pass\n", Pending, 1, 0},
		{"insertion applied keeps its anchor", insert, "def f():\n    g()\n    pass\n", Applied, 0, 1},
		{"insertion applied plus a stray anchor", insert, "def f():\n    g()\ndef f():\n", Partial, 1, 1},
		{"shrink pending (replacement inside anchor)", shrink, "x = 1  # old\n", Pending, 1, 0},
		{"shrink applied", shrink, "x = 1\n", Applied, 0, 1},
		{"count 2 pending", twice, "a()\na()\n", Pending, 2, 0},
		{"count 2 found once", twice, "a()\n", Drift, 1, 0},
		{"count 2 applied", twice, "b()\nb()\n", Applied, 0, 2},
		{"upstream marker wins at the site", marked, "def register(self):\n    self._physical_blocks = 2\n    conv, _ = cache\n", Upstream, 0, 0},
		{"upstream marker elsewhere decides nothing", marked, "def other(self):\n    self._physical_blocks = 2\ndef register(self):\n    conv, _ = cache\n", Pending, 1, 0},
		{"empty file", swap, "", Drift, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := Evaluate(c.edit, c.content, nil)
			assert.Equal(t, c.want, ev.State)
			if c.want != Upstream {
				assert.Equal(t, c.anchors, ev.Anchors, "anchors")
				assert.Equal(t, c.repls, ev.Replacement, "replacements")
			}
			switch c.want {
			case Drift:
				assert.Contains(t, ev.Why, "expected the anchor")
			case Partial:
				assert.Contains(t, ev.Why, "the fix stands at one site and not at the other")
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

// A legacy marker only the script writes decides before the upstream
// marker (the script borrowed upstream's names); without legacy_unique
// the upstream marker decides first (the script's change is upstream's
// text).
func TestLegacyUniqueDecidesBeforeUpstream(t *testing.T) {
	e := &Edit{Anchor: "n = shape[0]\n", Replacement: "n = shape[0] // ours\n", Count: 1, Upstream: "_per_logical",
		LegacyMarker: "n = shape[0] // ratio", LegacyScript: "patch_x.py", LegacyUnique: true, Site: "class W"}
	script := "class W:\n  self._per_logical = 1\n  ratio = self._per_logical\n  n = shape[0] // ratio\n"
	upstream := "class W:\n  self._per_logical = 1\n  n = shape[0]\n  expand(self._per_logical)\n"
	ev := Evaluate(e, script, nil)
	assert.Equal(t, Applied, ev.State)
	assert.Contains(t, ev.Why, "by the v0.2.2 script patch_x.py")
	assert.Contains(t, ev.At, LineRange{From: 4, To: 4, Found: "legacy"}, "where the marker stands")
	assert.Equal(t, Upstream, Evaluate(e, upstream, nil).State)
	assert.Equal(t, Pending, Evaluate(e, "class W:\n  n = shape[0]\n", nil).State)
	assert.Equal(t, Applied, Evaluate(e, "class W:\n  n = shape[0] // ours\n", nil).State)
	assert.Equal(t, Pending, Evaluate(e, "class V:\n  ratio = self._per_logical\nclass W:\n  n = shape[0]\n", nil).State, "the marker in another class decides nothing")

	shared := *e
	shared.LegacyUnique = false
	assert.Equal(t, Upstream, Evaluate(&shared, script, nil).State, "without legacy_unique the upstream marker decides first")

	bad := *e
	bad.File, bad.Replacement = "a.py", "n = shape[0] // ratio  # ours\n"
	bad.Site = ""
	d := &Definition{ID: "x", Summary: "s", Package: "demo", Distribution: "demo", Edits: []Edit{bad}}
	assert.ErrorContains(t, d.Validate(), "the legacy marker occurs in the replacement")
}
