package patches

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/commit"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/source"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
	stage := commit.Stage
	commit.Stage = func(path, content string, was identity) (*atomicfile.Staged, error) {
		if filepath.Base(path) == "b.py" {
			return nil, errors.New("replace " + path + ": no space left on device")
		}
		return stage(path, content, was)
	}
	t.Cleanup(func() { commit.Stage = stage })
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
	rename := commit.Rename
	commit.Rename = f
	t.Cleanup(func() { commit.Rename = rename })
}

// countRestores counts the writes that put a file's original back.
func countRestores(t *testing.T, n *int) {
	commit.Restore = func(path string, data []byte, was identity) error {
		*n++
		return commit.WriteBytes(path, data, was)
	}
	t.Cleanup(func() { commit.Restore = commit.WriteBytes })
}

// countStages counts the files staged (written) by a run; staging runs in
// several goroutines at once.
func countStages(t *testing.T) *atomic.Int32 {
	var n atomic.Int32
	stage := commit.Stage
	commit.Stage = func(path, content string, was identity) (*atomicfile.Staged, error) {
		n.Add(1)
		return stage(path, content, was)
	}
	t.Cleanup(func() { commit.Stage = stage })
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
	commit.BeforeRename = func(path string) {
		calls++
		if path == other && calls <= 2 {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			f.WriteString("# the other writer's line\n")
			f.Close()
		}
	}
	t.Cleanup(func() { commit.BeforeRename = nil })
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
		id, ok := source.Holds(p, content, buf)
		require.True(t, ok, "buffer of %d", size)
		want, _ := fileid.Lstat(p)
		assert.Equal(t, want, id)
		_, ok = source.Holds(p, content[:len(content)-1]+"X", buf)
		assert.False(t, ok, "other bytes matched (buffer of %d)", size)
		_, ok = source.Holds(p, content+"more", buf)
		assert.False(t, ok, "a longer plan matched")
		_, ok = source.Holds(p, content[:10], buf)
		assert.False(t, ok, "a shorter plan matched")
	}
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	_, ok := source.Holds(fifo, "", make([]byte, 8))
	assert.False(t, ok, "a FIFO matched")
	_, ok = source.Holds(filepath.Join(dir, "missing"), "", make([]byte, 8))
	assert.False(t, ok)
}

// A file that does not read back as written right after the rename (here
// another writer replaces it at once) is not reported applied, not
// restored over the other writer, and not recorded.
func TestReadBackMismatchIsNotApplied(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n"})
	rename := commit.Rename
	commit.Rename = func(s *atomicfile.Staged) error {
		if err := rename(s); err != nil {
			return err
		}
		return os.WriteFile(s.Path(), []byte("theirs\n"), 0o644)
	}
	t.Cleanup(func() { commit.Rename = rename })

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
	stage := commit.Stage
	commit.Stage = func(path, content string, was identity) (*atomicfile.Staged, error) {
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
	t.Cleanup(func() { commit.Stage, planningHook = stage, nil })
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
	stage := commit.Stage
	commit.Stage = func(path, content string, was identity) (*atomicfile.Staged, error) {
		mu.Lock()
		contents = append(contents, content)
		mu.Unlock()
		return stage(path, content, was)
	}
	t.Cleanup(func() { commit.Stage = stage })
	res := applySet(set, loc, options{})
	want := "    a = x[0]\n    pass\n"
	assert.Equal(t, want, read(t, filepath.Join(site, "demo/real/m.py")), "both edits, as the run planned them: %+v", res)
	assert.Equal(t, []string{"    a = x[0]\n    register()\n", want}, contents, "staged early after the first patch, then again with what is written")
	assert.Empty(t, temporaries(t, site))
}
