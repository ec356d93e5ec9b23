package overlay

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func put(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
	require.NoError(t, os.Chmod(p, mode))
}

// payloadDir is a small payload with an executable, a symlink inside it, a
// read-only directory, and its index.
func payloadDir(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "payload")
	put(t, filepath.Join(src, "bin/infera-exec"), "#!static\n", 0o755)
	put(t, filepath.Join(src, "py312/pkg/__init__.py"), "x = 1\n", 0o644)
	put(t, filepath.Join(src, "native/rocm7-py312/lib/libdemo.so.1.0"), "ELF", 0o644)
	require.NoError(t, os.Symlink("libdemo.so.1.0", filepath.Join(src, "native/rocm7-py312/lib/libdemo.so.1")))
	require.NoError(t, os.Chmod(filepath.Join(src, "py312/pkg"), 0o555))
	t.Cleanup(func() { os.Chmod(filepath.Join(src, "py312/pkg"), 0o755) })
	_, err := WriteIndex(src)
	require.NoError(t, err)
	return src
}

// sameTree compares two trees entry by entry: type, mode, content, link.
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	ia, err := BuildIndex(a)
	require.NoError(t, err)
	ib, err := BuildIndex(b)
	require.NoError(t, err)
	var eb []Entry
	for _, e := range ib.Entries {
		if e.Path != installedName && e.Path != recordName {
			eb = append(eb, e)
		}
	}
	assert.Equal(t, ia.Entries, eb)
}

func TestInstallCopiesAndReRunIsNoop(t *testing.T) {
	src := payloadDir(t)
	dest := filepath.Join(t.TempDir(), "overlay")
	r, err := Install(src, dest)
	require.NoError(t, err)
	assert.Len(t, r.Copied, 4, "three files and a symlink were copied: %v", r.Copied)
	sameTree(t, src, dest)
	fi, err := os.Stat(filepath.Join(dest, "bin/infera-exec"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	link, err := os.Readlink(filepath.Join(dest, "native/rocm7-py312/lib/libdemo.so.1"))
	require.NoError(t, err)
	assert.Equal(t, "libdemo.so.1.0", link)
	assert.False(t, Interrupted(dest))

	r, err = Install(src, dest)
	require.NoError(t, err)
	assert.Empty(t, r.Copied)
	assert.Equal(t, 4, r.Unchanged)
	entries, _ := os.ReadDir(dest)
	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), stagePrefix), "no staging left: %s", e.Name())
	}
}

func TestInstallRefusesTamperedPayload(t *testing.T) {
	for name, damage := range map[string]func(string){
		"changed":   func(src string) { put(t, filepath.Join(src, "py312/pkg/__init__.py"), "x = 2\n", 0o644) },
		"truncated": func(src string) { put(t, filepath.Join(src, "bin/infera-exec"), "#!st", 0o755) },
		"relinked": func(src string) {
			os.Remove(filepath.Join(src, "native/rocm7-py312/lib/libdemo.so.1"))
			os.Symlink("other", filepath.Join(src, "native/rocm7-py312/lib/libdemo.so.1"))
		},
		"missing": func(src string) { os.Remove(filepath.Join(src, "bin/infera-exec")) },
	} {
		t.Run(name, func(t *testing.T) {
			src := payloadDir(t)
			os.Chmod(filepath.Join(src, "py312/pkg"), 0o755)
			damage(src)
			dest := filepath.Join(t.TempDir(), "overlay")
			_, err := Install(src, dest)
			require.Error(t, err)
			assert.Contains(t, err.Error(), src)
			var de *DestError
			assert.False(t, errors.As(err, &de), "a payload problem, not a destination problem")
			// Nothing of the payload reached dest, and dest says the
			// install did not finish, so no worker starts from it.
			_, statErr := os.Stat(filepath.Join(dest, "bin/infera-exec"))
			assert.True(t, os.IsNotExist(statErr))
			assert.True(t, Interrupted(dest))
			_, err = Open(dest)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "did not finish")
		})
	}
}

func TestInstallDestinationProblems(t *testing.T) {
	src := payloadDir(t)
	file := filepath.Join(t.TempDir(), "afile")
	put(t, file, "", 0o644)
	_, err := Install(src, file)
	var de *DestError
	require.ErrorAs(t, err, &de)
	assert.Contains(t, err.Error(), "is not a directory (a regular file)")

	_, err = Install(src, src)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is the payload itself")

	// A link at DEST's name: whoever can change it would choose where
	// the payload goes. Refused, nothing written where it leads.
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "overlay")
	require.NoError(t, os.Symlink(real, link))
	_, err = Install(src, link)
	require.ErrorAs(t, err, &de)
	assert.Contains(t, err.Error(), "is a symbolic link")
	entries, _ := os.ReadDir(real)
	assert.Empty(t, entries)
}

func TestIndexRefusesEscapes(t *testing.T) {
	for name, e := range map[string]Entry{
		"dotdot":        {Path: "../evil", Type: "file", Size: 1, SHA256: strings.Repeat("0", 64)},
		"absolute":      {Path: "/etc/passwd", Type: "file", Size: 1, SHA256: strings.Repeat("0", 64)},
		"link out":      {Path: "lib/x", Type: "symlink", Target: "../../etc/passwd"},
		"link absolute": {Path: "lib/x", Type: "symlink", Target: "/etc/passwd"},
		"device":        {Path: "dev", Type: "char"},
	} {
		t.Run(name, func(t *testing.T) {
			src := t.TempDir()
			ix := Index{Schema: 1, Entries: []Entry{{Path: "lib", Type: "dir", Mode: "0755"}, e}}
			data, _ := json.Marshal(ix)
			put(t, filepath.Join(src, IndexName), string(data), 0o644)
			_, err := Install(src, filepath.Join(t.TempDir(), "d"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "payload index")
		})
	}
	// Building an index of a payload whose link leaves it is refused too.
	src := t.TempDir()
	require.NoError(t, os.Symlink("../../etc/passwd", filepath.Join(src, "x")))
	_, err := BuildIndex(src)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "leads out of the payload")
}

func TestInstallRemovesWhatAnOlderPayloadLeft(t *testing.T) {
	src := payloadDir(t)
	dest := filepath.Join(t.TempDir(), "overlay")
	_, err := Install(src, dest)
	require.NoError(t, err)
	put(t, filepath.Join(dest, "operator-notes.txt"), "mine\n", 0o644)

	os.Chmod(filepath.Join(src, "py312/pkg"), 0o755)
	require.NoError(t, os.RemoveAll(filepath.Join(src, "native")))
	_, err = WriteIndex(src)
	require.NoError(t, err)
	r, err := Install(src, dest)
	require.NoError(t, err)
	assert.Contains(t, r.Removed, "native/rocm7-py312/lib/libdemo.so.1.0")
	assert.NoDirExists(t, filepath.Join(dest, "native"))
	assert.FileExists(t, filepath.Join(dest, "operator-notes.txt"), "what the install did not put there stays")
}
