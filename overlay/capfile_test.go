package overlay

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCapabilities(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string
		notes   []string // substrings, one per expected note, in order
	}{
		{name: "canonical", content: "mooncake hipfile\n", want: []string{"hipfile", "mooncake"}},
		{name: "no trailing newline", content: "mooncake hipfile", want: []string{"hipfile", "mooncake"}},
		{name: "single", content: "mooncake\n", want: []string{"mooncake"}},
		{name: "sorted and deduplicated", content: "mooncake hipfile mooncake\n", want: []string{"hipfile", "mooncake"}},
		{name: "extra spaces", content: "  mooncake   hipfile  \n", want: []string{"hipfile", "mooncake"}},
		{name: "empty", content: "", want: []string{}},
		{name: "only newline", content: "\n", want: []string{}},
		{name: "only spaces", content: "   ", want: []string{}},
		{
			name: "tabs", content: "mooncake\thipfile\n", want: []string{"hipfile", "mooncake"},
			notes: []string{"tabs"},
		},
		{
			name: "CRLF", content: "mooncake hipfile\r\n", want: []string{"hipfile", "mooncake"},
			notes: []string{"CRLF line endings"},
		},
		{
			name: "multiple lines", content: "mooncake\nhipfile\n", want: []string{"hipfile", "mooncake"},
			notes: []string{"spans 2 lines (expected one line)"},
		},
		{
			name: "blank lines do not count", content: "\n\nmooncake hipfile\n\n", want: []string{"hipfile", "mooncake"},
		},
		{
			name: "three lines", content: "mooncake\n\nhipfile\nmooncake\n", want: []string{"hipfile", "mooncake"},
			notes: []string{"spans 3 lines"},
		},
		{
			name: "tab, CRLF and lines together", content: "mooncake\t\r\nhipfile\r\n", want: []string{"hipfile", "mooncake"},
			notes: []string{"CRLF line endings", "tabs", "spans 2 lines"},
		},
		{
			name: "unknown kept", content: "mooncake ais\n", want: []string{"ais", "mooncake"},
			notes: []string{`unknown capability "ais" kept (known: hipfile, mooncake)`},
		},
		{
			name: "unknown with allowed punctuation kept", content: "rdma_v2.1-beta\n", want: []string{"rdma_v2.1-beta"},
			notes: []string{`unknown capability "rdma_v2.1-beta" kept`},
		},
		{
			name: "invalid dropped", content: "mooncake Moon$cake\n", want: []string{"mooncake"},
			notes: []string{`ignored "Moon$cake": not a capability name`},
		},
		{
			name: "upper case is not a name", content: "MOONCAKE\n", want: []string{},
			notes: []string{`ignored "MOONCAKE": not a capability name`},
		},
		{
			name: "leading punctuation is not a name", content: "-mooncake .hidden _x\n", want: []string{},
			notes: []string{`ignored "-mooncake"`, `ignored ".hidden"`, `ignored "_x"`},
		},
		{
			name: "comma list is not a name", content: "mooncake,hipfile\n", want: []string{},
			notes: []string{`ignored "mooncake,hipfile"`},
		},
		{
			name: "non-ASCII is not a name", content: "mooncaké\n", want: []string{},
			notes: []string{`ignored "mooncaké"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notes := parseCapabilities(tt.content)
			assert.Equal(t, tt.want, got)
			require.Len(t, notes, len(tt.notes), "notes: %q", notes)
			for i, want := range tt.notes {
				assert.Contains(t, notes[i], want)
			}
		})
	}
}

func TestParseInvalidNoteExplainsNames(t *testing.T) {
	_, notes := parseCapabilities("Moon$cake")
	require.Len(t, notes, 1)
	assert.Equal(t, `ignored "Moon$cake": not a capability name (lower-case letters, digits, '_', '.', '-')`, notes[0])
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "CAPABILITIES")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func TestReadCapabilities(t *testing.T) {
	t.Run("present", func(t *testing.T) {
		set, notes, exists, err := readCapabilities(writeFile(t, "mooncake hipfile\n"))
		require.NoError(t, err)
		assert.True(t, exists)
		assert.Equal(t, []string{"hipfile", "mooncake"}, set)
		assert.Empty(t, notes)
	})
	t.Run("missing", func(t *testing.T) {
		set, notes, exists, err := readCapabilities(filepath.Join(t.TempDir(), "CAPABILITIES"))
		require.NoError(t, err)
		assert.False(t, exists)
		assert.Equal(t, []string{}, set)
		assert.Empty(t, notes)
	})
	t.Run("missing directory", func(t *testing.T) {
		_, _, exists, err := readCapabilities(filepath.Join(t.TempDir(), "no", "such", "CAPABILITIES"))
		require.NoError(t, err)
		assert.False(t, exists)
	})
	t.Run("empty", func(t *testing.T) {
		set, notes, exists, err := readCapabilities(writeFile(t, ""))
		require.NoError(t, err)
		assert.True(t, exists)
		assert.Equal(t, []string{}, set)
		assert.Equal(t, []string{"is empty: the tree declares no capabilities"}, notes)
	})
	t.Run("blank", func(t *testing.T) {
		set, notes, exists, err := readCapabilities(writeFile(t, " \n"))
		require.NoError(t, err)
		assert.True(t, exists)
		assert.Equal(t, []string{}, set)
		assert.Equal(t, []string{"is empty: the tree declares no capabilities"}, notes)
	})
	t.Run("only invalid words: no empty note on top", func(t *testing.T) {
		set, notes, exists, err := readCapabilities(writeFile(t, "Moon$cake\n"))
		require.NoError(t, err)
		assert.True(t, exists)
		assert.Equal(t, []string{}, set)
		require.Len(t, notes, 1)
		assert.Contains(t, notes[0], `ignored "Moon$cake"`)
	})
	t.Run("notes of the content", func(t *testing.T) {
		set, notes, _, err := readCapabilities(writeFile(t, "mooncake\r\nhipfile\r\n"))
		require.NoError(t, err)
		assert.Equal(t, []string{"hipfile", "mooncake"}, set)
		require.Len(t, notes, 2)
		assert.Contains(t, notes[0], "CRLF")
		assert.Contains(t, notes[1], "spans 2 lines")
	})
	t.Run("directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "CAPABILITIES")
		require.NoError(t, os.Mkdir(dir, 0o755))
		set, _, exists, err := readCapabilities(dir)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "read capabilities")
		assert.False(t, exists)
		assert.Nil(t, set)
	})
	t.Run("unreadable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root can read a mode 000 file; this case needs a non-root user")
		}
		p := writeFile(t, "mooncake\n")
		require.NoError(t, os.Chmod(p, 0))
		set, _, exists, err := readCapabilities(p)
		require.Error(t, err)
		assert.True(t, errors.Is(err, os.ErrPermission), "%v", err)
		assert.Contains(t, err.Error(), "read capabilities")
		assert.False(t, exists)
		assert.Nil(t, set)
	})
}

// An evidence glob must be a valid pattern that stays inside its tree.
func TestCheckGlob(t *testing.T) {
	for _, g := range []string{"", "/etc/*", "../x", "a/../../b", "a/[", "./a"} {
		assert.Error(t, checkGlob(g), "%q", g)
	}
	for _, g := range []string{"lib/libhipfile.so.*", "**/*.so", "bin/ais-check"} {
		assert.NoError(t, checkGlob(g), "%q", g)
	}
}
