package capability

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
)

func TestSetHasString(t *testing.T) {
	s := newSet([]string{"mooncake", "ais", "hipfile", "ais"})
	assert.Equal(t, Set{"ais", "hipfile", "mooncake"}, s)
	assert.True(t, s.Has("ais"))
	assert.True(t, s.Has("hipfile"))
	assert.True(t, s.Has("mooncake"))
	assert.False(t, s.Has("moon"))
	assert.False(t, s.Has("zzz"))
	assert.False(t, s.Has(""))
	assert.Equal(t, "ais hipfile mooncake", s.String())

	assert.Equal(t, "none", Set{}.String())
	assert.Equal(t, "none", Set(nil).String())
	assert.False(t, Set(nil).Has("mooncake"))
}

func mustReq(t *testing.T, raw string) config.Requirement {
	t.Helper()
	r, err := config.ParseRequirement(raw)
	require.NoError(t, err)
	return r
}

var (
	vllmTree  = Tree{Name: "rocm7-py312", Dir: "/overlay/native/rocm7-py312", Caps: Set{"hipfile", "mooncake"}}
	sglTree   = Tree{Name: "rocm7-py312", Dir: "/payload/native/rocm7-py312", Caps: Set{"mooncake"}}
	otherTree = Tree{Name: "rocm6-py311", Dir: "/payload/native/rocm6-py311", Caps: Set{}}
)

