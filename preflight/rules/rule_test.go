package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const good = "id = \"r\"\nsummary = \"s\"\nseverity = \"warn\"\nmessage = \"m\"\nfix = \"f\"\nrationale = \"r\"\n\n[[when]]\nfact = \"env:X\"\npresent = true\n\n[[when]]\nfact = \"arg:--y\"\nin = [\"1\"]\n"

// Every refusal names the file and the line at fault.
func TestParseErrorsNameTheLine(t *testing.T) {
	for name, c := range map[string]struct {
		text string
		want string
	}{
		"syntax":           {"id = [\n", "f.toml:1: unexpected EOF"},
		"unknown key":      {good + "\nsevrity = \"error\"\n", "f.toml:16: unknown key when.sevrity"},
		"second condition": {good[:len(good)-len("in = [\"1\"]\n")] + "in = [\"1\"]\nabsent = true\n", "f.toml:13: r: condition 2 (arg:--y): want exactly one of"},
		"severity":         {good[:len("id = \"r\"\nsummary = \"s\"\n")] + "severity = \"fatal\"" + good[len("id = \"r\"\nsummary = \"s\"\nseverity = \"warn\""):], "f.toml:3: r: severity \"fatal\""},
	} {
		_, err := Parse([]byte(c.text), "f.toml")
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
	}
	r, err := Parse([]byte(good), "f.toml")
	require.NoError(t, err)
	v := r.Eval("vllm", "", func(f string) Value {
		return map[string]Value{"env:X": {Values: []string{"1"}}, "arg:--y": {Values: []string{"1"}}}[f]
	})
	assert.Equal(t, Holds, v.Outcome)
	v = r.Eval("vllm", "", func(f string) Value { return Value{} })
	assert.Equal(t, DoesNot, v.Outcome)
}

// A payload's rule file is read as a start reads it, for the start and
// for the payload build alike: a regular file of at most 256 KiB.
func TestLoadDirReadsBounded(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ok.toml"), []byte(good), 0o644))
	rs, err := LoadDir(dir)
	require.NoError(t, err)
	require.Len(t, rs, 1)

	big := filepath.Join(dir, "big.toml")
	require.NoError(t, os.WriteFile(big, []byte(good+"\n#"+strings.Repeat("x", maxFileBytes)+"\n"), 0o644))
	_, err = LoadDir(dir)
	assert.ErrorContains(t, err, "big.toml")
	require.NoError(t, os.Remove(big))

	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "fifo.toml"), 0o644))
	_, err = LoadDir(dir) // never blocks on the FIFO
	assert.ErrorContains(t, err, "fifo.toml")

	rs, err = LoadDir(filepath.Join(dir, "missing"))
	assert.NoError(t, err)
	assert.Empty(t, rs)
}
