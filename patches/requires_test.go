package patches

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/patches/commit"
	"github.com/infera/infera-exec/patches/patchdef"
)

// requiring is a set of two patches of package demo: "need" (b.py)
// requires "base" (a.py, whose fix upstream also has: "base(upstream)").
func requiring(t *testing.T, baseGuard ...patchdef.Guard) (*patchdef.Definition, *patchdef.Definition) {
	t.Helper()
	base := def(t, "base", patchdef.Edit{File: "a.py", Anchor: "def f():\n    base()\n", Replacement: "def f():\n    base(fixed)\n", Upstream: "    base(upstream)\n"})
	base.Guards = baseGuard
	need := def(t, "need", patchdef.Edit{File: "b.py", Anchor: "def g():\n    need()\n", Replacement: "def g():\n    need(fixed)\n"})
	need.Requires = []string{"base"}
	return base, need
}

// A patch is written only where every patch it requires is applied,
// upstream, or written by the same run; otherwise it stays pending, its
// file untouched, and its result says which requirement and why.
func TestRequiresDecidesWhetherAPatchIsWritten(t *testing.T) {
	const bPending = "def g():\n    need()\n"
	cases := []struct {
		name   string
		a      string
		guard  []patchdef.Guard
		skip   bool
		dry    bool
		state  patchdef.State
		action string
		why    string
		b      string
	}{
		{name: "requirement pending: both written", a: "def f():\n    base()\n", state: patchdef.Applied, action: "applied", b: "def g():\n    need(fixed)\n"},
		{name: "requirement applied", a: "def f():\n    base(fixed)\n", state: patchdef.Applied, action: "applied", b: "def g():\n    need(fixed)\n"},
		{name: "requirement upstream", a: "def f():\n    base(upstream)\n", state: patchdef.Applied, action: "applied", b: "def g():\n    need(fixed)\n"},
		{name: "requirement pending, dry run", a: "def f():\n    base()\n", dry: true, state: patchdef.Pending, action: "would-apply", b: bPending},
		{name: "requirement drift", a: "def f():\n    base(other)\n", state: patchdef.Pending, action: "none",
			why: "not applied: requires base, which is drift (", b: bPending},
		{name: "requirement not applicable", a: "def f():\n    base()\n", guard: []patchdef.Guard{{File: "a.py", Contains: "# v2"}},
			state: patchdef.Pending, action: "none", why: "not applied: requires base, which is not-applicable (a.py has no \"# v2\"", b: bPending},
		{name: "requirement skipped", a: "def f():\n    base()\n", skip: true, state: patchdef.Pending, action: "none",
			why: "not applied: requires base, which is skipped in this run", b: bPending},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			site, loc := pkgTree(t, map[string]string{"a.py": c.a, "b.py": bPending})
			base, need := requiring(t, c.guard...)
			set, err := patchdef.Merge([]*patchdef.Definition{need, base}, nil)
			require.NoError(t, err)
			if c.skip {
				sel, err := selectDefs(set, nil, []string{"base"})
				require.NoError(t, err)
				set = sel.set
			}
			var r Result
			for _, x := range applySet(set, loc, options{DryRun: c.dry}) {
				if x.ID == "need" {
					r = x
				}
			}
			assert.Equal(t, c.state, r.State, r.Why)
			assert.Equal(t, c.action, r.Action, r.Why)
			assert.Contains(t, r.Why, c.why)
			assert.Equal(t, c.b, read(t, filepath.Join(site, "demo/b.py")))
		})
	}
}

// A patch commits with the patches it requires: when the requirement's
// write fails, the patch that needs it is not written either, though its
// file is another.
func TestRequiresCommitsTogether(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"a.py": "def f():\n    base()\n", "b.py": "def g():\n    need()\n"})
	base, need := requiring(t)
	set, err := patchdef.Merge([]*patchdef.Definition{need, base}, nil)
	require.NoError(t, err)
	stage := commit.Stage
	commit.Stage = func(path, content string, was identity) (*atomicfile.Staged, error) {
		if filepath.Base(path) == "a.py" {
			return nil, errors.New("replace " + path + ": no space left on device")
		}
		return stage(path, content, was)
	}
	t.Cleanup(func() { commit.Stage = stage })
	for _, r := range applySet(set, loc, options{}) {
		assert.Equal(t, "failed", r.Action, r.ID)
		assert.Equal(t, patchdef.Pending, r.State, r.ID)
	}
	assert.Equal(t, "def g():\n    need()\n", read(t, filepath.Join(site, "demo/b.py")))
	assert.Equal(t, "def f():\n    base()\n", read(t, filepath.Join(site, "demo/a.py")))
}
