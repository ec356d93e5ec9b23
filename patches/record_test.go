package patches

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/patches/commit"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/record"
)

// recorded sets up package demo with one pending patch and a state
// directory, applies it, and returns what a restart needs: the record the
// first start wrote holds.
func recorded(t *testing.T) (site string, set *patchdef.Set, loc *Location, opt options) {
	t.Helper()
	site, loc = pkgTree(t, map[string]string{"a.py": "def f(x):\n    a, _ = x\n    return a\n"})
	loc.Fingerprint = "probe-1"
	set = &patchdef.Set{Defs: []*patchdef.Definition{def(t, "fix", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})}, Digest: "defs-1"}
	// A start knows its interpreter's minor (the ABI family): the names
	// that could shadow a.py are then recorded one by one, not as the
	// directory's identity, which a new __pycache__ moves.
	opt = options{StateDir: t.TempDir(), PyMinor: 12}
	r := applySet(set, loc, opt)[0]
	require.Equal(t, "applied", r.Action)
	// The first start records what it wrote (read back once the clock
	// has passed the writes): the first restart reads no engine file.
	r = applySet(set, loc, opt)[0]
	require.Equal(t, patchdef.Applied, r.State)
	require.True(t, r.Recorded, "the first restart after a first start reads none")
	return site, set, loc, opt
}

func TestRecordSkipsReadingUnchangedFiles(t *testing.T) {
	site, set, loc, opt := recorded(t)
	p := filepath.Join(site, "demo/a.py")
	st, _ := fileid.Lstat(p)
	r := applySet(set, loc, opt)[0]
	assert.True(t, r.Recorded)
	assert.Equal(t, patchdef.Applied, r.State)
	assert.Equal(t, patchdef.Applied, r.Before)
	assert.Equal(t, "none", r.Action)
	assert.NotEmpty(t, r.Edits[0].SHA256After)
	now, _ := fileid.Lstat(p)
	assert.Equal(t, st, now)
}

// Each change of what the results depend on runs the full check.
func TestRecordInvalidation(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, site string, set *patchdef.Set, loc *Location, opt *options)
		want   patchdef.State
	}{
		{"content edited in place, same size and mtime", func(t *testing.T, site string, _ *patchdef.Set, _ *Location, _ *options) {
			p := filepath.Join(site, "demo/a.py")
			fi, _ := os.Stat(p)
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte("    b"), int64(len("def f(x):\n")))
			require.NoError(t, err)
			f.Close()
			require.NoError(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
		}, patchdef.Drift},
		{"same content, another inode and mtime", func(t *testing.T, site string, _ *patchdef.Set, _ *Location, _ *options) {
			// (With the mtime kept, the content is read and found equal:
			// TestRecordSurvivesNewMount.)
			p := filepath.Join(site, "demo/a.py")
			fi, _ := os.Stat(p)
			data, _ := os.ReadFile(p)
			require.NoError(t, os.WriteFile(p+".new", data, 0o644))
			later := fi.ModTime().Add(time.Second)
			require.NoError(t, os.Chtimes(p+".new", later, later))
			require.NoError(t, os.Rename(p+".new", p))
		}, patchdef.Applied},
		{"same path, size and mtime, other content, on a new mount (another inode and ctime)", func(t *testing.T, site string, _ *patchdef.Set, _ *Location, _ *options) {
			p := filepath.Join(site, "demo/a.py")
			fi, _ := os.Stat(p)
			data, _ := os.ReadFile(p)
			data = append([]byte(nil), data...)
			copy(data[len("def f(x):\n"):], "    b")
			require.NoError(t, os.WriteFile(p+".new", data, 0o644))
			require.NoError(t, os.Chtimes(p+".new", fi.ModTime(), fi.ModTime()))
			require.NoError(t, os.Rename(p+".new", p))
			now, _ := os.Stat(p)
			require.Equal(t, fi.Size(), now.Size())
		}, patchdef.Drift},
		{"mode", func(t *testing.T, site string, _ *patchdef.Set, _ *Location, _ *options) {
			require.NoError(t, os.Chmod(filepath.Join(site, "demo/a.py"), 0o600))
		}, patchdef.Applied},
		{"file replaced by the original", func(t *testing.T, site string, _ *patchdef.Set, _ *Location, _ *options) {
			write(t, filepath.Join(site, "demo/a.py"), "def f(x):\n    a, _ = x\n    return a\n")
		}, patchdef.Applied}, // applied again by this start
		{"definitions", func(t *testing.T, _ string, set *patchdef.Set, _ *Location, _ *options) { set.Digest = "defs-2" }, patchdef.Applied},
		{"interpreter or sys.path inputs (the probe's fingerprint)", func(t *testing.T, _ string, _ *patchdef.Set, loc *Location, _ *options) {
			loc.Fingerprint = "probe-2"
		}, patchdef.Applied},
		{"engine version", func(t *testing.T, _ string, _ *patchdef.Set, loc *Location, _ *options) {
			p := loc.Packages["demo"]
			p.Version = "1.3.0"
			loc.Packages["demo"] = p
		}, patchdef.Applied},
		{"no location fingerprint", func(t *testing.T, _ string, _ *patchdef.Set, loc *Location, _ *options) { loc.Fingerprint = "" }, patchdef.Applied},
		{"no state directory", func(t *testing.T, _ string, _ *patchdef.Set, _ *Location, opt *options) { opt.StateDir = "" }, patchdef.Applied},
		{"state directory writable by others", func(t *testing.T, _ string, _ *patchdef.Set, _ *Location, opt *options) {
			require.NoError(t, os.Chmod(opt.StateDir, 0o777))
		}, patchdef.Applied},
		{"record writable by others", func(t *testing.T, _ string, _ *patchdef.Set, _ *Location, opt *options) {
			files, _ := filepath.Glob(filepath.Join(opt.StateDir, "patches-*.json"))
			require.Len(t, files, 1)
			require.NoError(t, os.Chmod(files[0], 0o646))
		}, patchdef.Applied},
		{"record replaced by a FIFO", func(t *testing.T, _ string, _ *patchdef.Set, _ *Location, opt *options) {
			files, _ := filepath.Glob(filepath.Join(opt.StateDir, "patches-*.json"))
			require.Len(t, files, 1)
			require.NoError(t, os.Remove(files[0]))
			require.NoError(t, syscall.Mkfifo(files[0], 0o644))
		}, patchdef.Applied},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			site, set, loc, opt := recorded(t)
			c.change(t, site, set, loc, &opt)
			r := applySet(set, loc, opt)[0]
			assert.False(t, r.Recorded, "the record must not be used")
			assert.Equal(t, c.want, r.State, r.Why)
		})
	}
}

