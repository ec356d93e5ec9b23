package patches

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/patchdef"

	"github.com/infera/infera-exec/internal/digest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pkgTree writes files (relative to <site>/demo) and returns the site dir
// and a Location in which package demo resolves there at version 1.2.0.
func pkgTree(t *testing.T, files map[string]string) (string, *Location) {
	t.Helper()
	site := t.TempDir()
	for name, content := range files {
		p := filepath.Join(site, "demo", name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	dir := filepath.Join(site, "demo")
	return site, &Location{Packages: map[string]Package{"demo": {Name: "demo", Found: true, Dir: dir, Dirs: []string{dir}, Version: "1.2.0"}}}
}

func def(t *testing.T, id string, edits ...patchdef.Edit) *patchdef.Definition {
	t.Helper()
	d := &patchdef.Definition{ID: id, Summary: "test " + id, Package: "demo", Distribution: "demo", Edits: edits}
	require.NoError(t, d.Validate())
	return d
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

func TestApplyTwoFilesThenNoop(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{
		"a.py":                          "def f(x):\n    a, _ = x\n    return a\n",
		"sub/b.py":                      "def g():\n    register()\n",
		"__pycache__/a.cpython-312.pyc": "stale",
	})
	d := def(t, "two-files",
		patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"},
		patchdef.Edit{File: "sub/b.py", Anchor: "    register()\n", Replacement: "    pass  # registered later\n"},
	)
	set := &patchdef.Set{Defs: []*patchdef.Definition{d}}
	res := applySet(set, loc, options{})
	require.Len(t, res, 1)
	r := res[0]
	assert.Equal(t, patchdef.Pending, r.Before)
	assert.Equal(t, patchdef.Applied, r.State)
	assert.Equal(t, "applied", r.Action)
	assert.Equal(t, "def f(x):\n    a = x[0]\n    return a\n", read(t, filepath.Join(site, "demo/a.py")))
	assert.Equal(t, "def g():\n    pass  # registered later\n", read(t, filepath.Join(site, "demo/sub/b.py")))
	assert.NotEqual(t, r.Edits[0].SHA256Before, r.Edits[0].SHA256After)
	assert.NoFileExists(t, filepath.Join(site, "demo/__pycache__/a.cpython-312.pyc"), "bytecode of a patched module is removed")
	assert.Equal(t, []string{filepath.Join(site, "demo/__pycache__/a.cpython-312.pyc")}, r.Edits[0].PycsRemoved)

	// The second run finds it applied and writes nothing.
	fi1, err := os.Stat(filepath.Join(site, "demo/a.py"))
	require.NoError(t, err)
	time.Sleep(10 * time.Millisecond)
	res = applySet(set, loc, options{})
	assert.Equal(t, patchdef.Applied, res[0].Before)
	assert.Equal(t, "none", res[0].Action)
	fi2, err := os.Stat(filepath.Join(site, "demo/a.py"))
	require.NoError(t, err)
	assert.Equal(t, fi1.ModTime(), fi2.ModTime(), "a re-run does not touch the file")
	assert.Equal(t, fi1.Sys().(*syscall.Stat_t).Ino, fi2.Sys().(*syscall.Stat_t).Ino)
}

func TestDriftNeverHalfApplies(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{
		"a.py": "    a, _ = x\n",
		"b.py": "    register()\n    register()\n", // found twice, expected once
	})
	d := def(t, "drifted",
		patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"},
		patchdef.Edit{File: "b.py", Anchor: "    register()\n", Replacement: "    pass\n"},
	)
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.Drift, r.State)
	assert.Equal(t, "none", r.Action)
	assert.Contains(t, r.Why, "b.py: anchor found 2 times")
	assert.Equal(t, "    a, _ = x\n", read(t, filepath.Join(site, "demo/a.py")), "the pending file is not written either")
}

func TestHalfAppliedIsFinished(t *testing.T) {
	// As left by a start killed between its two renames.
	site, loc := pkgTree(t, map[string]string{
		"a.py": "    a = x[0]\n",
		"b.py": "    register()\n",
	})
	d := def(t, "resume",
		patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"},
		patchdef.Edit{File: "b.py", Anchor: "    register()\n", Replacement: "    pass\n"},
	)
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.Pending, r.Before)
	assert.Equal(t, patchdef.Applied, r.State)
	assert.Equal(t, "    pass\n", read(t, filepath.Join(site, "demo/b.py")))
}

func digestOf(s string) string { return digest.Bytes([]byte(s)) }

