package patches

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/patches/patchdef"

	"github.com/infera/infera-exec/internal/atomicfile"
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

func TestFailedWriteRestores(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{
		"a.py": "    a, _ = x\n",
		"b.py": "    register()\n",
	})
	d := def(t, "rollback",
		patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"},
		patchdef.Edit{File: "b.py", Anchor: "    register()\n", Replacement: "    pass\n"},
	)
	renames, restores := 0, 0
	failRename(t, func(s *atomicfile.Staged) error {
		renames++
		if renames == 2 {
			return errors.New("replace " + s.Path() + ": read-only file system")
		}
		return s.Commit()
	})
	countRestores(t, &restores)
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, "failed", r.Action)
	assert.Equal(t, patchdef.Pending, r.State, "nothing changed: the patch is still pending")
	assert.Contains(t, r.Why, "read-only file system")
	assert.Equal(t, "    a, _ = x\n", read(t, filepath.Join(site, "demo/a.py")), "the first file was restored")
	assert.Equal(t, "    register()\n", read(t, filepath.Join(site, "demo/b.py")))
	assert.Equal(t, 2, renames, "two renames")
	assert.Equal(t, 1, restores, "one restore")
	assert.Empty(t, temporaries(t, site), "the second file's staged content is removed")
}

// A file that cannot be staged fails its group before anything is renamed:
// nothing to restore, nothing left behind.
func TestFailedStageRenamesNothing(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{
		"a.py": "    a, _ = x\n",
		"b.py": "    register()\n",
	})
	d := def(t, "rollback",
		patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"},
		patchdef.Edit{File: "b.py", Anchor: "    register()\n", Replacement: "    pass\n"},
	)
	stage := stageFile
	stageFile = func(path, content string, was identity) (*atomicfile.Staged, error) {
		if filepath.Base(path) == "b.py" {
			return nil, errors.New("replace " + path + ": no space left on device")
		}
		return stage(path, content, was)
	}
	t.Cleanup(func() { stageFile = stage })
	renamed, restores := 0, 0
	failRename(t, func(s *atomicfile.Staged) error { renamed++; return s.Commit() })
	countRestores(t, &restores)
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, "failed", r.Action)
	assert.Equal(t, patchdef.Pending, r.State)
	assert.Contains(t, r.Why, "no space left on device")
	assert.Equal(t, "    a, _ = x\n", read(t, filepath.Join(site, "demo/a.py")))
	assert.Equal(t, "    register()\n", read(t, filepath.Join(site, "demo/b.py")))
	assert.Zero(t, renamed)
	assert.Zero(t, restores)
	assert.Empty(t, temporaries(t, site))
}

// failRename replaces the rename of staged files for one test.
func failRename(t *testing.T, f func(*atomicfile.Staged) error) {
	rename := renameFile
	renameFile = f
	t.Cleanup(func() { renameFile = rename })
}

// countRestores counts the writes that put a file's original back.
func countRestores(t *testing.T, n *int) {
	writeFile = func(path string, data []byte, was identity) error {
		*n++
		return atomicWrite(path, data, was)
	}
	t.Cleanup(func() { writeFile = atomicWrite })
}

// countStages counts the files staged (written) by a run; staging runs in
// several goroutines at once.
func countStages(t *testing.T) *atomic.Int32 {
	var n atomic.Int32
	stage := stageFile
	stageFile = func(path, content string, was identity) (*atomicfile.Staged, error) {
		n.Add(1)
		return stage(path, content, was)
	}
	t.Cleanup(func() { stageFile = stage })
	return &n
}

func temporaries(t *testing.T, site string) []string {
	t.Helper()
	var left []string
	require.NoError(t, filepath.WalkDir(site, func(p string, e fs.DirEntry, err error) error {
		if err == nil && strings.Contains(e.Name(), ".tmp-") {
			left = append(left, p)
		}
		return err
	}))
	return left
}

