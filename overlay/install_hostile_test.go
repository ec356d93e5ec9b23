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
	"golang.org/x/sys/unix"
)

// writeRawIndex writes an index as given, without BuildIndex's checks: an
// attacker writes whatever JSON they like.
func writeRawIndex(t *testing.T, root string, entries []Entry) {
	t.Helper()
	data, err := json.Marshal(Index{Schema: 1, Entries: entries})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, IndexName), data, 0o644))
}

// Links are resolved as the kernel resolves them, through the payload's
// other links: here -> . and x -> here/../.. stays inside when read as
// text, and leaves the payload when followed.
func TestIndexResolvesLinksThroughEachOther(t *testing.T) {
	cases := map[string][]Entry{
		"through a link to .": {
			{Path: "a", Type: "dir", Mode: "0755"},
			{Path: "a/here", Type: "symlink", Target: "."},
			{Path: "a/x", Type: "symlink", Target: "here/../.."},
		},
		"through a link to a sibling directory": {
			{Path: "a", Type: "dir", Mode: "0755"},
			{Path: "a/b", Type: "dir", Mode: "0755"},
			{Path: "a/b/up", Type: "symlink", Target: "../.."},
			{Path: "x", Type: "symlink", Target: "a/b/up/.."},
		},
		"loop": {
			{Path: "l1", Type: "symlink", Target: "l2/x"},
			{Path: "l2", Type: "symlink", Target: "l1/x"},
		},
		"through a path the payload does not have": {
			{Path: "x", Type: "symlink", Target: "missing/../../etc"},
		},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			src := t.TempDir()
			writeRawIndex(t, src, entries)
			_, _, err := ReadIndex(src)
			require.Error(t, err)
			assert.ErrorContains(t, err, "symlink")
		})
	}
	// And links that stay inside are fine.
	src := t.TempDir()
	writeRawIndex(t, src, []Entry{
		{Path: "a", Type: "dir", Mode: "0755"},
		{Path: "a/here", Type: "symlink", Target: "."},
		{Path: "a/x", Type: "symlink", Target: "here/.."},
		{Path: "lib", Type: "symlink", Target: "a/here/x/a"},
	})
	_, _, err := ReadIndex(src)
	require.NoError(t, err)
}

// The attack of the audit, end to end: a payload whose links lead out of
// DEST is refused before anything is written, and a file outside DEST
// keeps its content.
func TestInstallNeverTouchesAPathOutsideDest(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("keep me"), 0o644))
	dest := filepath.Join(base, "dest")

	// First install: a payload with a/ holding a file "victim".
	src := filepath.Join(t.TempDir(), "payload")
	put(t, filepath.Join(src, "a/victim"), "old", 0o644)
	_, err := WriteIndex(src)
	require.NoError(t, err)
	_, err = Install(src, dest)
	require.NoError(t, err)

	// Upgrade: a/ is gone; a hostile payload's links lead out of DEST.
	src2 := filepath.Join(t.TempDir(), "payload")
	require.NoError(t, os.MkdirAll(filepath.Join(src2, "b"), 0o755))
	require.NoError(t, os.Symlink(".", filepath.Join(src2, "b/here")))
	require.NoError(t, os.Symlink("here/../..", filepath.Join(src2, "b/x")))
	writeRawIndex(t, src2, []Entry{
		{Path: "b", Type: "dir", Mode: "0755"},
		{Path: "b/here", Type: "symlink", Target: "."},
		{Path: "b/x", Type: "symlink", Target: "here/../.."},
	})
	_, err = Install(src2, dest)
	require.Error(t, err)
	got, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(got))

	// A recorded index (written by an earlier install, then tampered
	// with) naming a stale path through a link that now leads out of
	// DEST: removing stale entries follows no link.
	require.NoError(t, os.Symlink(base, filepath.Join(dest, "out")))
	data, err := json.Marshal(Index{Schema: 1, Entries: []Entry{
		{Path: "out", Type: "dir", Mode: "0755"},
		{Path: "out/victim", Type: "file", Mode: "0644", Size: 7, SHA256: strings.Repeat("0", 64)},
	}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dest, installedName), data, 0o644))
	_, err = Install(src, dest)
	require.NoError(t, err)
	got, err = os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(got), "a stale entry behind a link is not followed out of DEST")
}