func TestSymlinkOutOfPackageIsRefused(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"inside.py": "x\n"})
	outside := filepath.Join(t.TempDir(), "victim.py")
	require.NoError(t, os.WriteFile(outside, []byte("    a, _ = x\n"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(site, "demo/a.py")))
	// A link that stays inside the package is followed.
	require.NoError(t, os.Symlink("inside.py", filepath.Join(site, "demo/alias.py")))

	d := def(t, "escape", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.Drift, r.State)
	assert.Contains(t, r.Why, "outside the package directory")
	assert.Equal(t, "    a, _ = x\n", read(t, outside))

	d2 := def(t, "alias", patchdef.Edit{File: "alias.py", Anchor: "x\n", Replacement: "y\n"})
	r = applySet(&patchdef.Set{Defs: []*patchdef.Definition{d2}}, loc, options{})[0]
	assert.Equal(t, patchdef.Applied, r.State)
	assert.Equal(t, "y\n", read(t, filepath.Join(site, "demo/inside.py")))
	fi, err := os.Lstat(filepath.Join(site, "demo/alias.py"))
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSymlink, "the link itself stays a link")
}

func TestVersionAndAbsence(t *testing.T) {
	_, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n"})
	d := def(t, "old-only", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	d.Versions = "< 1.0"
	require.NoError(t, d.Validate())
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.NotApplicable, r.State)
	assert.Contains(t, r.Why, "demo 1.2.0 is outside < 1.0")

	opt := def(t, "optional-file", patchdef.Edit{File: "gone.py", Anchor: "x", Replacement: "y", Optional: true})
	r = applySet(&patchdef.Set{Defs: []*patchdef.Definition{opt}}, loc, options{})[0]
	assert.Equal(t, patchdef.NotApplicable, r.State)

	must := def(t, "missing-file", patchdef.Edit{File: "gone.py", Anchor: "x", Replacement: "y"})
	r = applySet(&patchdef.Set{Defs: []*patchdef.Definition{must}}, loc, options{})[0]
	assert.Equal(t, patchdef.Drift, r.State)
	assert.Contains(t, r.Why, "file absent")

	loc.Packages["demo"] = Package{Name: "demo", Why: "demo is not importable"}
	r = applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.NotApplicable, r.State)
	assert.Equal(t, "demo is not importable", r.Why)
}

func TestDryRunWritesNothing(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n", "__pycache__/a.cpython-312.pyc": "x"})
	d := def(t, "dry", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{DryRun: true})[0]
	assert.Equal(t, "would-apply", r.Action)
	assert.Equal(t, patchdef.Pending, r.State)
	assert.Equal(t, "    a, _ = x\n", read(t, filepath.Join(site, "demo/a.py")))
	assert.FileExists(t, filepath.Join(site, "demo/__pycache__/a.cpython-312.pyc"))
	assert.NotEqual(t, r.Edits[0].SHA256Before, r.Edits[0].SHA256After, "the plan shows the hash the file would get")
}

func TestConflictingEditsAreDrift(t *testing.T) {
	// Both edits are pending in the file, but the first one consumes the
	// second one's anchor.
	site, loc := pkgTree(t, map[string]string{"a.py": "one\n"})
	d := def(t, "conflict",
		patchdef.Edit{File: "a.py", Anchor: "one\n", Replacement: "two\n"},
		patchdef.Edit{File: "a.py", Anchor: "one\n", Replacement: "three\n"},
	)
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.Drift, r.State)
	assert.Contains(t, r.Why, "disturb one another")
	assert.Equal(t, "one\n", read(t, filepath.Join(site, "demo/a.py")))
}

func TestUncheckedHashPycRemovedWhenApplied(t *testing.T) {
	// PEP 552 header: magic, flags, then hash or mtime+size.
	hdr := func(flags byte) string {
		return "\x00\x00\r\n" + string([]byte{flags, 0, 0, 0}) + strings.Repeat("\x00", 8)
	}
	site, loc := pkgTree(t, map[string]string{
		"a.py":                                "    a = x[0]\n",
		"__pycache__/a.cpython-312.pyc":       hdr(0b01), // unchecked hash: never revalidated
		"__pycache__/a.cpython-312.opt-1.pyc": hdr(0b11), // checked hash: revalidated
		"__pycache__/a.cpython-311.pyc":       hdr(0),    // timestamp: revalidated
	})
	d := def(t, "pyc", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.Applied, r.State)
	pc := filepath.Join(site, "demo/__pycache__")
	assert.NoFileExists(t, filepath.Join(pc, "a.cpython-312.pyc"))
	assert.FileExists(t, filepath.Join(pc, "a.cpython-312.opt-1.pyc"))
	assert.FileExists(t, filepath.Join(pc, "a.cpython-311.pyc"))
}

func TestOwnerAndModeKept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n"})
	p := filepath.Join(site, "demo/a.py")
	require.NoError(t, os.Chown(p, 1234, 5678))
	require.NoError(t, os.Chmod(p, 0o640))
	d := def(t, "owner", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	require.Equal(t, patchdef.Applied, applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0].State)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	st := fi.Sys().(*syscall.Stat_t)
	assert.Equal(t, uint32(1234), st.Uid)
	assert.Equal(t, uint32(5678), st.Gid)
}

