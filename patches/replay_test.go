package patches

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/patches/commit"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/record"
)

// The pristine module of the replay tests, and the two replacements: the
// one the recorded run wrote, and the one the definition asks for after
// the record was written (its digest kept, so the record still matches).
const (
	replayPristine = "def f(x):\n    a, _ = x\n    return a\n"
	replayRecorded = "def f(x):\n    a = x[0]\n    return a\n"
	replayPlanned  = "def f(x):\n    a = x[1]\n    return a\n"
)

// replayed runs a first start on package demo (two modules, one patch
// editing both) with a state directory, then puts the pristine files back
// as a new container layer of the same image shows them (new inodes, the
// same sizes, modes, mtimes and bytes), starts there once (which plans,
// writes, and keeps the blob), and puts them back again. The definition
// then asks for another replacement under the same digest: a start that
// plans writes replayPlanned, one that replays the record writes
// replayRecorded.
func replayed(t *testing.T) (site string, set *patchdef.Set, loc *Location, opt options) {
	t.Helper()
	site, loc = pkgTree(t, map[string]string{"a.py": replayPristine, "b.py": "# b\n" + replayPristine})
	loc.Fingerprint = "probe-1"
	edit := func(repl string) []patchdef.Edit {
		return []patchdef.Edit{
			{File: "a.py", Anchor: "    a, _ = x\n", Replacement: repl},
			{File: "b.py", Anchor: "    a, _ = x\n", Replacement: repl},
		}
	}
	set = &patchdef.Set{Defs: []*patchdef.Definition{def(t, "fix", edit("    a = x[0]\n")...)}, Digest: "defs-1"}
	opt = options{StateDir: t.TempDir(), PyMinor: 12}
	var before []os.FileInfo
	for _, name := range []string{"a.py", "b.py"} {
		fi, err := os.Stat(filepath.Join(site, "demo", name))
		require.NoError(t, err)
		before = append(before, fi)
	}
	r := applySet(set, loc, opt)[0]
	require.Equal(t, "applied", r.Action, r.Why)
	newLayer := func() {
		for i, name := range []string{"a.py", "b.py"} {
			p := filepath.Join(site, "demo", name)
			content := replayPristine
			if name == "b.py" {
				content = "# b\n" + replayPristine
			}
			require.NoError(t, os.WriteFile(p+".layer", []byte(content), 0o644))
			require.NoError(t, os.Chtimes(p+".layer", before[i].ModTime(), before[i].ModTime()))
			require.NoError(t, os.Rename(p+".layer", p))
		}
	}
	newLayer()
	r = applySet(set, loc, opt)[0]
	require.Equal(t, "applied", r.Action, r.Why)
	require.False(t, r.Replayed, "the first restart on a new layer has no blob yet")
	newLayer()
	set.Defs[0] = def(t, "fix", edit("    a = x[1]\n")...)
	return site, set, loc, opt
}

// A start on a new container layer of the same image writes what the
// recorded run wrote, from the record, without planning, and reports what
// that run reported; the start after it takes the record.
func TestReplayWritesWhatTheRecordedRunWrote(t *testing.T) {
	site, set, loc, opt := replayed(t)
	r := applySet(set, loc, opt)[0]
	assert.Equal(t, "applied", r.Action, r.Why)
	assert.Equal(t, patchdef.Pending, r.Before)
	assert.Equal(t, patchdef.Applied, r.State)
	assert.False(t, r.Recorded, "this start wrote the files")
	assert.True(t, r.Replayed)
	assert.Equal(t, replayRecorded, read(t, filepath.Join(site, "demo/a.py")), "the recorded content, not a new plan")
	assert.Equal(t, "# b\n"+replayRecorded, read(t, filepath.Join(site, "demo/b.py")))
	require.Len(t, r.Edits, 2)
	assert.NotEqual(t, r.Edits[0].SHA256Before, r.Edits[0].SHA256After)
	left, _ := filepath.Glob(filepath.Join(site, "demo/.*.tmp-*"))
	assert.Empty(t, left)

	r = applySet(set, loc, opt)[0]
	assert.True(t, r.Recorded, "the record renewed by the replay: %s", r.Why)
	assert.Equal(t, patchdef.Applied, r.State)
}

