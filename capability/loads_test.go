package capability_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
)

// The verdict is reused while nothing it consulted changed, and a change
// in the tree is a full check.
func TestCheckLoadsCachesUntilSomethingChanges(t *testing.T) {
	tree, cache := t.TempDir(), t.TempDir()
	lib := filepath.Join(tree, "lib")
	require.NoError(t, fixture.SharedObject(filepath.Join(lib, "libdemo.so.1"), "libdemo.so.1"))
	in := capability.LoadInput{Dir: tree, ImageRoot: "/", LibraryPath: []string{lib}, CacheDir: cache}
	time.Sleep(fileid.RacyWindow) // a file written within the clock's granularity keys no verdict

	v := capability.CheckLoads(in)
	require.True(t, v.OK(), "%+v", v)
	require.False(t, v.Cached)
	require.Equal(t, 1, v.Checked)
	v = capability.CheckLoads(in)
	require.True(t, v.Cached)

	// A second library needing one that is nowhere: the tree changed, the
	// check runs again and names what is missing.
	require.NoError(t, fixture.SharedObject(filepath.Join(lib, "libnowhere.so.7"), "libnowhere.so.7"))
	t.Setenv("LIBRARY_PATH", lib) // where cc's linker finds it, once
	require.NoError(t, fixture.SharedObject(filepath.Join(lib, "libneeds.so.1"), "libneeds.so.1", "libnowhere.so.7"))
	require.NoError(t, os.Remove(filepath.Join(lib, "libnowhere.so.7")))
	v = capability.CheckLoads(in)
	require.False(t, v.Cached)
	require.False(t, v.OK())
	require.Contains(t, v.Failed["lib/libneeds.so.1"][0], "needs libnowhere.so.7")

	// The evidence naming it is withdrawn; the other stays.
	ev := []capability.Evidence{
		{Capability: "demo", Globs: []string{"lib/libdemo.so.*"}, Granted: true},
		{Capability: "needs", Globs: []string{"lib/libneeds.so.*"}, Granted: true},
	}
	set, ev := capability.ApplyLoads(tree, ev, v)
	require.Equal(t, capability.Set{"demo"}, set)
	require.False(t, ev[1].Granted)
	require.Contains(t, ev[1].Refusal(), "lib/libneeds.so.1 does not load: ")

	// A corrupt cache file is a full check, not an error.
	files, _ := filepath.Glob(filepath.Join(cache, "native-load-*.json"))
	require.Len(t, files, 1)
	require.NoError(t, os.WriteFile(files[0], []byte("{"), 0o644))
	require.False(t, capability.CheckLoads(in).Cached)
}

// A library written within the clock's granularity of the check may have
// changed after it was read without its identity showing it: such a
// verdict is not cached, and the next check reads the tree again.
func TestCheckLoadsDoesNotCacheARacyVerdict(t *testing.T) {
	tree, cache := t.TempDir(), t.TempDir()
	lib := filepath.Join(tree, "lib")
	require.NoError(t, fixture.SharedObject(filepath.Join(lib, "libdemo.so.1"), "libdemo.so.1"))
	in := capability.LoadInput{Dir: tree, ImageRoot: "/", LibraryPath: []string{lib}, CacheDir: cache}
	// A window no loaded machine outlasts between the write and the checks.
	old := fileid.RacyWindow
	fileid.RacyWindow = time.Hour
	t.Cleanup(func() { fileid.RacyWindow = old })
	require.False(t, capability.CheckLoads(in).Cached)
	require.False(t, capability.CheckLoads(in).Cached, "a verdict keyed on a just-written library was reused")
}

// remount gives path a new inode and change time with its old size,
// mode and modification time, and keeps its directory's modification
// time, as a new overlay mount of the same image shows the same file; it
// returns the identity before and after.
func remount(t testing.TB, path string, content []byte) (before, after fileid.Identity) {
	t.Helper()
	before, ok := fileid.Stat(path)
	require.True(t, ok)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	dir, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, content, int(fi.Size()))
	tmp := path + ".new"
	require.NoError(t, os.WriteFile(tmp, content, fi.Mode()))
	require.NoError(t, os.Chtimes(tmp, fi.ModTime(), fi.ModTime()))
	require.NoError(t, os.Rename(tmp, path))
	require.NoError(t, os.Chtimes(filepath.Dir(path), dir.ModTime(), dir.ModTime()))
	after, ok = fileid.Stat(path)
	require.True(t, ok)
	require.NotEqual(t, before, after, "the copy kept its identity: nothing is tested")
	require.Equal(t, before.Portable(), after.Portable())
	return before, after
}

