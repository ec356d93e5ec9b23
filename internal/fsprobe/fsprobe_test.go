package fsprobe

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/mountinfo"
)

// The test binary is its own helper, as infera-exec is.
func TestMain(m *testing.M) {
	if op, ok := HelperOp(os.Args, os.Getenv); ok {
		os.Exit(Serve(op, os.Args[1], os.Stdout))
	}
	os.Exit(m.Run())
}

type who struct {
	PID  int    `json:"pid"`
	Echo string `json:"echo"`
}

var (
	whoOp = Define("test-who", func(s string) (who, error) { return who{os.Getpid(), s}, nil })
	// blockOp stands for a call to a server that never answers.
	blockOp = Define("test-block", func(string) (who, error) {
		time.Sleep(time.Hour)
		return who{}, nil
	})
	crashOp = Define("test-crash", func(string) (who, error) { panic("boom") })
)

// A table in which dir is on NFS and everything else on ext4.
func remoteAt(dir string) func() (*mountinfo.Table, error) {
	return func() (*mountinfo.Table, error) {
		return &mountinfo.Table{Mounts: []mountinfo.Mount{
			{Point: "/", FSType: "ext4", Source: "/dev/vda", Kind: mountinfo.Local},
			{Point: dir, FSType: "nfs4", Source: "srv:/export", Kind: mountinfo.Remote},
		}}, nil
	}
}

func newProber(t *testing.T, timeout time.Duration) (*Prober, string) {
	dir := t.TempDir()
	return &Prober{Timeout: timeout, Table: remoteAt(dir)}, dir
}

func TestLocalRunsInProcess(t *testing.T) {
	p, _ := newProber(t, time.Second)
	r, acc, err := Call(p, whoOp, "/usr", "hi")
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), r.PID)
	assert.False(t, acc.Helper)
	assert.Equal(t, "ext4", acc.Mount.FSType)
}

func TestRemoteRunsInHelper(t *testing.T) {
	p, dir := newProber(t, 10*time.Second)
	r, acc, err := Call(p, whoOp, filepath.Join(dir, "model"), "hi")
	require.NoError(t, err)
	assert.NotEqual(t, os.Getpid(), r.PID)
	assert.Equal(t, "hi", r.Echo)
	assert.True(t, acc.Helper)
	assert.Equal(t, 0, p.Passed())
}

func TestUnknownTableUsesHelper(t *testing.T) {
	p := &Prober{Timeout: 10 * time.Second, Table: func() (*mountinfo.Table, error) { return nil, errors.New("no /proc") }}
	r, acc, err := Call(p, whoOp, "/usr", "x")
	require.NoError(t, err)
	assert.True(t, acc.Helper)
	assert.NotEqual(t, os.Getpid(), r.PID)
}

func TestErrnoCrossesTheBoundary(t *testing.T) {
	p, dir := newProber(t, 10*time.Second)
	missing := filepath.Join(dir, "missing")
	_, acc, err := Call(p, StatOp, missing, missing)
	require.Error(t, err)
	assert.True(t, acc.Helper)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), missing)

	_, err = p.Answers(missing)
	assert.NoError(t, err, "a missing path answered")
}

func TestDeadline(t *testing.T) {
	timeout := 300 * time.Millisecond
	p, dir := newProber(t, timeout)
	start := time.Now()
	_, acc, err := Call(p, blockOp, filepath.Join(dir, "m"), "")
	var d *DeadlineError
	require.ErrorAs(t, err, &d)
	assert.GreaterOrEqual(t, time.Since(start), timeout)
	assert.True(t, acc.Helper)
	assert.False(t, d.Earlier)
	assert.Equal(t, dir, d.Mount.Point)
	assert.Contains(t, err.Error(), "(nfs4 from srv:/export) did not answer within 300ms")
	assert.Contains(t, d.Fix(), "Check the mount "+dir)
	assert.Equal(t, 1, p.Passed())

	// The same mount again: refused at once, no second helper.
	start = time.Now()
	_, err = p.Answers(filepath.Join(dir, "other"))
	require.ErrorAs(t, err, &d)
	assert.True(t, d.Earlier)
	assert.Less(t, time.Since(start), timeout)
	assert.Equal(t, 2, p.Passed())

	// Another mount is unaffected.
	_, err = p.Answers("/usr")
	assert.NoError(t, err)
}

