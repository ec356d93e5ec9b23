package environ

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"nil", nil, []string{}},
		{"order kept", []string{"B=2", "A=1", "C=3"}, []string{"B=2", "A=1", "C=3"}},
		{"first duplicate wins", []string{"A=1", "B=2", "A=3"}, []string{"A=1", "B=2"}},
		{"first duplicate wins even when empty", []string{"A=", "A=x"}, []string{"A="}},
		{"entry without '=' dropped", []string{"NOEQ", "A=1"}, []string{"A=1"}},
		{"entry with empty name dropped", []string{"=foo", "A=1"}, []string{"A=1"}},
		{"value keeps further '='", []string{"OPTS=a=b=c"}, []string{"OPTS=a=b=c"}},
		{"empty value kept", []string{"E="}, []string{"E="}},
		{"dropped entry does not shadow later one", []string{"A", "A=2"}, []string{"A=2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, New(tt.in).Slice())
		})
	}
}

func TestGetValue(t *testing.T) {
	e := New([]string{"A=1", "E="})

	v, ok := e.Get("A")
	assert.True(t, ok)
	assert.Equal(t, "1", v)

	v, ok = e.Get("E")
	assert.True(t, ok, "an empty value is set")
	assert.Equal(t, "", v)

	v, ok = e.Get("MISSING")
	assert.False(t, ok)
	assert.Equal(t, "", v)

	assert.Equal(t, "1", e.Value("A"))
	assert.Equal(t, "", e.Value("MISSING"))
}

func TestSetOrder(t *testing.T) {
	e := New([]string{"A=1", "B=2", "C=3"})

	e.Set("B", "two")
	assert.Equal(t, []string{"A=1", "B=two", "C=3"}, e.Slice(), "Set of an existing name keeps its position")

	e.Set("D", "4")
	assert.Equal(t, []string{"A=1", "B=two", "C=3", "D=4"}, e.Slice(), "Set of a new name appends")

}

func TestCloneIsIndependent(t *testing.T) {
	e := New([]string{"A=1", "B=2", "C=3"})
	c := e.Clone()

	c.Set("A", "changed")
	c.Set("D", "4")

	assert.Equal(t, []string{"A=1", "B=2", "C=3"}, e.Slice())
	assert.Equal(t, []string{"A=changed", "B=2", "C=3", "D=4"}, c.Slice())

	e.Set("B", "other")
	assert.Equal(t, []string{"A=changed", "B=2", "C=3", "D=4"}, c.Slice())
}

func TestSplitList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{":", nil},
		{"::", nil},
		{"/a", []string{"/a"}},
		{"/a:/b", []string{"/a", "/b"}},
		{":/a::/b:", []string{"/a", "/b"}},
		{"/a:/a", []string{"/a", "/a"}},
		{"rel:/abs", []string{"rel", "/abs"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			assert.Equal(t, tt.want, SplitList(tt.in))
		})
	}
}

func TestPrependPaths(t *testing.T) {
	const name = "PATHVAR"
	tests := []struct {
		name    string
		env     []string // initial environment
		dirs    []string
		wantSet bool
		want    string
	}{
		{
			name: "ours first then existing",
			env:  []string{name + "=/usr/bin:/bin"},
			dirs: []string{"/p/bin", "/p/native/bin"},
			want: "/p/bin:/p/native/bin:/usr/bin:/bin", wantSet: true,
		},
		{
			name: "unset gets ours",
			dirs: []string{"/p/bin"},
			want: "/p/bin", wantSet: true,
		},
		{
			name:    "unset stays unset when nothing is added",
			dirs:    nil,
			wantSet: false,
		},
		{
			name:    "unset stays unset when only empty dirs are given",
			dirs:    []string{"", ""},
			wantSet: false,
		},
		{
			name: "set but empty stays set and empty when nothing is added",
			env:  []string{name + "="},
			want: "", wantSet: true,
		},
		{
			name: "set to only separators becomes empty",
			env:  []string{name + "=::"},
			want: "", wantSet: true,
		},
		{
			name: "empty elements dropped from existing",
			env:  []string{name + "=:/usr/bin::/bin:"},
			dirs: []string{"/p/bin"},
			want: "/p/bin:/usr/bin:/bin", wantSet: true,
		},
		{
			name: "empty elements dropped from ours",
			env:  []string{name + "=/usr/bin"},
			dirs: []string{"", "/p/bin", ""},
			want: "/p/bin:/usr/bin", wantSet: true,
		},
		{
			name: "our dirs are not duplicated",
			env:  []string{name + "=/usr/bin"},
			dirs: []string{"/p/bin", "/p/lib", "/p/bin"},
			want: "/p/bin:/p/lib:/usr/bin", wantSet: true,
		},
		{
			name: "existing elements equal to ours dropped (shim inside a shim)",
			env:  []string{name + "=/p/bin:/usr/bin:/p/lib:/bin"},
			dirs: []string{"/p/bin", "/p/lib"},
			want: "/p/bin:/p/lib:/usr/bin:/bin", wantSet: true,
		},
		{
			name: "running twice does not grow the path",
			env:  []string{name + "=/p/bin:/usr/bin"},
			dirs: []string{"/p/bin"},
			want: "/p/bin:/usr/bin", wantSet: true,
		},
		{
			name: "existing duplicates among themselves kept",
			env:  []string{name + "=/usr/bin:/bin:/usr/bin"},
			dirs: []string{"/p/bin"},
			want: "/p/bin:/usr/bin:/bin:/usr/bin", wantSet: true,
		},
		{
			name: "no dirs only cleans the existing value",
			env:  []string{name + "=/a::/b"},
			want: "/a:/b", wantSet: true,
		},
		{
			name: "elements are compared exactly, not cleaned",
			env:  []string{name + "=/p/bin/:/usr/bin"},
			dirs: []string{"/p/bin"},
			want: "/p/bin:/p/bin/:/usr/bin", wantSet: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(append([]string{"FIRST=1"}, append(tt.env, "LAST=1")...))
			e.PrependPaths(name, tt.dirs...)
			v, ok := e.Get(name)
			require.Equal(t, tt.wantSet, ok, "set")
			assert.Equal(t, tt.want, v)
			if tt.wantSet && len(tt.env) > 0 {
				assert.Equal(t, []string{"FIRST=1", name + "=" + tt.want, "LAST=1"}, e.Slice(), "position of an existing variable is kept")
			}
			if !tt.wantSet {
				assert.Equal(t, []string{"FIRST=1", "LAST=1"}, e.Slice())
			}
		})
	}
}