// onePatchFile is three patches on one module, each edit somewhere else.
func threeOnOneFile(t *testing.T) (map[string]string, []*patchdef.Definition) {
	files := map[string]string{
		"conn.py":  "class Conn:\n    pass\n\ndef send(x):\n    a, _ = x\n\ndef recv():\n    register()\n",
		"other.py": "EVENT = None\n",
	}
	return files, []*patchdef.Definition{
		def(t, "p1", patchdef.Edit{File: "conn.py", Anchor: "class Conn:\n", Replacement: "class Conn:\n    metrics = None\n"}),
		def(t, "p2", patchdef.Edit{File: "conn.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"}),
		def(t, "p3",
			patchdef.Edit{File: "conn.py", Anchor: "    register()\n", Replacement: "    pass  # registered later\n"},
			patchdef.Edit{File: "other.py", Anchor: "EVENT = None\n", Replacement: "EVENT = object()\n"}),
	}
}

// Patches on one file are planned in memory one after the other and the
// file is written once, with the bytes (and results) that applying them
// one by one gives.
func TestPatchesOnOneFileWriteItOnce(t *testing.T) {
	files, defs := threeOnOneFile(t)
	refSite, refLoc := pkgTree(t, files)
	var want []Result
	for _, d := range defs {
		want = append(want, applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, refLoc, options{})...)
	}

	site, loc := pkgTree(t, files)
	stages := countStages(t)
	got := applySet(&patchdef.Set{Defs: defs}, loc, options{})
	assert.Equal(t, int32(2), stages.Load(), "conn.py and other.py each written once")
	for _, name := range []string{"conn.py", "other.py"} {
		assert.Equal(t, read(t, filepath.Join(refSite, "demo", name)), read(t, filepath.Join(site, "demo", name)), name)
	}
	require.Len(t, got, 3)
	for i := range got {
		assert.Equal(t, "applied", got[i].Action, got[i].Why)
		assert.Equal(t, patchdef.Pending, got[i].Before)
		assert.Equal(t, patchdef.Applied, got[i].State)
		require.Len(t, got[i].Edits, len(want[i].Edits))
		for j := range got[i].Edits {
			assert.Equal(t, want[i].Edits[j].SHA256Before, got[i].Edits[j].SHA256Before, "%s edit %d", got[i].ID, j)
			assert.Equal(t, want[i].Edits[j].SHA256After, got[i].Edits[j].SHA256After, "%s edit %d", got[i].ID, j)
		}
	}
	assert.NotEqual(t, got[0].Edits[0].SHA256Before, got[1].Edits[0].SHA256Before, "p2 found p1's content")
	assert.Equal(t, got[0].Edits[0].SHA256After, got[1].Edits[0].SHA256Before)
	assert.Empty(t, temporaries(t, site))

	// A dry run decides each against the files as they are.
	site, loc = pkgTree(t, files)
	dry := applySet(&patchdef.Set{Defs: defs}, loc, options{DryRun: true})
	for _, r := range dry {
		assert.Equal(t, "would-apply", r.Action)
		assert.Equal(t, digestOf(files["conn.py"]), r.Edits[0].SHA256Before, r.ID)
	}
	assert.Equal(t, files["conn.py"], read(t, filepath.Join(site, "demo/conn.py")))
}

// A group whose commit fails changes none of its files and fails all its
// patches; a group on other files is unaffected.
func TestFailedGroupFailsAllItsPatches(t *testing.T) {
	files := map[string]string{
		"conn.py":  "class Conn:\n    pass\n\ndef send(x):\n    a, _ = x\n",
		"other.py": "EVENT = None\n",
	}
	site, loc := pkgTree(t, files)
	defs := []*patchdef.Definition{
		def(t, "p1", patchdef.Edit{File: "conn.py", Anchor: "class Conn:\n", Replacement: "class Conn:\n    metrics = None\n"}),
		def(t, "p2", patchdef.Edit{File: "conn.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"}),
		def(t, "p3", patchdef.Edit{File: "other.py", Anchor: "EVENT = None\n", Replacement: "EVENT = object()\n"}),
	}
	failRename(t, func(s *atomicfile.Staged) error {
		if filepath.Base(s.Path()) == "conn.py" {
			return errors.New("replace " + s.Path() + ": read-only file system")
		}
		return s.Commit()
	})
	stages := countStages(t)
	res := applySet(&patchdef.Set{Defs: defs}, loc, options{})
	assert.Equal(t, int32(2), stages.Load(), "conn.py staged once, other.py once")
	assert.Equal(t, files["conn.py"], read(t, filepath.Join(site, "demo/conn.py")), "unchanged")
	for _, r := range res[:2] {
		assert.Equal(t, "failed", r.Action, r.ID)
		assert.Equal(t, patchdef.Pending, r.State, r.ID)
		assert.Contains(t, r.Why, "read-only file system", r.ID)
		assert.Equal(t, r.Edits[0].SHA256Before, r.Edits[0].SHA256After, "%s: nothing written", r.ID)
	}
	assert.Equal(t, "applied", res[2].Action, "another group is unaffected")
	assert.Equal(t, "EVENT = object()\n", read(t, filepath.Join(site, "demo/other.py")))
	assert.Empty(t, temporaries(t, site))
}

