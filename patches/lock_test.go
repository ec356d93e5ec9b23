package patches

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
