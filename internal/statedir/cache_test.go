package statedir

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each kind keeps its KeepPerKind newest files; other kinds, other names
// and anything that is not a regular file are left alone.
func TestWriteCachePrunesOldestOfItsKind(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, Dir(dir))
	old := time.Now().Add(-time.Hour)
	write := func(name string, age int) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("{}"), 0o644))
		m := old.Add(time.Duration(age) * time.Minute)
		require.NoError(t, os.Chtimes(p, m, m))
	}
	for i := 0; i < KeepPerKind+3; i++ {
		write("probe-"+strconv.Itoa(i)+".json", i) // probe-0 is the oldest
		write("patches-"+strconv.Itoa(i)+".json", i)
	}
	write("probe-notes.txt", 0)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "probe-dir.json"), 0o755))
	require.NoError(t, os.Symlink("probe-1.json", filepath.Join(dir, "probe-link.json")))

	WriteCache(dir, "probe-new.json", []byte(`{"new":true}`))

	data, err := os.ReadFile(filepath.Join(dir, "probe-new.json"))
	require.NoError(t, err)
	assert.Equal(t, `{"new":true}`, string(data))
	for i := 0; i < KeepPerKind+3; i++ {
		_, err := os.Stat(filepath.Join(dir, "probe-"+strconv.Itoa(i)+".json"))
		// The new file and the KeepPerKind-1 newest old ones stay.
		if i < KeepPerKind+3-(KeepPerKind-1) {
			assert.True(t, os.IsNotExist(err), "probe-%d should be pruned: %v", i, err)
		} else {
			assert.NoError(t, err, "probe-%d should stay", i)
		}
		_, err = os.Stat(filepath.Join(dir, "patches-"+strconv.Itoa(i)+".json"))
		assert.NoError(t, err, "another kind is not pruned")
	}
	for _, n := range []string{"probe-notes.txt", "probe-dir.json", "probe-link.json"} {
		_, err := os.Lstat(filepath.Join(dir, n))
		assert.NoError(t, err, n)
	}
}

// A directory that is not infera-exec's own gets no cache file at all.
func TestWriteCacheRefusesUnsafeDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	require.NoError(t, os.Mkdir(dir, 0o777))
	require.NoError(t, os.Chmod(dir, 0o777))
	WriteCache(dir, "probe-x.json", []byte("{}"))
	_, err := os.Stat(filepath.Join(dir, "probe-x.json"))
	assert.True(t, os.IsNotExist(err), "written into a world-writable directory: %v", err)
}

// A cache is believed only as a regular file, not a link, within the cap,
// in a directory and as a file that nobody else can write.
func TestReadCache(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	write := func(name, content string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		require.NoError(t, os.Chmod(p, mode))
	}
	write("probe-a.json", "{}", 0o644)
	data, ok := ReadCache(dir, "probe-a.json", 100)
	require.True(t, ok)
	assert.Equal(t, "{}", string(data))

	_, ok = ReadCache(dir, "probe-a.json", 1)
	assert.False(t, ok, "over the cap")
	_, ok = ReadCache(dir, "missing.json", 100)
	assert.False(t, ok)

	write("probe-w.json", "{}", 0o666)
	_, ok = ReadCache(dir, "probe-w.json", 100)
	assert.False(t, ok, "writable by others")

	require.NoError(t, os.Symlink("probe-a.json", filepath.Join(dir, "probe-l.json")))
	_, ok = ReadCache(dir, "probe-l.json", 100)
	assert.False(t, ok, "a link at the name")

	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "probe-f.json"), 0o644))
	_, ok = ReadCache(dir, "probe-f.json", 100)
	assert.False(t, ok, "a FIFO, refused without blocking")

	require.NoError(t, os.Chmod(dir, 0o777))
	_, ok = ReadCache(dir, "probe-a.json", 100)
	assert.False(t, ok, "a directory others can write")
}