// Anything the record cannot vouch for runs the full check, which plans
// (and so writes replayPlanned), and leaves no file half-done.
func TestReplayFallsBackToTheFullCheck(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, site string, opt options)
	}{
		{"one file's bytes differ, with its size and mtime kept", func(t *testing.T, site string, _ options) {
			p := filepath.Join(site, "demo/b.py")
			fi, _ := os.Stat(p)
			require.NoError(t, os.WriteFile(p, []byte("# c\n"+replayPristine), 0o644))
			require.NoError(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
		}},
		{"one file written already, the other pristine", func(t *testing.T, site string, _ options) {
			write(t, filepath.Join(site, "demo/b.py"), "# b\n"+replayRecorded)
		}},
		{"the blob is gone", func(t *testing.T, _ string, opt options) {
			blobs, _ := filepath.Glob(filepath.Join(opt.StateDir, "patches-*.blob"))
			require.Len(t, blobs, 1)
			require.NoError(t, os.Remove(blobs[0]))
		}},
		{"the blob's written content differs", func(t *testing.T, _ string, opt options) {
			flipBlob(t, opt, func(b []byte) int { return strings.Index(string(b), "x[0]") })
		}},
		{"the blob's results differ", func(t *testing.T, _ string, opt options) {
			flipBlob(t, opt, func(b []byte) int { return strings.LastIndex(string(b), `"applied"`) + 1 })
		}},
		{"the blob is torn", func(t *testing.T, _ string, opt options) {
			blobs, _ := filepath.Glob(filepath.Join(opt.StateDir, "patches-*.blob"))
			require.Len(t, blobs, 1)
			require.NoError(t, os.Truncate(blobs[0], 40))
		}},
		{"the blob can be written by others", func(t *testing.T, _ string, opt options) {
			blobs, _ := filepath.Glob(filepath.Join(opt.StateDir, "patches-*.blob"))
			require.Len(t, blobs, 1)
			require.NoError(t, os.Chmod(blobs[0], 0o666))
		}},
		{"a name the import system tries first appeared", func(t *testing.T, site string, _ options) {
			require.NoError(t, os.Mkdir(filepath.Join(site, "demo/a"), 0o755))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			site, set, loc, opt := replayed(t)
			c.change(t, site, opt)
			r := applySet(set, loc, opt)[0]
			assert.False(t, r.Recorded)
			assert.False(t, r.Replayed)
			a := read(t, filepath.Join(site, "demo/a.py"))
			assert.NotEqual(t, replayRecorded, a, "replayed: %s", r.Why)
			if r.State == patchdef.Applied {
				assert.Equal(t, replayPlanned, a, "planned afresh")
			}
			left, _ := filepath.Glob(filepath.Join(site, "demo/.*.tmp-*"))
			assert.Empty(t, left)
		})
	}
}

// A write that fails halfway through the replay puts back what it
// renamed, and the full check runs on the files as they are.
func TestReplayFailedWriteIsUndone(t *testing.T) {
	site, set, loc, opt := replayed(t)
	renames := 0
	commit.Rename = func(s *atomicfile.Staged) error {
		renames++
		if renames == 2 {
			s.Discard()
			return &os.PathError{Op: "rename", Path: s.Path(), Err: syscall.EIO}
		}
		return s.Commit()
	}
	t.Cleanup(func() { commit.Rename = (*atomicfile.Staged).Commit })
	r := applySet(set, loc, opt)[0]
	assert.Equal(t, patchdef.Applied, r.State, r.Why)
	assert.Equal(t, replayPlanned, read(t, filepath.Join(site, "demo/a.py")), "the full check planned and wrote, after the replay was undone")
	assert.Equal(t, "# b\n"+replayPlanned, read(t, filepath.Join(site, "demo/b.py")))
	assert.Equal(t, 4, renames, "two renames of the replay (the second failing, the first undone by a rewrite), two of the full check")
}