// A new overlay mount of the same image shows the recorded files with new
// inodes and change times but their sizes, modes and modification times:
// the record holds once their content is read and has the recorded digest,
// and is renewed, so that the next start reads nothing again.
func TestRecordSurvivesNewMount(t *testing.T) {
	site, set, loc, opt := recorded(t)
	p := filepath.Join(site, "demo/a.py")
	fi, _ := os.Stat(p)
	data, _ := os.ReadFile(p)
	before, _ := fileid.Lstat(p)
	require.NoError(t, os.WriteFile(p+".new", data, 0o644))
	require.NoError(t, os.Chtimes(p+".new", fi.ModTime(), fi.ModTime()))
	require.NoError(t, os.Rename(p+".new", p))
	after, _ := fileid.Lstat(p)
	require.NotEqual(t, before, after)
	require.Equal(t, before.Portable(), after.Portable())
	r := applySet(set, loc, opt)[0]
	assert.True(t, r.Recorded, r.Why)
	assert.Equal(t, patchdef.Applied, r.State)
	_, rec := readRecord(t, opt)
	var renewed bool
	for _, f := range rec.Files {
		if f.Path == p {
			renewed = f.ID == after
		}
	}
	assert.True(t, renewed, "the record keeps the identity seen on this mount")
}

// readRecord returns the one record in opt's state directory, and its path.
func readRecord(t *testing.T, opt options) (string, record.Record) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(opt.StateDir, "patches-*.json"))
	require.Len(t, files, 1)
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	var rec record.Record
	require.NoError(t, json.Unmarshal(b, &rec))
	return files[0], rec
}