func TestCrashIsAnError(t *testing.T) {
	p, dir := newProber(t, 10*time.Second)
	_, _, err := Call(p, crashOp, filepath.Join(dir, "m"), "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "boom")
}

func TestNilProberIsDirect(t *testing.T) {
	var p *Prober
	r, acc, err := Call(p, whoOp, "/anything", "x")
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), r.PID)
	assert.False(t, acc.Helper)
	assert.Equal(t, 0, p.Passed())
}

func TestHelperOpNeedsBothMarks(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvVar {
				return v
			}
			return ""
		}
	}
	_, ok := HelperOp([]string{helperArgv0, `"x"`}, env("test-who"))
	assert.True(t, ok)
	// The variable left in a pod's environment: a normal start.
	_, ok = HelperOp([]string{"/overlay/bin/infera-exec", "python3"}, env("test-who"))
	assert.False(t, ok)
	_, ok = HelperOp([]string{helperArgv0, `"x"`}, env("no-such-op"))
	assert.False(t, ok)
	_, ok = HelperOp([]string{helperArgv0, `"x"`}, env(""))
	assert.False(t, ok)
}

func TestServeEncodesErrno(t *testing.T) {
	var b bytes.Buffer
	assert.Equal(t, 0, Serve("stat", `"/no/such/path"`, &b))
	assert.Contains(t, b.String(), `"errno":2`)
	assert.Equal(t, int(syscall.ENOENT), 2)
}

// Links matter only when some mount can block: the same link leads onto
// NFS in a table that has it (helper), and nowhere that can hang in a
// table of local mounts alone (in process, no link followed).
func TestLinksFollowedOnlyWhenAMountCanBlock(t *testing.T) {
	p, nfs := newProber(t, 10*time.Second)
	link := filepath.Join(t.TempDir(), "models")
	require.NoError(t, os.Symlink(nfs, link))
	_, acc, err := Call(p, whoOp, filepath.Join(link, "llama"), "x")
	require.NoError(t, err)
	assert.True(t, acc.Helper, "a link onto NFS was not followed")

	local := &Prober{Timeout: 10 * time.Second, Table: func() (*mountinfo.Table, error) {
		return &mountinfo.Table{Mounts: []mountinfo.Mount{{Point: "/", FSType: "ext4", Source: "/dev/vda", Kind: mountinfo.Local}}}, nil
	}}
	r, acc, err := Call(local, whoOp, filepath.Join(link, "llama"), "x")
	require.NoError(t, err)
	assert.False(t, acc.Helper)
	assert.Equal(t, os.Getpid(), r.PID)
	assert.Equal(t, "ext4", acc.Mount.FSType)

}

// With no mount entry for / (a chroot, some sandboxes), a path no entry
// covers lies on the filesystem infera-exec was started from: statfs(/)
// decides once, for every such path, whether it is known to be local. A
// helper that runs says why in a debug line (--verbose).
func TestNoRootEntryDecidedOnceByStatfs(t *testing.T) {
	noRoot := func() (*mountinfo.Table, error) {
		return &mountinfo.Table{Mounts: []mountinfo.Mount{{Point: "/proc", FSType: "proc", Source: "proc", Kind: mountinfo.Local}}}, nil
	}
	calls := 0
	statfsAs := func(magic uint32) func(string) (uint32, error) {
		return func(string) (uint32, error) { calls++; return magic, nil }
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	local := &Prober{Timeout: 10 * time.Second, Table: noRoot, Statfs: statfsAs(0xEF53), Log: log}
	for _, path := range []string{"/usr", "/etc", "/opt/models"} {
		r, acc, err := Call(local, whoOp, path, "x")
		require.NoError(t, err)
		assert.False(t, acc.Helper, "%s: the root is ext4", path)
		assert.Equal(t, os.Getpid(), r.PID)
	}
	assert.Equal(t, 1, calls, "decided once per start")
	assert.Empty(t, logs.String(), "no helper, nothing to explain")

	remote := &Prober{Timeout: 10 * time.Second, Table: noRoot, Statfs: statfsAs(0x6969), Log: log}
	_, acc, err := Call(remote, whoOp, "/usr", "x")
	require.NoError(t, err)
	assert.True(t, acc.Helper, "the root is NFS: the helper stays")
	assert.Contains(t, logs.String(), "deadline helper for /usr: no mount entry covers / and its filesystem (nfs) is not one known to be local")
	_, _, err = Call(remote, whoOp, "/etc", "x")
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(logs.String(), "deadline helper"), "explained once per mount")
}
