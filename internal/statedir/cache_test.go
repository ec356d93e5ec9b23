package statedir

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	write := func(name, content string, age int) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		m := old.Add(time.Duration(age) * time.Minute)
		require.NoError(t, os.Chtimes(p, m, m))
	}
	key := func(i int) string { return fmt.Sprintf("%016x", i) }
	for i := 0; i < KeepPerKind+3; i++ {
		write("probe-"+key(i)+".json", "{}", i) // probe-...0 is the oldest
		write("patches-"+key(i)+".json", "{}", i)
	}
	// Named like ours, older than all of them, but not provably ours: a
	// key that is no digest, content that is no JSON object.
	write("probe-notes.json", "{}", -5)
	write("probe-"+key(99)+".json", "user data, not JSON", -5)
	write("probe-notes.txt", "x", -5)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "probe-"+key(98)+".json"), 0o755))
	require.NoError(t, os.Symlink("probe-"+key(1)+".json", filepath.Join(dir, "probe-"+key(97)+".json")))

	WriteCache(dir, "probe-"+key(1000)+".json", []byte(`{"new":true}`))

	data, err := os.ReadFile(filepath.Join(dir, "probe-"+key(1000)+".json"))
	require.NoError(t, err)
	assert.Equal(t, `{"new":true}`, string(data))
	for i := 0; i < KeepPerKind+3; i++ {
		_, err := os.Stat(filepath.Join(dir, "probe-"+key(i)+".json"))
		// The new file and the KeepPerKind-1 newest old ones stay.
		if i < KeepPerKind+3-(KeepPerKind-1) {
			assert.True(t, os.IsNotExist(err), "probe-%d should be pruned: %v", i, err)
		} else {
			assert.NoError(t, err, "probe-%d should stay", i)
		}
		_, err = os.Stat(filepath.Join(dir, "patches-"+key(i)+".json"))
		assert.NoError(t, err, "another kind is not pruned")
	}
	for _, n := range []string{"probe-notes.json", "probe-" + key(99) + ".json", "probe-notes.txt", "probe-" + key(98) + ".json", "probe-" + key(97) + ".json"} {
		_, err := os.Lstat(filepath.Join(dir, n))
		assert.NoError(t, err, "%s is not provably ours: kept", n)
	}
}

// Another user's file is never pruned, whatever its name and content.
func TestWriteCacheKeepsAnotherUsersFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another uid (chown); run the tests as root")
	}
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, Dir(dir))
	theirs := filepath.Join(dir, "probe-0000000000000000.json")
	require.NoError(t, os.WriteFile(theirs, []byte("{}"), 0o644))
	require.NoError(t, os.Chown(theirs, 4242, 4242))
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(theirs, old, old))
	for i := 1; i <= KeepPerKind+2; i++ {
		WriteCache(dir, fmt.Sprintf("probe-%016x.json", i), []byte("{}"))
	}
	assert.FileExists(t, theirs)
}

// Sweep removes the temporary files a killed write of ours left, and
// nothing else: not a young one (a start at work), not another user's,
// not a name of someone else's.
func TestSweepRemovesOnlyStaleTempFilesOfOurs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, Dir(dir))
	stale := time.Now().Add(-2 * StaleAfter)
	mk := func(name string, old bool) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("{"), 0o644))
		if old {
			require.NoError(t, os.Chtimes(p, stale, stale))
		}
		return p
	}
	gone := []string{
		mk(".report.json.tmp-123456", true),
		mk(".probe-0123456789abcdef.json.tmp-42", true),
		mk(".native-load-0123456789abcdef.json.tmp-7", true),
		mk(".patches-0123456789abcdef.blob.tmp-8", true),
	}
	kept := []string{
		mk(".report.json.tmp-99", false),                // young: a start may be writing it now
		mk(".notes.txt.tmp-1", true),                    // not a name of ours
		mk(".probe-notes.json.tmp-1", true),             // no key
		mk("report.json.tmp-1", true),                   // not hidden: not how we name them
		mk(".report.json.tmp-abc", true),                // not the random suffix CreateTemp gives
		mk(".probe-0123456789abcdef.json", true),        // not a temporary file
		mk(".patches-0123456789abcdef.txt.tmp-8", true), // neither .json nor .blob
	}
	removed := Sweep(dir)
	assert.Len(t, removed, len(gone))
	for _, p := range gone {
		assert.NoFileExists(t, p)
	}
	for _, p := range kept {
		assert.FileExists(t, p)
	}
	if os.Geteuid() == 0 {
		theirs := mk(".report.json.tmp-5", true)
		require.NoError(t, os.Chown(theirs, 4242, 4242))
		Sweep(dir)
		assert.FileExists(t, theirs, "another user's file stays")
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

// A blob is read back as written, parts one after another; one without
// the header is not taken, and pruning removes only blobs that begin with
// it (a blob is not JSON, so the header is what proves it ours), never a
// record of the same kind.
func TestBlobs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	require.NoError(t, Dir(dir))
	key := func(i int) string { return fmt.Sprintf("%016x", i) }
	WriteBlob(dir, "patches-"+key(0)+".blob", []string{"first\n", "", "second"})
	parts, closeBlob, ok := OpenBlob(dir, "patches-"+key(0)+".blob")
	require.True(t, ok)
	b, err := io.ReadAll(parts)
	closeBlob()
	require.NoError(t, err)
	assert.Equal(t, "first\nsecond", string(b))

	require.NoError(t, os.WriteFile(filepath.Join(dir, "patches-"+key(1)+".blob"), []byte("first\nsecond"), 0o644))
	_, _, ok = OpenBlob(dir, "patches-"+key(1)+".blob")
	assert.False(t, ok, "no header: not a blob of ours")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "patches-"+key(2)+".blob"), []byte("infera"), 0o644))
	_, _, ok = OpenBlob(dir, "patches-"+key(2)+".blob")
	assert.False(t, ok, "shorter than the header")
	require.NoError(t, os.Chmod(filepath.Join(dir, "patches-"+key(0)+".blob"), 0o666))
	_, _, ok = OpenBlob(dir, "patches-"+key(0)+".blob")
	assert.False(t, ok, "writable by others: not believed")
	require.NoError(t, os.Remove(filepath.Join(dir, "patches-"+key(2)+".blob")))

	old := time.Now().Add(-time.Hour)
	for i := 2; i < KeepPerKind+4; i++ {
		p := filepath.Join(dir, "patches-"+key(i)+".blob")
		WriteBlob(dir, filepath.Base(p), []string{"x"})
		require.NoError(t, os.Chtimes(p, old.Add(time.Duration(i)*time.Minute), old.Add(time.Duration(i)*time.Minute)))
		WriteCache(dir, "patches-"+key(i)+".json", []byte("{}"))
	}
	for _, n := range []string{"patches-" + key(0) + ".blob", "patches-" + key(1) + ".blob"} {
		m := old.Add(-time.Hour)
		require.NoError(t, os.Chtimes(filepath.Join(dir, n), m, m))
	}
	WriteBlob(dir, "patches-"+key(100)+".blob", []string{"new"})
	var blobs, records int
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case ".blob":
			blobs++
		case ".json":
			records++
		}
	}
	assert.Equal(t, KeepPerKind+1, blobs, "the newest of ours, and the one without the header")
	assert.FileExists(t, filepath.Join(dir, "patches-"+key(1)+".blob"), "not provably ours: kept")
	assert.NoFileExists(t, filepath.Join(dir, "patches-"+key(0)+".blob"), "the oldest of ours: pruned")
	assert.Equal(t, KeepPerKind, records, "records are pruned as their own kind")
}