// A patch that writes nothing but read a file as an earlier patch planned
// it is decided again on the file as it is when that write fails.
func TestDependentOfFailedGroupIsDecidedAgain(t *testing.T) {
	files := map[string]string{"conn.py": "class Conn:\n    pass\n\ndef send(x):\n    a = x[0]\n"}
	site, loc := pkgTree(t, files)
	defs := []*patchdef.Definition{
		def(t, "p1", patchdef.Edit{File: "conn.py", Anchor: "class Conn:\n", Replacement: "class Conn:\n    metrics = None\n"}),
		def(t, "p2", patchdef.Edit{File: "conn.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"}), // already applied
	}
	failRename(t, func(s *atomicfile.Staged) error { return errors.New("replace " + s.Path() + ": read-only file system") })
	res := applySet(&patchdef.Set{Defs: defs}, loc, options{})
	assert.Equal(t, "failed", res[0].Action)
	assert.Equal(t, "none", res[1].Action)
	assert.Equal(t, patchdef.Applied, res[1].State)
	assert.Equal(t, digestOf(files["conn.py"]), res[1].Edits[0].SHA256Before, "decided on the file as it is")
	assert.Equal(t, files["conn.py"], read(t, filepath.Join(site, "demo/conn.py")))
}

// Another writer changing the second file of a group while it is being
// committed: the first file is restored, the group read and planned
// afresh, and both patched on top of the other writer's change.
func TestConcurrentWriterInGroup(t *testing.T) {
	files, defs := threeOnOneFile(t)
	site, loc := pkgTree(t, files)
	other := filepath.Join(site, "demo/other.py")
	calls, restores := 0, 0
	beforeRenameHook = func(path string) {
		calls++
		if path == other && calls <= 2 {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			f.WriteString("# the other writer's line\n")
			f.Close()
		}
	}
	t.Cleanup(func() { beforeRenameHook = nil })
	countRestores(t, &restores)
	stages := countStages(t)
	res := applySet(&patchdef.Set{Defs: defs}, loc, options{})
	for _, r := range res {
		assert.Equal(t, patchdef.Applied, r.State, "%s: %s", r.ID, r.Why)
		assert.Equal(t, "applied", r.Action, r.ID)
	}
	assert.Equal(t, 1, restores, "conn.py, renamed first, was restored")
	assert.Equal(t, int32(4), stages.Load(), "each file staged twice")
	assert.Equal(t, "EVENT = object()\n# the other writer's line\n", read(t, other))
	assert.Contains(t, read(t, filepath.Join(site, "demo/conn.py")), "    metrics = None\n")
	assert.Empty(t, temporaries(t, site))
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

// holdLock takes the flock of dir from this process, as another process
// (of any uid that can open the directory) can.
func holdLock(t *testing.T, dir string) (release func()) {
	t.Helper()
	f, err := os.Open(dir)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	t.Cleanup(func() { f.Close() })
	return func() { f.Close() }
}

// Issue: whoever holds the package directory's flock held every start for
// 60 s per definition, and each failed patch read as drift. Now a start
// takes one lock per directory within one bounded wait, says what it
// found (no guess at who holds it), and decides the patches without
// writing: what is in force stays in force, what needs writing is pending.
func TestLockedByAnotherProcess(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n", "b.py": "    b()\n", "c.py": "    c()\n", "d.py": "    done = 1\n"})
	release := holdLock(t, filepath.Join(site, "demo"))
	defs := []*patchdef.Definition{
		def(t, "pa", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"}),
		def(t, "pb", patchdef.Edit{File: "b.py", Anchor: "    b()\n", Replacement: "    b(1)\n"}),
		def(t, "pc", patchdef.Edit{File: "c.py", Anchor: "    c()\n", Replacement: "    c(1)\n"}),
		def(t, "pd", patchdef.Edit{File: "d.py", Anchor: "    done = 0\n", Replacement: "    done = 1\n"}), // already applied
	}
	const wait = 300 * time.Millisecond
	start := time.Now()
	res := applySet(&patchdef.Set{Defs: defs}, loc, options{LockTimeout: wait})
	took := time.Since(start)
	msg := "the package directory " + filepath.Join(site, "demo") + " is locked (flock) by another process; waited 300ms"
	for _, r := range res[:3] {
		assert.Equal(t, "failed", r.Action, r.ID)
		assert.Equal(t, patchdef.Pending, r.State, "%s: not written, and not drift: %s", r.ID, r.Why)
		assert.Contains(t, r.Why, msg, r.ID)
	}
	assert.Equal(t, patchdef.Applied, res[3].State, "already in force without the lock: %s", res[3].Why)
	assert.Equal(t, "none", res[3].Action)
	assert.Less(t, took, 3*wait, "one bounded wait for the run, not one per definition")
	assert.Equal(t, "    a, _ = x\n", read(t, filepath.Join(site, "demo/a.py")))

	// Zero does not wait at all, and says so.
	r := applySet(&patchdef.Set{Defs: defs[:1]}, loc, options{})[0]
	assert.Contains(t, r.Why, "did not wait (INFERA_PATCH_LOCK_TIMEOUT=0)")

	release()
	for _, r := range applySet(&patchdef.Set{Defs: defs}, loc, options{}) {
		assert.Equal(t, patchdef.Applied, r.State, "%s: %s", r.ID, r.Why)
	}
}

// A start asked to stop while it waits for a lock stops waiting, and the
// message says how long it waited, not the bound it would have waited.
func TestLockWaitEndsAtAStop(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n"})
	holdLock(t, filepath.Join(site, "demo"))
	stop := make(chan struct{})
	close(stop)
	defs := []*patchdef.Definition{def(t, "pa", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})}
	r := applySet(&patchdef.Set{Defs: defs}, loc, options{LockTimeout: 20 * time.Second, Stop: stop})[0]
	assert.Equal(t, patchdef.Pending, r.State, r.Why)
	assert.NotContains(t, r.Why, "waited 20s")
	assert.Regexp(t, `locked \(flock\) by another process; stopped waiting after [0-9.]+m?s of 20s \(INFERA_PATCH_LOCK_TIMEOUT\): the start was asked to stop`, r.Why)
	assert.Equal(t, "    a, _ = x\n", read(t, filepath.Join(site, "demo/a.py")))
}

// waitedFor names the time waited when a stop ended the wait, and the
// bound when the wait ran its course.
func TestWaitedFor(t *testing.T) {
	assert.Equal(t, "stopped waiting after 1.002s of 20s (INFERA_PATCH_LOCK_TIMEOUT): the start was asked to stop", waitedFor(1002*time.Millisecond+300*time.Microsecond, 20*time.Second, true))
	assert.Equal(t, "waited 20s (INFERA_PATCH_LOCK_TIMEOUT)", waitedFor(20*time.Second+3*time.Millisecond, 20*time.Second, false))
	assert.Equal(t, "did not wait (INFERA_PATCH_LOCK_TIMEOUT=0)", waitedFor(0, 0, false))
}

// A start under a held lock warns and starts the worker unpatched, or is
// refused (65) when a patch it cannot write is required.
func TestLockedRequiredRefuses(t *testing.T) {
	py := debianPython(t)
	site := t.TempDir()
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	write(t, filepath.Join(site, "demo/a.py"), "    a, _ = x\n")
	payload := t.TempDir()
	write(t, filepath.Join(payload, "patches/demo/fix.toml"), "id = \"demo-fix\"\nsummary = \"s\"\npackage = \"demo\"\ndistribution = \"demo\"\n[[guard]]\nfile = \"a.py\"\n[[edit]]\nfile = \"a.py\"\nanchor = \"    a, _ = x\\n\"\nreplacement = \"    a = x[0]\\n\"\n")
	holdLock(t, filepath.Join(site, "demo"))
	for _, required := range []bool{false, true} {
		env := environ.New([]string{"PAYLOAD_ROOT=" + payload, "INFERA_PATCH_LOCK_TIMEOUT=0.2"})
		if required {
			env.Set("INFERA_REQUIRE_PATCHES", "demo-fix")
		}
		cfg, warns, err := config.Load(env, "/nonexistent/bin/infera-exec", "/", config.Flags{})
		require.NoError(t, err)
		require.Empty(t, warns)
		var logs strings.Builder
		out, err := Run(t.Context(), Input{Config: cfg, Python: py, Env: envWith("PYTHONPATH", site), Worker: &launch.Outcome{Cwd: "/"},
			Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if !required {
			require.NoError(t, err)
			assert.Contains(t, logs.String(), "level=WARN")
			assert.Contains(t, logs.String(), "is locked (flock) by another process; waited 200ms")
			assert.Contains(t, out.Summary, "1 pending")
			continue
		}
		var req *RequiredError
		require.True(t, errors.As(err, &req), "%v", err)
		assert.Equal(t, 65, req.ExitCode())
		assert.Contains(t, err.Error(), "required patch demo-fix is pending: the package directory")
	}
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

// The read-back compares the file with what was planned through a small
// buffer, chunk by chunk: equal bytes give the file's identity, anything
// else (other bytes, another length, not a regular file) no match.
func TestReadsAs(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.py")
	content := strings.Repeat("line of source\n", 100)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	for _, size := range []int{1, 3, 64 << 10} {
		buf := make([]byte, size)
		id, ok := readsAs(p, content, buf)
		require.True(t, ok, "buffer of %d", size)
		want, _ := fileid.Lstat(p)
		assert.Equal(t, want, id)
		_, ok = readsAs(p, content[:len(content)-1]+"X", buf)
		assert.False(t, ok, "other bytes matched (buffer of %d)", size)
		_, ok = readsAs(p, content+"more", buf)
		assert.False(t, ok, "a longer plan matched")
		_, ok = readsAs(p, content[:10], buf)
		assert.False(t, ok, "a shorter plan matched")
	}
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	_, ok := readsAs(fifo, "", make([]byte, 8))
	assert.False(t, ok, "a FIFO matched")
	_, ok = readsAs(filepath.Join(dir, "missing"), "", make([]byte, 8))
	assert.False(t, ok)
}

// The causes a deployment can fix get the fix; a file's own trouble does not.
func TestWriteFix(t *testing.T) {
	wrap := func(errno syscall.Errno) error {
		return fmt.Errorf("replace /e/f.py: create temporary file: %w", &fs.PathError{Op: "open", Path: "/e/.f.py.tmp-1", Err: errno})
	}
	assert.Contains(t, writeFix(wrap(syscall.EROFS)), "read-only filesystem: apply the fix when the image is built")
	assert.Contains(t, writeFix(wrap(syscall.EACCES)), fmt.Sprintf("uid %d may not write", os.Geteuid()))
	assert.Contains(t, writeFix(wrap(syscall.EPERM)), "run the start as the engine's owner")
	assert.Contains(t, writeFix(wrap(syscall.ENOSPC)), "is full")
	assert.Contains(t, writeFix(wrap(syscall.EDQUOT)), "is full")
	assert.Empty(t, writeFix(wrap(syscall.EIO)))
	assert.Empty(t, writeFix(errors.New("changed while it was being patched")))
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

// A file that does not read back as written right after the rename (here
// another writer replaces it at once) is not reported applied, not
// restored over the other writer, and not recorded.
func TestReadBackMismatchIsNotApplied(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n"})
	rename := renameFile
	renameFile = func(s *atomicfile.Staged) error {
		if err := rename(s); err != nil {
			return err
		}
		return os.WriteFile(s.Path(), []byte("theirs\n"), 0o644)
	}
	t.Cleanup(func() { renameFile = rename })

	d := def(t, "fix", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	opt := options{StateDir: t.TempDir()}
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, opt)[0]
	assert.NotEqual(t, patchdef.Applied, r.State)
	assert.Equal(t, "failed", r.Action)
	assert.Contains(t, r.Why, "does not hold what was written")
	assert.Equal(t, "theirs\n", read(t, filepath.Join(site, "demo/a.py")))
	records, _ := filepath.Glob(filepath.Join(opt.StateDir, "patches-*.json"))
	assert.Empty(t, records)
}

// A file whose content no later patch of the run may change is staged
// while the later patches are planned: here a.py, once the second patch
// (which may edit it, but finds nothing to do) is planned, so the third
// patch's planning begins only once a.py is being staged. Each file is
// staged once, with its final content.
func TestFinalFileStagedWhileLaterPatchesArePlanned(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n", "b.py": "    register()\n"})
	set := &patchdef.Set{Defs: []*patchdef.Definition{
		def(t, "first", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"}),
		def(t, "second", patchdef.Edit{File: "a.py", Anchor: "    b, _ = y\n", Replacement: "    b = y[0]\n"}),
		def(t, "third", patchdef.Edit{File: "b.py", Anchor: "    register()\n", Replacement: "    pass\n"}),
	}}
	started := make(chan struct{})
	var mu sync.Mutex
	staged := map[string]string{}
	stage := stageFile
	stageFile = func(path, content string, was identity) (*atomicfile.Staged, error) {
		mu.Lock()
		staged[filepath.Base(path)] += content
		mu.Unlock()
		if filepath.Base(path) == "a.py" {
			close(started)
		}
		return stage(path, content, was)
	}
	planningHook = func(i int) {
		if i == 2 {
			select {
			case <-started:
			case <-time.After(time.Minute): // a guard against a hang, not a budget
				t.Error("a.py was not staged while the third patch was planned")
			}
		}
	}
	t.Cleanup(func() { stageFile, planningHook = stage, nil })
	res := applySet(set, loc, options{})
	assert.Equal(t, "applied", res[0].Action, res[0].Why)
	assert.Equal(t, "none", res[1].Action, "%s: %s", res[1].State, res[1].Why)
	assert.Equal(t, "applied", res[2].Action, res[2].Why)
	assert.Equal(t, map[string]string{"a.py": "    a = x[0]\n", "b.py": "    pass\n"}, staged, "each file staged once, with what is written")
	assert.Equal(t, "    a = x[0]\n", read(t, filepath.Join(site, "demo/a.py")))
	assert.Equal(t, "    pass\n", read(t, filepath.Join(site, "demo/b.py")))
	assert.Empty(t, temporaries(t, site))
}

// A file staged early that a later patch changes after all (it reaches the
// file by another path, through a link in the package) is staged again
// with the content the run writes; the early stage leaves nothing behind.
func TestEarlyStageOfAFileChangedAgainIsDiscarded(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"real/m.py": "    a, _ = x\n    register()\n"})
	require.NoError(t, os.Symlink("real", filepath.Join(site, "demo", "alias")))
	set := &patchdef.Set{Defs: []*patchdef.Definition{
		def(t, "first", patchdef.Edit{File: "real/m.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"}),
		def(t, "second", patchdef.Edit{File: "alias/m.py", Anchor: "    register()\n", Replacement: "    pass\n"}),
	}}
	var mu sync.Mutex
	var contents []string
	stage := stageFile
	stageFile = func(path, content string, was identity) (*atomicfile.Staged, error) {
		mu.Lock()
		contents = append(contents, content)
		mu.Unlock()
		return stage(path, content, was)
	}
	t.Cleanup(func() { stageFile = stage })
	res := applySet(set, loc, options{})
	want := "    a = x[0]\n    pass\n"
	assert.Equal(t, want, read(t, filepath.Join(site, "demo/real/m.py")), "both edits, as the run planned them: %+v", res)
	assert.Equal(t, []string{"    a = x[0]\n    register()\n", want}, contents, "staged early after the first patch, then again with what is written")
	assert.Empty(t, temporaries(t, site))
}
