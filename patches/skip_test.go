package patches

import (
	"testing"

	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSelectDefs(t *testing.T) {
	set, err := patchdef.Load(t.TempDir())
	require.NoError(t, err)
	n := len(set.Defs)
	require.Greater(t, n, 2)
	a, b := set.Defs[0].ID, set.Defs[1].ID

	sel, err := selectDefs(set, []string{a}, []string{b})
	require.NoError(t, err)
	assert.True(t, sel.require[a])
	assert.Len(t, sel.set.Defs, n-1)
	assert.Nil(t, sel.set.Lookup(b))
	assert.NotEqual(t, set.Digest, sel.set.Digest, "what is recorded for the whole set does not hold for a part of it")
	require.Len(t, sel.skipped, 1)
	assert.Equal(t, patchdef.Skipped, sel.skipped[0].State)

	// The skipped result keeps its place among the others.
	var rest []Result
	for _, d := range sel.set.Defs {
		rest = append(rest, Result{ID: d.ID, State: patchdef.Applied})
	}
	all := sel.withSkipped(set, rest)
	require.Len(t, all, n)
	for i, d := range set.Defs {
		assert.Equal(t, d.ID, all[i].ID)
	}
	assert.Equal(t, patchdef.Skipped, all[1].State)

	// A typo is refused with the id it was probably meant to be.
	_, err = selectDefs(set, nil, []string{a[:len(a)-1]})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `INFERA_SKIP_PATCHES names "`+a[:len(a)-1]+`", which no patch definition has (did you mean `+a+`?)`)
	_, err = selectDefs(set, []string{a[:len(a)-1]}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "(did you mean "+a+"?)")

	// Required and skipped at once is a contradiction.
	_, err = selectDefs(set, []string{a}, []string{a})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "named in both INFERA_REQUIRE_PATCHES and INFERA_SKIP_PATCHES")
	set.Defs[0].Required = true
	defer func() { set.Defs[0].Required = false }()
	_, err = selectDefs(set, nil, []string{a})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "marks required")
}
