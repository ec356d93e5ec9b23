package record

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/fileid"
)

// What a restart may believe, by what became of the files a record
// names since: each change that could change a result is a full check.
func TestCheckBelievesOnlyUnchangedFiles(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, src, pyc string)
		want   Belief
		pyc    bool // the __pycache__ directory is to be checked again
	}{
		{"nothing changed", func(*testing.T, string, string) {}, Holds, false},
		{"the source rewritten", func(t *testing.T, src, _ string) {
			require.NoError(t, os.WriteFile(src+".new", []byte("x = 2\n"), 0o644))
			require.NoError(t, os.Rename(src+".new", src))
		}, FullCheck, false},
		{"the source removed", func(t *testing.T, src, _ string) { require.NoError(t, os.Remove(src)) }, FullCheck, false},
		{"a new pyc", func(t *testing.T, _, pyc string) {
			require.NoError(t, os.WriteFile(filepath.Join(pyc, "a.cpython-311.pyc"), []byte("x"), 0o644))
		}, Holds, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			src, pyc := filepath.Join(dir, "a.py"), filepath.Join(dir, "__pycache__")
			require.NoError(t, os.WriteFile(src, []byte("x = 1\n"), 0o644))
			require.NoError(t, os.Mkdir(pyc, 0o755))
			sum, id, ok := fileid.Sum(src, false, nil)
			require.True(t, ok)
			pid, ok := fileid.Lstat(pyc)
			require.True(t, ok)
			rec := &Record{Version: Version, Files: []File{{Path: src, ID: id, Sum: sum}, {Path: pyc, ID: pid, PyCache: true}}}
			c.change(t, src, pyc)
			v := rec.Check(fileid.Now())
			assert.Equal(t, c.want, v.Belief)
			assert.Equal(t, c.pyc, v.PycDirs[pyc])
		})
	}
}

// A record is read back only with its own version and key.
func TestReadTakesOnlyItsKey(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o700))
	file := filepath.Join(dir, "patches-k.json")
	Write(file, Record{Version: Version, Key: "k", Results: []byte(`[]`)}, fileid.Now())
	rec, ok := Read(dir, "patches-k.json", "k")
	require.True(t, ok, "written and read back")
	assert.Equal(t, "[]", string(rec.Results))
	_, ok = Read(dir, "patches-k.json", "other")
	assert.False(t, ok)
}