// A patched file keeps its mode exactly, 000 included (root reads it).
func TestModeZeroKept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reading a mode-000 file needs root")
	}
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n"})
	p := filepath.Join(site, "demo/a.py")
	require.NoError(t, os.Chmod(p, 0))
	d := def(t, "mode0", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	require.Equal(t, patchdef.Applied, r.State, r.Why)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0), fi.Mode().Perm(), "mode 000 is kept, not made 0644")
	assert.Equal(t, "    a = x[0]\n", read(t, p))
}

// What a grouped run hands the record: a file's identity only where the
// file on disk is the content a patch's result is about.
func TestGroupedRunObserved(t *testing.T) {
	files := map[string]string{"conn.py": "class Conn:\n    pass\n\ndef send(x):\n    a = x[0]\n"}
	site, loc := pkgTree(t, files)
	defs := []*patchdef.Definition{
		def(t, "p1", patchdef.Edit{File: "conn.py", Anchor: "class Conn:\n", Replacement: "class Conn:\n    metrics = None\n"}),
		def(t, "p2", patchdef.Edit{File: "conn.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"}), // already applied
	}
	res, seen := apply(&patchdef.Set{Defs: defs}, loc, options{})
	require.Equal(t, "applied", res[0].Action)
	require.Equal(t, patchdef.Applied, res[1].State)
	assert.False(t, seen.incomplete, "p1 wrote what is on disk, p2 read it")
	now, ok := fileid.Lstat(filepath.Join(site, "demo/conn.py"))
	require.True(t, ok)
	require.NotEmpty(t, seen.files)
	assert.Equal(t, filepath.Join(site, "demo/conn.py"), seen.files[0].Path)
	assert.Equal(t, now, seen.files[0].ID, "the identity of the file written and read back")

	// p1's content was replaced by p2's in the same run: p1's result was
	// decided on a content no longer on disk. Decided again on the content
	// written and read back it is the same, so the run is recorded, with
	// the identity of that content.
	files, defs = threeOnOneFile(t)
	site, loc = pkgTree(t, files)
	_, seen = apply(&patchdef.Set{Defs: defs}, loc, options{})
	assert.False(t, seen.incomplete)
	now, _ = fileid.Lstat(filepath.Join(site, "demo/conn.py"))
	require.NotEmpty(t, seen.files)
	assert.Equal(t, now, seen.files[0].ID)

	// A later patch that undoes an earlier one's edit: the earlier one,
	// decided again on what is on disk, is not what its result says, so
	// the run is not recorded.
	_, loc = pkgTree(t, map[string]string{"conn.py": "def send(x):\n    a, _ = x\n    return a\n"})
	defs = []*patchdef.Definition{
		def(t, "p1", patchdef.Edit{File: "conn.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"}),
		def(t, "p2", patchdef.Edit{File: "conn.py", Anchor: "    a = x[0]\n", Replacement: "    a, _ = x\n"}),
	}
	res, seen = apply(&patchdef.Set{Defs: defs}, loc, options{})
	require.Equal(t, "applied", res[0].Action, res[0].Why)
	assert.True(t, seen.incomplete, "p1 is not in force in what is on disk")
}

// A guard whose file cannot be read leaves the patch undecided (drift),
// never quietly not-applicable, and the run is not recorded: once the file
// is readable, the next start decides the patch afresh.
func TestUnreadableGuardIsDriftNotRecorded(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n"})
	outside := filepath.Join(t.TempDir(), "g.py")
	require.NoError(t, os.WriteFile(outside, []byte("def f(x):\n"), 0o644))
	guard := filepath.Join(site, "demo/g.py")
	require.NoError(t, os.Symlink(outside, guard))

	d := def(t, "guarded", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	d.Guards = []patchdef.Guard{{File: "g.py", Contains: "def f("}}
	set := &patchdef.Set{Defs: []*patchdef.Definition{d}}
	opt := options{StateDir: t.TempDir()}

	r := applySet(set, loc, opt)[0]
	assert.Equal(t, patchdef.Drift, r.State)
	assert.Contains(t, r.Why, "guard g.py: ")
	assert.Contains(t, r.Why, "outside the package directory")
	assert.Equal(t, "    a, _ = x\n", read(t, filepath.Join(site, "demo/a.py")))
	records, _ := filepath.Glob(filepath.Join(opt.StateDir, "patches-*.json"))
	assert.Empty(t, records, "a run that could not read a file vouches for nothing")

	require.NoError(t, os.Remove(guard))
	require.NoError(t, os.WriteFile(guard, []byte("def f(x):\n"), 0o644))
	r = applySet(set, loc, opt)[0]
	assert.Equal(t, patchdef.Applied, r.State, r.Why)
	assert.Equal(t, "    a = x[0]\n", read(t, filepath.Join(site, "demo/a.py")))
}
