package patchdef

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// req is a definition of package pkg that requires the ids given.
func req(t *testing.T, id, pkg string, requires ...string) *Definition {
	t.Helper()
	d := &Definition{ID: id, Summary: "s", Package: pkg, Distribution: pkg, Requires: requires,
		Edits: []Edit{{File: "a.py", Anchor: id + "\n", Replacement: id + " fixed\n"}}}
	require.NoError(t, d.Validate())
	return d
}

func TestRequiresValidate(t *testing.T) {
	for _, c := range []struct {
		name     string
		requires []string
		want     string
	}{
		{"itself", []string{"a"}, "a: requires itself"},
		{"twice", []string{"b", "b"}, "a: requires b twice"},
		{"not an id", []string{"B c"}, `a: requires "B c": want the id of a patch definition`},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &Definition{ID: "a", Summary: "s", Package: "demo", Distribution: "demo", Requires: c.requires,
				Edits: []Edit{{File: "a.py", Anchor: "x", Replacement: "y"}}}
			assert.EqualError(t, d.Validate(), c.want)
		})
	}
}

// A set is ordered so that every requirement comes before the patches
// that need it, the order otherwise kept; a requirement that no
// definition of the package has, or a cycle, is refused.
func TestRequiresOrderAndRefusals(t *testing.T) {
	s, err := Merge([]*Definition{req(t, "a", "demo", "c"), req(t, "b", "demo"), req(t, "c", "demo", "d"), req(t, "d", "demo")}, nil)
	require.NoError(t, err)
	var ids []string
	for _, d := range s.Defs {
		ids = append(ids, d.ID)
	}
	assert.Equal(t, []string{"d", "c", "a", "b"}, ids)

	// A payload definition replacing a built-in one takes part in the order.
	s, err = Merge([]*Definition{req(t, "a", "demo"), req(t, "b", "demo")}, []*Definition{req(t, "a", "demo", "b")})
	require.NoError(t, err)
	assert.Equal(t, "b", s.Defs[0].ID)

	for _, c := range []struct {
		name string
		defs []*Definition
		want string
	}{
		{"unknown", []*Definition{req(t, "a", "demo", "z")}, "a requires z, which no patch definition has"},
		{"other package", []*Definition{req(t, "a", "demo", "b"), req(t, "b", "other")}, "a (package demo) requires b, which patches other: a requirement must patch the same package"},
		{"cycle", []*Definition{req(t, "a", "demo", "b"), req(t, "b", "demo", "c"), req(t, "c", "demo", "a")}, "requirements form a cycle: a requires b requires c requires a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Merge(c.defs, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestParseRequires(t *testing.T) {
	d, err := Parse([]byte("requires = [\"demo-other\"]\n"+goodDef), "payload/demo/a.toml")
	require.NoError(t, err)
	assert.Equal(t, []string{"demo-other"}, d.Requires)
}