// A first start records what it wrote at once, without waiting for the
// clock to pass the writes: their identities are kept unsettled, and the
// next start confirms them by content before it trusts them. Content
// changed within the same clock tick, which leaves every field of the
// identity equal, is therefore not taken for the content verified.
func TestRecordKeepsItsOwnWritesUnsettled(t *testing.T) {
	site, set, loc, opt := recorded(t)
	p := filepath.Join(site, "demo/a.py")
	file, rec := readRecord(t, opt)
	var entry *record.File
	for i := range rec.Files {
		if rec.Files[i].Path == p {
			entry = &rec.Files[i]
		}
	}
	require.NotNil(t, entry, "the record names the written file")
	now, _ := fileid.Lstat(p)
	require.Equal(t, now, entry.ID)
	if !entry.Unsettled {
		// The first restart renews the record once the clock has passed
		// the write; before that, it keeps the entry unsettled.
		require.True(t, entry.ID.SettledAt(fileid.Now()), "a settled entry of a write the clock has not passed")
	}

	// The same identity, but the record's sum is of other bytes: the
	// bytes were changed after they were verified, within the same tick.
	entry.Unsettled = true
	entry.Sum = fileid.SumBytes([]byte("def f(x):\n    a = x[1]\n    return a\n"))
	b, err := json.Marshal(&rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, b, 0o644))
	r := applySet(set, loc, opt)[0]
	assert.False(t, r.Recorded, "an unsettled identity alone must not vouch for the bytes")
	assert.Equal(t, patchdef.Applied, r.State, r.Why)

	// Once the clock has passed the write, the confirmed entry is renewed
	// as settled, and later starts trust its identity alone.
	time.Sleep(fileid.RacyWindow)
	r = applySet(set, loc, opt)[0]
	require.True(t, r.Recorded, r.Why)
	r = applySet(set, loc, opt)[0]
	require.True(t, r.Recorded, r.Why)
	_, rec = readRecord(t, opt)
	for _, f := range rec.Files {
		assert.False(t, f.Unsettled, "%s: settled since", f.Path)
	}
}

// New bytecode beside a recorded module is checked without reading the
// source: unchecked-hash bytecode is removed; when it cannot be, the full
// check runs and the patch is shadowed.
func TestRecordBytecodeChecked(t *testing.T) {
	site, set, loc, opt := recorded(t)
	pyc := filepath.Join(site, "demo/__pycache__/a.cpython-312.pyc")
	write(t, pyc, "\x00\x00\r\n\x01\x00\x00\x00"+strings.Repeat("\x00", 8))
	r := applySet(set, loc, opt)[0]
	assert.True(t, r.Recorded)
	assert.Equal(t, patchdef.Applied, r.State)
	assert.Equal(t, []string{pyc}, r.Edits[0].PycsRemoved)
	assert.NoFileExists(t, pyc)

	write(t, pyc, "\x00\x00\r\n\x01\x00\x00\x00"+strings.Repeat("\x00", 8))
	removeFile = func(string) error { return syscall.EROFS }
	t.Cleanup(func() { removeFile = os.Remove })
	r = applySet(set, loc, opt)[0]
	assert.False(t, r.Recorded)
	assert.Equal(t, patchdef.Shadowed, r.State)
	assert.False(t, r.Ok())
}

// Issue: when __pycache__ could not be cleaned, the patch was "applied"
// while an unchecked-hash .pyc kept the old code running.
func TestShadowedWhenBytecodeCannotBeRemoved(t *testing.T) {
	hdr := func(flags byte) string {
		return "\x00\x00\r\n" + string([]byte{flags, 0, 0, 0}) + strings.Repeat("\x00", 8)
	}
	removeFile = func(p string) error { return &os.PathError{Op: "remove", Path: p, Err: syscall.EACCES} }
	t.Cleanup(func() { removeFile = os.Remove })

	// A write whose module keeps an unchecked-hash .pyc.
	site, loc := pkgTree(t, map[string]string{
		"a.py":                          "    a, _ = x\n",
		"__pycache__/a.cpython-312.pyc": hdr(0b01),
		"__pycache__/a.cpython-311.pyc": hdr(0), // timestamp, of the old source: revalidated, harmless
	})
	d := def(t, "pyc", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, "applied", r.Action, "the source was written")
	assert.Equal(t, patchdef.Shadowed, r.State)
	assert.False(t, r.Ok())
	assert.Contains(t, r.Why, "a.cpython-312.pyc (unchecked-hash")
	assert.NotContains(t, r.Why, "a.cpython-311.pyc")
	assert.Equal(t, "    a = x[0]\n", read(t, filepath.Join(site, "demo/a.py")))

	// Already applied, the same bytecode: still shadowed, every start.
	r = applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.Applied, r.Before)
	assert.Equal(t, patchdef.Shadowed, r.State)

	// A dry run (--explain, --check) says so, and that a start removes it.
	r = applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{DryRun: true})[0]
	assert.Equal(t, patchdef.Shadowed, r.State)
	assert.Contains(t, r.Why, "a start removes it")
}

