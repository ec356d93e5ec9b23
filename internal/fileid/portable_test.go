package fileid

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// remount gives path a new inode and change time and its old modification
// time, as a new overlay mount of the same image shows the same file.
func remount(t *testing.T, path string, content []byte) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, content, fi.Mode()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestCheckOnANewMount(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.py")
	if err := os.WriteFile(p, []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, id, ok := Sum(p, false, nil)
	if !ok || sum != SumBytes([]byte("one\n")) {
		t.Fatalf("sum %q ok %v", sum, ok)
	}
	if _, ok := Check(p, false, id, sum, nil); !ok {
		t.Fatal("unchanged file not held")
	}
	remount(t, p, []byte("one\n"))
	if now, _ := Lstat(p); now == id {
		t.Fatal("the copy kept its identity: nothing is tested")
	}
	if _, ok := Check(p, false, id, sum, nil); !ok {
		t.Error("same content, size and mtime under a new inode: must hold")
	}
	if _, ok := Check(p, false, id, "", nil); ok {
		t.Error("without a recorded sum a new inode must not hold")
	}
	remount(t, p, []byte("two\n"))
	if now, _ := Lstat(p); now.Portable() != id.Portable() {
		t.Fatal("portable identity moved: nothing is tested")
	}
	if _, ok := Check(p, false, id, sum, &Buffer{}); ok {
		t.Error("same path, size and mtime, other content: must not hold")
	}
	// A directory is summed by its names.
	dsum, did, ok := Sum(dir, false, nil)
	if !ok {
		t.Fatal("directory not summed")
	}
	fi, _ := os.Stat(dir)
	if err := os.WriteFile(filepath.Join(dir, "b.pth"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dir, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if _, ok := Check(dir, false, did, dsum, nil); ok {
		t.Error("a directory with a new entry and its old mtime must not hold")
	}
	// A directory copied up to a new layer: new mtime (and inode), the same
	// entries. It holds by its entries, whatever its mtime.
	if err := os.Remove(filepath.Join(dir, "b.pth")); err != nil {
		t.Fatal(err)
	}
	later := fi.ModTime().Add(time.Hour)
	if err := os.Chtimes(dir, later, later); err != nil {
		t.Fatal(err)
	}
	if now, _ := Lstat(dir); now.Mtime == did.Mtime || now.Portable() != did.Portable() {
		t.Fatalf("a directory's portable identity is its mode alone: %+v against %+v", now.Portable(), did.Portable())
	}
	if _, ok := Check(dir, false, did, dsum, nil); !ok {
		t.Error("a directory with the same entries and another mtime must hold")
	}
	// A link, followed: where it leads is part of the sum.
	other := filepath.Join(dir, "c.py")
	if err := os.WriteFile(other, []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln := filepath.Join(dir, "ln")
	if err := os.Symlink("a.py", ln); err != nil {
		t.Fatal(err)
	}
	s1, _, _ := Sum(ln, true, nil)
	if err := os.Remove(ln); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("c.py", ln); err != nil {
		t.Fatal(err)
	}
	if s2, _, _ := Sum(ln, true, nil); s1 == s2 {
		t.Error("a link that leads elsewhere to the same bytes has the same sum")
	}
}

func TestGranularity(t *testing.T) {
	for in, want := range map[int64]int64{1_700_000_000_123_456_789: 1, 1_700_000_000_123_456_780: 10,
		1_700_000_000_100_000_000: 100_000_000, 1_700_000_000_000_000_000: 2e9} {
		if got := granularity(in); got != want {
			t.Errorf("granularity(%d) = %d, want %d", in, got, want)
		}
	}
	id := Identity{Ctime: 1_700_000_000_000_000_000}
	if id.SettledAt(Tick(id.Ctime + 1e9)) {
		t.Error("a stamp in whole seconds is settled only two seconds later")
	}
	if !id.SettledAt(Tick(id.Ctime + 2e9)) {
		t.Error("not settled two seconds later")
	}
}

// Confirm reads the path whatever its identity: content changed within
// one clock tick, with every field of the identity equal, is told apart
// by its Sum alone.
func TestConfirmReadsEvenAnUnchangedIdentity(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("planned"), 0o644))
	sum, id, ok := Sum(p, false, nil)
	require.True(t, ok)
	got, ok := Confirm(p, false, sum, nil)
	assert.True(t, ok)
	assert.Equal(t, id, got)

	other := SumBytes([]byte("written"))
	got, ok = Confirm(p, false, other, nil)
	assert.False(t, ok, "the bytes are not those of the sum, though the identity is the same")
	assert.Equal(t, id, got)
	_, ok = Confirm(p, false, "", nil)
	assert.False(t, ok, "no sum confirms nothing")
}

// A file larger than maxSum has no Sum (what depends on it is checked in
// full instead); one at the cap has one.
func TestSumCapsTheRead(t *testing.T) {
	dir := t.TempDir()
	at, over := filepath.Join(dir, "at"), filepath.Join(dir, "over")
	require.NoError(t, os.WriteFile(at, nil, 0o644))
	require.NoError(t, os.Truncate(at, maxSum))
	require.NoError(t, os.WriteFile(over, nil, 0o644))
	require.NoError(t, os.Truncate(over, maxSum+1))
	_, _, ok := Sum(at, false, nil)
	assert.True(t, ok)
	_, _, ok = Sum(over, false, nil)
	assert.False(t, ok)
}

// interpreterBytes is the bytes of the real interpreter (an ELF file of
// megabytes, with a GNU build ID) and that ID.
func interpreterBytes(t *testing.T) ([]byte, []byte) {
	t.Helper()
	const exe = "/usr/bin/python3"
	b, id, err := fixture.ELFBuildID(exe)
	if errors.Is(err, fs.ErrNotExist) && os.Getenv("INFERA_REQUIRE_FIXTURES") != "1" {
		t.Skipf("fixture %s is absent (install python3): %v; set INFERA_REQUIRE_FIXTURES=1 to make this a failure", exe, err)
	}
	require.NoError(t, err)
	require.Greater(t, len(b), SmallFile, "the interpreter is a large file")
	return b, id
}

// With LargeByBuildID a large ELF file (an interpreter) is summed by its GNU
// build ID, not read whole: a new mount of the same binary keeps the sum,
// and Check holds there, as for a small file's content; another binary
// with the same size and mtime has another ID, and Check does not hold.
func TestSumListTakesALargeELFByItsBuildID(t *testing.T) {
	content, buildID := interpreterBytes(t)
	p := filepath.Join(t.TempDir(), "python3.11")
	require.NoError(t, os.WriteFile(p, content, 0o755))
	sum, id, _, ok := SumList(p, true, LargeByBuildID, nil)
	require.True(t, ok)
	assert.Equal(t, buildIDSum+hex.EncodeToString(buildID), sum)
	read, _, _ := Sum(p, true, nil)
	assert.Equal(t, SumBytes(content), read, "Sum reads the file")
	_, held := Check(p, true, id, sum, nil)
	assert.True(t, held)

	remount(t, p, content)
	now, after, _, _ := SumList(p, true, LargeByBuildID, nil)
	require.NotEqual(t, id, after, "the copy kept its identity: nothing is tested")
	assert.Equal(t, sum, now, "a new mount of the same binary keeps its sum")
	_, held = Check(p, true, id, sum, nil)
	assert.True(t, held, "and Check holds on it")
	_, held = Check(p, true, id, read, nil)
	assert.True(t, held, "as does the sum of the bytes read")

	remount(t, p, fixture.Rebuilt(content, buildID))
	now, _, _, _ = SumList(p, true, LargeByBuildID, nil)
	assert.NotEqual(t, sum, now)
	_, held = Check(p, true, id, sum, nil)
	assert.False(t, held, "another build with the same size and mtime")
}

// A large file that is no ELF file with a build ID is read whole, by
// SumList with LargeByBuildID as by Sum, and so checked on a new mount;
// with LargeBuildIDOnly it has no sum.
func TestSumListReadsALargeFileWithoutABuildID(t *testing.T) {
	content, buildID := interpreterBytes(t)
	for name, b := range map[string][]byte{
		"zeros":       make([]byte, SmallFile+1),
		"no build ID": bytes.ReplaceAll(bytes.Clone(content), []byte("GNU\x00"+string(buildID)), []byte("XYZ\x00"+string(buildID))),
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "python3.11")
			require.NoError(t, os.WriteFile(p, b, 0o755))
			sum, id, _, ok := SumList(p, true, LargeByBuildID, nil)
			require.True(t, ok)
			assert.Equal(t, SumBytes(b), sum)
			_, _, _, ok = SumList(p, true, LargeBuildIDOnly, nil)
			assert.False(t, ok, "no sum without a build ID when only that is asked for")
			remount(t, p, b)
			_, held := Check(p, true, id, sum, nil)
			assert.True(t, held)
			other := bytes.Clone(b)
			other[len(other)/2] ^= 1
			remount(t, p, other)
			_, held = Check(p, true, id, sum, nil)
			assert.False(t, held)
		})
	}
}