// An upgrade where a directory became a link: removing the old
// directory's files must not delete the new payload's files that the
// link now leads to.
func TestInstallUpgradeWhereADirectoryBecameALink(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "dest")
	src := filepath.Join(t.TempDir(), "payload")
	put(t, filepath.Join(src, "lib/libx.so"), "old", 0o644)
	_, err := WriteIndex(src)
	require.NoError(t, err)
	_, err = Install(src, dest)
	require.NoError(t, err)

	src2 := filepath.Join(t.TempDir(), "payload")
	put(t, filepath.Join(src2, "lib64/libx.so"), "new", 0o644)
	require.NoError(t, os.Symlink("lib64", filepath.Join(src2, "lib")))
	_, err = WriteIndex(src2)
	require.NoError(t, err)
	r, err := Install(src2, dest)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dest, "lib64/libx.so"))
	require.NoError(t, err, "the new payload's file is there (removed: %v)", r.Removed)
	assert.Equal(t, "new", string(got))
	got, err = os.ReadFile(filepath.Join(dest, "lib/libx.so"))
	require.NoError(t, err)
	assert.Equal(t, "new", string(got))
	sameTree(t, src2, dest)
}

// A destination that fills up is the destination's problem (73), not the
// payload's.
func TestInstallWriteErrorsAreDestErrors(t *testing.T) {
	for _, err := range []error{
		&os.PathError{Op: "write", Path: "/d/x", Err: errNoSpace},
	} {
		var de *DestError
		assert.True(t, errors.As(destErr(err), &de), "%v", err)
	}
}

// FuzzIndexLinks builds link graphs from the fuzzer's bytes, and checks
// that whatever ReadIndex accepts, materialized on disk, never resolves
// (by the kernel, through EvalSymlinks) outside the payload.
func FuzzIndexLinks(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{9, 9, 1, 1, 1, 3, 3})
	f.Add([]byte("here/../.."))
	tokens := []string{"..", ".", "a", "b", "l0", "l1", "l2", "f", "a/b"}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 24 {
			data = data[:24]
		}
		entries := []Entry{
			{Path: "a", Type: "dir", Mode: "0755"},
			{Path: "a/b", Type: "dir", Mode: "0755"},
			{Path: "f", Type: "file", Mode: "0644", SHA256: strings.Repeat("0", 64)},
		}
		links := []string{"l0", "a/l1", "a/b/l2"}
		for i, l := range links {
			var parts []string
			for j := i; j < len(data); j += len(links) {
				parts = append(parts, tokens[int(data[j])%len(tokens)])
				if len(parts) == 4 {
					break
				}
			}
			if len(parts) == 0 {
				parts = []string{"."}
			}
			entries = append(entries, Entry{Path: l, Type: "symlink", Target: strings.Join(parts, "/")})
		}
		// Parents before children, as ReadIndex wants.
		ordered := []Entry{entries[0], entries[1], entries[2], entries[3], entries[4], entries[5]}
		base := t.TempDir()
		root := filepath.Join(base, "root")
		require.NoError(t, os.MkdirAll(filepath.Join(root, "a/b"), 0o755))
		writeRawIndex(t, root, ordered)
		if _, _, err := ReadIndex(root); err != nil {
			return
		}
		require.NoError(t, os.WriteFile(filepath.Join(root, "f"), nil, 0o644))
		for _, e := range ordered {
			if e.Type == "symlink" {
				require.NoError(t, os.Symlink(e.Target, filepath.Join(root, e.Path)))
			}
		}
		for _, e := range ordered {
			if e.Type != "symlink" {
				continue
			}
			real, err := filepath.EvalSymlinks(filepath.Join(root, e.Path))
			if err != nil {
				continue // dangling or a loop: opens nothing
			}
			rel, err := filepath.Rel(root, real)
			require.NoError(t, err)
			if rel == ".." || strings.HasPrefix(rel, "../") {
				t.Fatalf("accepted %s -> %s, which resolves to %s outside the payload (links: %+v)", e.Path, e.Target, real, ordered[3:])
			}
		}
	})
}

var errNoSpace = unix.ENOSPC