// INFERA_REQUIRE_PATCHES refuses a shadowed patch (exit 65 in main).
func TestRequiredShadowedRefuses(t *testing.T) {
	py := debianPython(t)
	site := t.TempDir()
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	write(t, filepath.Join(site, "demo/a.py"), "    a, _ = x\n")
	write(t, filepath.Join(site, "demo/__pycache__/a.cpython-312.pyc"), "\x00\x00\r\n\x01\x00\x00\x00"+strings.Repeat("\x00", 8))
	payload := t.TempDir()
	write(t, filepath.Join(payload, "patches/demo/fix.toml"), "id = \"demo-fix\"\nsummary = \"s\"\npackage = \"demo\"\ndistribution = \"demo\"\n[[edit]]\nfile = \"a.py\"\nanchor = \"    a, _ = x\\n\"\nreplacement = \"    a = x[0]\\n\"\n")
	removeFile = func(p string) error { return &os.PathError{Op: "remove", Path: p, Err: syscall.EROFS} }
	t.Cleanup(func() { removeFile = os.Remove })
	out, err := Run(t.Context(), Input{Config: config.Config{PayloadRoot: payload, RequirePatches: []string{"demo-fix"}}, Python: py,
		Env: envWith("PYTHONPATH", site), Worker: &launch.Outcome{Cwd: "/"}, Log: discardLog()})
	var req *RequiredError
	require.True(t, errors.As(err, &req), "%v", err)
	assert.Contains(t, err.Error(), "demo-fix is shadowed")
	assert.Contains(t, out.Summary, "1 shadowed")
}

// Issue: a file changed by another writer between read and rename was
// silently overwritten. Now the write is abandoned, the patch read and
// decided again once, and applied on top of the other writer's change.
func TestConcurrentWriterIsNotOverwritten(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n"})
	p := filepath.Join(site, "demo/a.py")
	d := def(t, "race", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	calls := 0
	commit.BeforeRename = func(path string) {
		calls++
		if calls == 1 {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			f.WriteString("# the other writer's line\n")
			f.Close()
		}
	}
	t.Cleanup(func() { commit.BeforeRename = nil })
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.Applied, r.State, r.Why)
	assert.Equal(t, "    a = x[0]\n# the other writer's line\n", read(t, p), "both changes are there")
	assert.Equal(t, 2, calls)
}

// A writer that keeps changing the file: nothing of theirs is
// overwritten; after one retry the patch is drift.
func TestConcurrentWriterTwiceIsDrift(t *testing.T) {
	site, loc := pkgTree(t, map[string]string{"a.py": "    a, _ = x\n"})
	p := filepath.Join(site, "demo/a.py")
	d := def(t, "race", patchdef.Edit{File: "a.py", Anchor: "    a, _ = x\n", Replacement: "    a = x[0]\n"})
	commit.BeforeRename = func(path string) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		f.WriteString("#\n")
		f.Close()
	}
	t.Cleanup(func() { commit.BeforeRename = nil })
	r := applySet(&patchdef.Set{Defs: []*patchdef.Definition{d}}, loc, options{})[0]
	assert.Equal(t, patchdef.Drift, r.State)
	assert.Contains(t, r.Why, "changed by another writer")
	assert.Equal(t, "    a, _ = x\n#\n#\n", read(t, p), "the other writer's content is intact")
	left, _ := filepath.Glob(filepath.Join(site, "demo/.*.tmp-*"))
	assert.Empty(t, left)
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The record key's package line is fmt's "pkg %s %t %q %q %q", written
// without reflection: records made before it was written that way keep
// their key.
func TestRecordKeyPackageLine(t *testing.T) {
	set := &patchdef.Set{Digest: "d"}
	for _, p := range []Package{
		{Name: "vllm", Found: true, Dir: "/s/vllm", Dirs: []string{"/s/vllm"}, Version: "0.11.1"},
		{Name: "ns", Found: true, Dir: "/a/ns", Dirs: []string{"/a/ns", "/b/n\"s\x00"}, Version: ""},
		{Name: "sglang"},
	} {
		loc := &Location{Fingerprint: "f", Packages: map[string]Package{p.Name: p}}
		want := digest.Bytes([]byte(fmt.Sprintf("record v%s\x00defs %s\x00probe %s\x00", record.Version, "d", "f") +
			fmt.Sprintf("pkg %s %t %q %q %q\x00", p.Name, p.Found, p.Dir, p.Dirs, p.Version)))
		assert.Equal(t, want, recordKey(set, loc), "%+v", p)
	}
}