func TestPrependPathsAppendsNewVariable(t *testing.T) {
	e := New([]string{"A=1"})
	e.PrependPaths("LD_LIBRARY_PATH", "/p/lib")
	assert.Equal(t, []string{"A=1", "LD_LIBRARY_PATH=/p/lib"}, e.Slice())
}

func strp(s string) *string { return &s }

func TestDiff(t *testing.T) {
	base := New([]string{"PATH=/usr/bin", "KEEP=same", "GONE=x", "EMPTY=", "ZED=1"})
	e := New([]string{"PATH=/usr/bin", "KEEP=same", "EMPTY=", "ZED=1"}) // GONE removed
	e.PrependPaths("PATH", "/p/bin")
	e.Set("NEW", "n")
	e.Set("EMPTY", "now")
	e.Set("ALSO", "") // unset -> set to empty is a change
	e.Set("ZED", "1") // same value: no change
	e.Set("KEEP", "same")

	got := Diff(base, e)
	want := []Change{
		{Name: "ALSO", Before: nil, After: strp("")},
		{Name: "EMPTY", Before: strp(""), After: strp("now")},
		{Name: "GONE", Before: strp("x"), After: nil},
		{Name: "NEW", Before: nil, After: strp("n")},
		{Name: "PATH", Before: strp("/usr/bin"), After: strp("/p/bin:/usr/bin")},
	}
	assert.Equal(t, want, got)

	// The base is not changed by composing the clone.
	assert.Equal(t, []string{"PATH=/usr/bin", "KEEP=same", "GONE=x", "EMPTY=", "ZED=1"}, base.Slice())
}

func TestDiffIdentical(t *testing.T) {
	base := New([]string{"A=1", "B=2"})
	assert.Empty(t, Diff(base, base.Clone()))
	// Order does not matter to Diff, only values.
	assert.Empty(t, Diff(base, New([]string{"B=2", "A=1"})))
}

func TestDiffPointersAreIndependent(t *testing.T) {
	base := New([]string{"A=1", "B=2"})
	e := New([]string{"A=x", "B=y"})
	got := Diff(base, e)
	require.Len(t, got, 2)
	assert.Equal(t, "1", *got[0].Before)
	assert.Equal(t, "x", *got[0].After)
	assert.Equal(t, "2", *got[1].Before)
	assert.Equal(t, "y", *got[1].After)
}

func TestApplyEdits(t *testing.T) {
	e := New([]string{"PATH=/usr/bin", "KEPT=mine"})
	e.Apply(
		SetDefault("PATH", "/default"), // set: kept
		SetDefault("NEW", "d"),         // unset: set
		Prepend("PATH", "/p/bin"),
		Prepend("PYTHONPATH"), // nothing to prepend: stays unset
		Set("KEPT", "theirs"),
		Prepend("RDMAV_DRIVERS", "/x/libionic"),
	)
	assert.Equal(t, []string{"PATH=/p/bin:/usr/bin", "KEPT=theirs", "NEW=d", "RDMAV_DRIVERS=/x/libionic"}, e.Slice())
}

func TestNamesInOrder(t *testing.T) {
	e := New([]string{"B=1", "A=2", "B=3", "noequals", "C="})
	got := e.Names()
	if strings.Join(got, ",") != "B,A,C" {
		t.Fatalf("Names = %q, want B, A, C", got)
	}
	got[0] = "X"
	if e.Names()[0] != "B" {
		t.Fatal("Names shares its slice with the Env")
	}
}