func TestCheckSatisfied(t *testing.T) {
	tests := []struct {
		name string
		req  string
		tree *Tree
		want Set
	}{
		{"nothing required, no tree", "", nil, Set{}},
		{"nothing required, tree", "0", &vllmTree, Set{}},
		{"all", "all", &vllmTree, Set{"hipfile", "mooncake"}},
		{"all of an empty tree", "1", &otherTree, Set{}},
		{"one name", "mooncake", &vllmTree, Set{"mooncake"}},
		{"two names", "mooncake,hipfile", &vllmTree, Set{"hipfile", "mooncake"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Check(mustReq(t, tt.req), tt.tree, "why", []Tree{vllmTree})
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func checkErr(t *testing.T, req config.Requirement, tree *Tree, why string, avail []Tree) (*Unavailable, string) {
	t.Helper()
	got, err := Check(req, tree, why, avail)
	require.Error(t, err)
	assert.Nil(t, got)
	var u *Unavailable
	require.True(t, errors.As(err, &u), "error is *Unavailable, got %T", err)
	return u, err.Error()
}

func TestCheckMissingHipfile(t *testing.T) {
	u, msg := checkErr(t, mustReq(t, "mooncake,hipfile"), &sglTree, "", []Tree{sglTree, otherTree})
	assert.Equal(t, []string{"hipfile"}, u.Missing)
	assert.Same(t, &sglTree, u.Tree)

	assert.Contains(t, msg, "INFERA_REQUIRE_NATIVE=mooncake,hipfile: ")
	assert.Contains(t, msg, "capability hipfile not provided", "names the missing capability")
	assert.Contains(t, msg, "native tree /payload/native/rocm7-py312", "names the tree dir")
	assert.Contains(t, msg, "(it provides: mooncake)", "says what the tree provides")
	assert.Contains(t, msg, "trees available: rocm7-py312 [mooncake], rocm6-py311 [none]", "lists trees with capabilities")
	assert.NotContains(t, msg, "vLLM-only", "the worker is not known to be SGLang")
	assert.NotContains(t, msg, "not a capability infera-exec knows")
	// For an SGLang worker the message says why hipfile cannot be there.
	u.SGLang = true
	msg = u.Error()
	assert.Contains(t, msg, "this worker is SGLang, and hipfile is vLLM-only by design")
}

func TestCheckMissingSeveral(t *testing.T) {
	u, msg := checkErr(t, mustReq(t, "mooncake hipfile"), &otherTree, "", []Tree{otherTree})
	assert.Equal(t, []string{"hipfile", "mooncake"}, u.Missing)
	assert.Contains(t, msg, "capabilities hipfile mooncake not provided by native tree /payload/native/rocm6-py311 (it provides: none)")
	assert.Contains(t, msg, "trees available: rocm6-py311 [none]")
	assert.NotContains(t, msg, "vLLM-only")
}

func TestCheckMissingMooncakeOnly(t *testing.T) {
	_, msg := checkErr(t, mustReq(t, "mooncake"), &otherTree, "", nil)
	assert.Contains(t, msg, "capability mooncake not provided by native tree /payload/native/rocm6-py311 (it provides: none)")
	assert.Contains(t, msg, "trees available: none")
	assert.NotContains(t, msg, "vLLM-only", "the hipfile note only when hipfile is missing")
	assert.NotContains(t, msg, "not a capability infera-exec knows")
}

// A name of the payload's own (declared by some tree, not the chosen
// one) is a missing capability: 69, with a note.
func TestCheckMissingUnknown(t *testing.T) {
	aisTree := Tree{Name: "rocm6-py312", Dir: "/payload/native/rocm6-py312", Caps: Set{"ais"}}
	u, msg := checkErr(t, mustReq(t, "ais,mooncake"), &sglTree, "", []Tree{sglTree, aisTree})
	assert.Equal(t, []string{"ais"}, u.Missing)
	assert.Contains(t, msg, "capability ais not provided by native tree /payload/native/rocm7-py312 (it provides: mooncake)")
	assert.Contains(t, msg, `note: "ais" is not a capability infera-exec knows (known: hipfile, mooncake)`)
	assert.NotContains(t, msg, "vLLM-only")
}

func TestCheckUnknownProvidedIsFine(t *testing.T) {
	tree := Tree{Name: "rocm7-py312", Dir: "/p/native/rocm7-py312", Caps: Set{"ais", "mooncake"}}
	got, err := Check(mustReq(t, "ais"), &tree, "", nil)
	require.NoError(t, err)
	assert.Equal(t, Set{"ais"}, got)
}

func TestCheckNoTree(t *testing.T) {
	why := "the payload has no native/rocm7-py312"
	t.Run("names", func(t *testing.T) {
		u, msg := checkErr(t, mustReq(t, "mooncake,hipfile"), nil, why, []Tree{otherTree})
		assert.Nil(t, u.Tree)
		assert.Equal(t, []string{"hipfile", "mooncake"}, u.Missing)
		assert.Contains(t, msg, "INFERA_REQUIRE_NATIVE=mooncake,hipfile: a native tree is required but "+why)
		assert.Contains(t, msg, "; required: hipfile mooncake")
		assert.Contains(t, msg, "trees available: rocm6-py311 [none]")
		assert.NotContains(t, msg, "vLLM-only")
	})
	t.Run("all", func(t *testing.T) {
		u, msg := checkErr(t, mustReq(t, "1"), nil, why, nil)
		assert.Empty(t, u.Missing)
		assert.Equal(t, "INFERA_REQUIRE_NATIVE=1: a native tree is required but "+why+"; trees available: none", msg)
	})
}

// A name nobody knows and no tree declares is a typo: a configuration
// error (not *Unavailable), with the closest known name.
func TestCheckUnknownName(t *testing.T) {
	for _, tt := range []struct{ req, want string }{
		{"mooncak", `INFERA_REQUIRE_NATIVE=mooncak: "mooncak" is not a capability name: infera-exec knows hipfile, mooncake and no tree of the payload declares it; did you mean mooncake?`},
		{"hipfile,ais", `"ais" is not a capability name: infera-exec knows hipfile, mooncake and no tree of the payload declares it`},
	} {
		_, err := Check(mustReq(t, tt.req), &sglTree, "", []Tree{sglTree, otherTree})
		var un *UnknownNameError
		require.ErrorAs(t, err, &un, tt.req)
		assert.Contains(t, err.Error(), tt.want)
		var u *Unavailable
		assert.False(t, errors.As(err, &u))
	}
	_, err := config.ParseRequirement("moon/cake")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"moon/cake" is not a capability name; did you mean mooncake?`)
}

// A capability the tree declares but whose evidence does not load: the
// refusal says it was withdrawn and names what the file misses; one that
// is merely absent gets no such note.
func TestDecideNamesWithdrawnCapability(t *testing.T) {
	tree := Tree{Name: "vllm-rocm7", Dir: "/payload/engine/rocm7", Caps: Set{}}
	ev := []Evidence{{
		Capability:  "mooncake",
		Globs:       []string{"mooncake/engine*.so"},
		DoesNotLoad: map[string][]string{"mooncake/engine.so": {"needs libmooncake_transfer.so.2, which is nowhere the loader looks"}},
	}}
	_, err := decide(Input{Requirement: mustReq(t, "mooncake,hipfile")}, trees{Tree: &tree, Evidence: ev})
	var u *Unavailable
	require.True(t, errors.As(err, &u), "%v", err)
	assert.Equal(t, map[string]string{"mooncake": "mooncake/engine.so does not load: needs libmooncake_transfer.so.2, which is nowhere the loader looks"}, u.Withdrawn)
	assert.Contains(t, err.Error(), "; the tree declares mooncake but it was withdrawn: mooncake/engine.so does not load: needs libmooncake_transfer.so.2")
	assert.NotContains(t, err.Error(), "declares hipfile")
}

// A name close to one a tree of the payload declares is suggested too:
// a payload may declare capabilities infera-exec does not know.
func TestUnknownNameSuggestsDeclaredNames(t *testing.T) {
	trees := []Tree{{Name: "rocm7-py312", Caps: Set{"mooncake", "numpy"}}}
	_, err := Check(mustReq(t, "numpi"), &trees[0], "", trees)
	var u *UnknownNameError
	require.ErrorAs(t, err, &u)
	assert.Contains(t, err.Error(), "did you mean numpy (declared by the payload)?")
}