// A directory listed before (Buffer.Listed) is digested from that listing
// while it keeps the identity it had before the listing, and read again
// once it has changed.
func TestSumListTakesAListingWhileItHolds(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.pth"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(other, "b.pth"), nil, 0o644))
	time.Sleep(RacyWindow) // past the clock tick of the writes
	l, err := List(dir)
	require.NoError(t, err)
	require.True(t, l.Settled)
	fresh, _, _ := Sum(dir, true, nil)

	// The listing, not the directory, is what is digested: one of
	// another directory's entries under this one's identity shows it.
	elsewhere, err := List(other)
	require.NoError(t, err)
	buf := &Buffer{Listed: map[string]Listing{dir: {Before: l.Before, Settled: true, Entries: elsewhere.Entries}}}
	sum, _, entries, ok := SumList(dir, true, LargeByBuildID, buf)
	require.True(t, ok)
	assert.Equal(t, "b.pth", entries[0].Name())
	assert.NotEqual(t, fresh, sum)

	buf.Listed[dir] = l
	sum, _, _, _ = SumList(dir, true, LargeByBuildID, buf)
	assert.Equal(t, fresh, sum)

	// Not taken when the directory had changed within the tick before.
	buf.Listed[dir] = Listing{Before: l.Before, Entries: elsewhere.Entries}
	sum, _, _, _ = SumList(dir, true, LargeByBuildID, buf)
	assert.Equal(t, fresh, sum)

	time.Sleep(10 * time.Millisecond) // past the clock tick of the listing
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.pth"), nil, 0o644))
	sum, _, entries, _ = SumList(dir, true, LargeByBuildID, buf)
	now, _, _ := Sum(dir, true, nil)
	assert.Equal(t, now, sum, "changed since the listing: read again")
	assert.Len(t, entries, 2)
}