// The replay checks bytecode as the recorded run did after its write:
// bytecode of a written module is removed; bytecode that cannot be runs
// the full check, which finds the patch shadowed.
func TestReplayChecksBytecode(t *testing.T) {
	site, set, loc, opt := replayed(t)
	pyc := filepath.Join(site, "demo/__pycache__/a.cpython-312.pyc")
	write(t, pyc, "\x00\x00\r\n\x01\x00\x00\x00"+strings.Repeat("\x00", 8))
	r := applySet(set, loc, opt)[0]
	assert.Equal(t, "applied", r.Action, r.Why)
	assert.Equal(t, replayRecorded, read(t, filepath.Join(site, "demo/a.py")))
	assert.Equal(t, []string{pyc}, r.Edits[0].PycsRemoved)
	assert.NoFileExists(t, pyc)

	site, set, loc, opt = replayed(t)
	pyc = filepath.Join(site, "demo/__pycache__/a.cpython-312.pyc")
	write(t, pyc, "\x00\x00\r\n\x01\x00\x00\x00"+strings.Repeat("\x00", 8))
	removeFile = func(p string) error { return &os.PathError{Op: "remove", Path: p, Err: syscall.EROFS} }
	t.Cleanup(func() { removeFile = os.Remove })
	r = applySet(set, loc, opt)[0]
	assert.Equal(t, "applied", r.Action)
	assert.Equal(t, replayRecorded, read(t, filepath.Join(site, "demo/a.py")))
	assert.Equal(t, patchdef.Shadowed, r.State)
	assert.Contains(t, r.Why, "a.cpython-312.pyc")
	assert.False(t, r.Ok())
	// Not recorded as in force: the next start (with the definition that
	// was recorded) checks the bytecode again.
	set.Defs[0] = def(t, "fix", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"},
		patchdef.Edit{File: "b.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	r = applySet(set, loc, opt)[0]
	assert.False(t, r.Recorded)
	assert.Equal(t, patchdef.Shadowed, r.State)
}

// A first start keeps what the files it wrote held before, but no blob:
// only a start that finds them pristine again under the record writes
// one. The record of a run that wrote nothing has nothing to replay.
func TestReplayKeptOnlyForWrites(t *testing.T) {
	site, set, loc, opt := recorded(t)
	_, rec := readRecord(t, opt)
	assert.Nil(t, rec.Wrote, "a first start writes no blob")
	blobs, _ := filepath.Glob(filepath.Join(opt.StateDir, "*.blob"))
	assert.Empty(t, blobs)
	var pristine int
	for _, f := range rec.Files {
		if f.Pristine != nil {
			pristine++
			assert.Equal(t, filepath.Join(site, "demo/a.py"), f.Path)
			assert.Equal(t, fileid.SumBytes([]byte(replayPristine)), f.Pristine.Sum)
		}
	}
	assert.Equal(t, 1, pristine)

	// A run on files already patched writes nothing and keeps nothing to
	// replay.
	opt.StateDir = t.TempDir()
	time.Sleep(fileid.RacyWindow)
	r := applySet(set, loc, opt)[0]
	require.Equal(t, "none", r.Action)
	_, rec = readRecord(t, opt)
	assert.Nil(t, rec.Wrote)
	for _, f := range rec.Files {
		assert.Nil(t, f.Pristine, f.Path)
	}
	blobs, _ = filepath.Glob(filepath.Join(opt.StateDir, "*.blob"))
	assert.Empty(t, blobs)
}

// The first start on a pristine layer under a record without a blob plans
// and writes, and keeps the blob; the next one replays.
func TestReplayBlobWrittenWhenPristineAgain(t *testing.T) {
	site, set, loc, opt := replayed(t)
	file, rec := readRecord(t, opt)
	require.NotNil(t, rec.Wrote)
	assert.FileExists(t, filepath.Join(opt.StateDir, record.BlobName(file)))
	r := applySet(set, loc, opt)[0]
	assert.True(t, r.Replayed, r.Why)
	assert.Equal(t, replayRecorded, read(t, filepath.Join(site, "demo/a.py")))
}

// flipBlob changes one byte of the blob beside the record in opt's state
// directory, at the index at gives.
func flipBlob(t *testing.T, opt options, at func([]byte) int) {
	t.Helper()
	blobs, _ := filepath.Glob(filepath.Join(opt.StateDir, "patches-*.blob"))
	require.Len(t, blobs, 1)
	b, err := os.ReadFile(blobs[0])
	require.NoError(t, err)
	i := at(b)
	require.Positive(t, i)
	b[i] ^= 1
	require.NoError(t, os.WriteFile(blobs[0], b, 0o644))
}

// A start killed between two renames of a replay leaves each file the
// image's or the recorded one, never torn, and the next start finishes
// the job: every file patched, no temporary file left.
func TestReplayKilledBetweenTwoRenames(t *testing.T) {
	dir, valid := crashTree(t)
	state := t.TempDir()
	mtimes := map[string]time.Time{}
	for name := range crashOriginals {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		mtimes[name] = fi.ModTime()
	}
	newLayer := func() {
		for name := range crashOriginals {
			p := filepath.Join(dir, name)
			require.NoError(t, os.WriteFile(p+".layer", []byte(valid[name][0]), 0o644))
			require.NoError(t, os.Chtimes(p+".layer", mtimes[name], mtimes[name]))
			require.NoError(t, os.Rename(p+".layer", p))
		}
	}
	start := func(dieAfter int) ([]Result, error) {
		cmd := child(dir)
		cmd.Env = append(cmd.Env, "INFERA_PATCHES_STATE="+state)
		if dieAfter > 0 {
			cmd.Env = append(cmd.Env, "INFERA_PATCHES_DIE_AFTER_RENAMES="+strconv.Itoa(dieAfter))
		}
		out, err := cmd.Output()
		var res []Result
		if err == nil {
			err = json.Unmarshal(out, &res)
		}
		return res, err
	}
	_, err := start(0) // the first start
	require.NoError(t, err)
	newLayer()
	res, err := start(0) // the first new layer: planned, the blob kept
	require.NoError(t, err)
	require.False(t, res[0].Replayed)
	newLayer()
	res, err = start(0)
	require.NoError(t, err)
	require.True(t, res[0].Replayed, "the second new layer replays: %s", res[0].Why)
	// The state a replay starts from, put back before each killed start
	// (the recovery below renews it for a layer that is partly written).
	kept := map[string][]byte{}
	ents, err := os.ReadDir(state)
	require.NoError(t, err)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(state, e.Name()))
		require.NoError(t, err)
		kept[e.Name()] = b
	}
	names := slices.Sorted(maps.Keys(crashOriginals)) // the record's order, which the replay renames in

	for n := 1; n < len(crashOriginals); n++ {
		for name, b := range kept {
			require.NoError(t, os.WriteFile(filepath.Join(state, name), b, 0o644))
		}
		newLayer()
		_, err = start(n)
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "the start was to die after rename %d: %v", n, err)
		for k, name := range names {
			got := read(t, filepath.Join(dir, name))
			switch {
			case k < n && got != final(valid, name):
				t.Fatalf("after rename %d of the replay, %s is not the recorded content", n, name)
			case k >= n && got != valid[name][0]:
				t.Fatalf("after rename %d of the replay, %s is not the image's", n, name)
			}
		}

		res, err = start(0)
		require.NoError(t, err)
		for _, r := range res {
			assert.Equal(t, patchdef.Applied, r.State, "%s after rename %d: %s", r.ID, n, r.Why)
		}
		for name := range crashOriginals {
			assert.Equal(t, final(valid, name), read(t, filepath.Join(dir, name)), "%s after rename %d", name, n)
		}
		left, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp-*"))
		top, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
		assert.Empty(t, append(left, top...), "temporary files after rename %d", n)
	}
}
