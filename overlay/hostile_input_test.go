package overlay_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/overlay"
)

// openWithin fails the test instead of hanging when Open blocks.
func openWithin(t *testing.T, root string) (*overlay.Payload, error) {
	t.Helper()
	type res struct {
		p   *overlay.Payload
		err error
	}
	ch := make(chan res, 1)
	go func() { p, err := overlay.Open(root); ch <- res{p, err} }()
	select {
	case r := <-ch:
		return r.p, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("overlay.Open(%s) blocked", root)
		return nil, nil
	}
}

// Every small file read from the payload is a regular file of bounded
// size: a FIFO used to hang the start forever, a link to /dev/zero grew
// until memory ran out.
func TestOpenRefusesFilesThatAreNotSmallRegularFiles(t *testing.T) {
	t.Run("CAPABILITIES is a FIFO", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": "", "native/rocm7-py312/": ""})
		capFile := filepath.Join(root, "native/rocm7-py312/CAPABILITIES")
		require.NoError(t, unix.Mkfifo(capFile, 0o644))
		_, err := openWithin(t, root)
		require.Error(t, err)
		assert.ErrorContains(t, err, capFile)
		assert.ErrorContains(t, err, "FIFO")
	})
	t.Run("CAPABILITIES links to /dev/zero", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": "", "native/rocm7-py312/": ""})
		require.NoError(t, os.Symlink("/dev/zero", filepath.Join(root, "native/rocm7-py312/CAPABILITIES")))
		_, err := openWithin(t, root)
		assert.ErrorContains(t, err, "character device")
	})
	t.Run("CAPABILITIES is huge", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": "", "native/rocm7-py312/": ""})
		f, err := os.Create(filepath.Join(root, "native/rocm7-py312/CAPABILITIES"))
		require.NoError(t, err)
		require.NoError(t, f.Truncate(64<<20))
		f.Close()
		_, err = openWithin(t, root)
		assert.ErrorContains(t, err, "the cap is")
	})
	t.Run("payload.toml is a FIFO", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": ""})
		require.NoError(t, unix.Mkfifo(filepath.Join(root, overlay.ManifestName), 0o644))
		_, err := openWithin(t, root)
		assert.ErrorContains(t, err, overlay.ManifestName)
		assert.ErrorContains(t, err, "FIFO")
	})
	t.Run("payload.index.json links to /dev/zero", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": ""})
		require.NoError(t, os.Symlink("/dev/zero", filepath.Join(root, overlay.IndexName)))
		done := make(chan error, 1)
		go func() { _, _, err := overlay.ReadIndex(root); done <- err }()
		select {
		case err := <-done:
			assert.ErrorContains(t, err, "character device")
			assert.ErrorContains(t, err, overlay.IndexName)
		case <-time.After(10 * time.Second):
			t.Fatal("ReadIndex blocked on /dev/zero")
		}
	})
}

// A tree directory that is a link out of the payload is refused, with or
// without a manifest, and so is capability evidence that is a link out
// of its tree.
func TestTreesAndEvidenceThatLeaveThePayloadAreRefused(t *testing.T) {
	outside := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(outside, "lib"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "lib/libtransfer_engine.so.1"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "CAPABILITIES"), []byte("mooncake\n"), 0o644))

	t.Run("implied layout", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": "", "native/": ""})
		require.NoError(t, os.Symlink(outside, filepath.Join(root, "native/rocm7-py312")))
		_, err := openWithin(t, root)
		assert.ErrorContains(t, err, "leaves the payload")
	})
	t.Run("manifest dir", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": "", overlay.ManifestName: `schema = 1
[[tree]]
name = "n"
kind = "native"
dir = "native/x"
python = "= 3.12"
rocm = "= 7"
`})
		require.NoError(t, os.MkdirAll(filepath.Join(root, "native"), 0o755))
		require.NoError(t, os.Symlink(outside, filepath.Join(root, "native/x")))
		_, err := openWithin(t, root)
		assert.ErrorContains(t, err, "leaves the payload")
	})
	t.Run("evidence", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": "", "native/x/lib/": "", overlay.ManifestName: `schema = 1
[[tree]]
name = "n"
kind = "native"
dir = "native/x"
python = "= 3.12"
rocm = "= 7"
[tree.capabilities]
mooncake = ["lib/libtransfer_engine.so*"]
`})
		require.NoError(t, os.Symlink(filepath.Join(outside, "lib/libtransfer_engine.so.1"), filepath.Join(root, "native/x/lib/libtransfer_engine.so.1")))
		p, err := openWithin(t, root)
		require.NoError(t, err)
		require.Len(t, p.NativeTrees, 1)
		caps, _ := capability.Verify(p.NativeTrees[0].Dir, p.NativeTrees[0].Evidence)
		assert.False(t, caps.Has("mooncake"), "a link out of the tree is no evidence")
	})
}