// A new overlay mount of the same image (Kubernetes restarts a container
// from its image; the state directory is an emptyDir that survives) gives
// every file a new device, inode and change time: the verdict stays while
// the bytes are the same, and goes when a file's size and modification
// time are kept but its content is not.
func TestCheckLoadsOnANewMount(t *testing.T) {
	tree, cache := t.TempDir(), t.TempDir()
	lib := filepath.Join(tree, "lib")
	so := filepath.Join(lib, "libdemo.so.1")
	require.NoError(t, fixture.SharedObject(so, "libdemo.so.1"))
	index := filepath.Join(t.TempDir(), "INDEX")
	require.NoError(t, os.WriteFile(index, []byte("index one\n"), 0o644))
	in := capability.LoadInput{Dir: tree, ImageRoot: "/", LibraryPath: []string{lib}, IndexFile: index, CacheDir: cache}
	time.Sleep(fileid.RacyWindow) // a file written within the clock's granularity keys no verdict
	require.False(t, capability.CheckLoads(in).Cached)
	require.True(t, capability.CheckLoads(in).Cached)

	// Same content on a new inode: the verdict is kept.
	orig, err := os.ReadFile(so)
	require.NoError(t, err)
	remount(t, so, orig)
	v := capability.CheckLoads(in)
	require.True(t, v.Cached, "the same library on a new inode dropped the verdict")
	require.True(t, v.OK())

	// Same size and modification time, other content: checked again.
	other := append([]byte(nil), orig...)
	other[len(other)-1] ^= 0xff
	remount(t, so, other)
	require.False(t, capability.CheckLoads(in).Cached, "a library with other bytes kept the verdict")
	remount(t, so, orig) // the recorded bytes again: the recorded verdict holds
	require.True(t, capability.CheckLoads(in).Cached)

	// The payload index likewise.
	remount(t, index, []byte("index one\n"))
	require.True(t, capability.CheckLoads(in).Cached, "the same index on a new inode dropped the verdict")
	remount(t, index, []byte("index two\n"))
	require.False(t, capability.CheckLoads(in).Cached, "an index with other bytes kept the verdict")
}

// largeLibrary is a real library over fileid.SmallFile with a GNU build
// ID (libssl3's libcrypto.so.3): its bytes and that ID.
func largeLibrary(t testing.TB) ([]byte, []byte) {
	t.Helper()
	const real = "/usr/lib/x86_64-linux-gnu/libcrypto.so.3"
	data, id, err := fixture.ELFBuildID(real)
	if errors.Is(err, fs.ErrNotExist) && os.Getenv("INFERA_REQUIRE_FIXTURES") != "1" {
		t.Skipf("fixture %s is absent (install libssl3): %v; set INFERA_REQUIRE_FIXTURES=1 to make this a failure", real, err)
	}
	require.NoError(t, err)
	require.Greater(t, len(data), fileid.SmallFile)
	return data, id
}

// A library over fileid.SmallFile is kept by its GNU build ID, not read
// whole: a new mount of the same image keeps the verdict; another build
// with the same size and modification time does not.
func TestCheckLoadsKeepsALargeLibraryByItsBuildID(t *testing.T) {
	data, id := largeLibrary(t)
	tree, cache := t.TempDir(), t.TempDir()
	lib := filepath.Join(tree, "lib")
	big := filepath.Join(lib, "libcrypto.so.3")
	require.NoError(t, os.MkdirAll(lib, 0o755))
	require.NoError(t, os.WriteFile(big, data, 0o644))
	require.NoError(t, fixture.SharedObject(filepath.Join(lib, "libdemo.so.1"), "libdemo.so.1", "libcrypto.so.3"))
	in := capability.LoadInput{Dir: tree, ImageRoot: "/", LibraryPath: []string{lib}, CacheDir: cache}
	time.Sleep(fileid.RacyWindow)
	v := capability.CheckLoads(in)
	require.False(t, v.Cached)
	require.True(t, v.OK(), "%v", v.Failed)
	require.True(t, capability.CheckLoads(in).Cached)

	remount(t, big, data)
	assert.True(t, capability.CheckLoads(in).Cached, "the same library on a new mount dropped the verdict")

	remount(t, big, fixture.Rebuilt(data, id))
	assert.False(t, capability.CheckLoads(in).Cached, "another build with the same size and mtime kept the verdict")
}
