package preflight

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/mountinfo"
)

// The test binary answers as the helper, as infera-exec does.
func TestMain(m *testing.M) {
	if op, ok := fsprobe.HelperOp(os.Args, os.Getenv); ok {
		os.Exit(fsprobe.Serve(op, os.Args[1], os.Stdout))
	}
	os.Exit(m.Run())
}

// nfsTable is a mount table, as a pod with an NFS model volume shows it,
// in which dir is that volume.
func nfsTable(dir string) string {
	return "626 555 0:52 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n" +
		"640 626 0:60 / " + dir + " rw,relatime shared:7 - nfs4 10.0.0.5:/export/models rw,vers=4.2\n"
}

func nfsProber(t *testing.T, dir string, timeout time.Duration) *fsprobe.Prober {
	return &fsprobe.Prober{Timeout: timeout, Table: func() (*mountinfo.Table, error) {
		return mountinfo.Parse(strings.NewReader(nfsTable(dir)))
	}}
}

// A model directory that the mount table puts on NFS is read by the
// helper, and named by its mount.
func TestModelDirOnNFSAnswers(t *testing.T) {
	dir := modelDir(t, map[string]int64{"a.safetensors": 4e9, "b.safetensors": 4e9})
	in := modelInput(dir, magicNFS)
	in.Statfs = nil
	in.Probe = nfsProber(t, dir, 30*time.Second)
	results, _ := runChecks(in, []string{"advertise", "advertise-ip", "rdma", "shm", "nofile", "placeholders"})
	r := find(t, results, "model-dir")
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Contains(t, r.Seen, "on nfs4 from 10.0.0.5:/export/models, 2 shards (*.safetensors), 8.00 GB")
	assert.False(t, r.DeadlinePassed)
	assert.Greater(t, r.TookMicros, int64(0))
}

// A helper that never answers stands for a dead server: the check ends at
// the deadline with the path, the filesystem and the fix.
func TestModelDirOnNFSDoesNotAnswer(t *testing.T) {
	dir := t.TempDir()
	never := filepath.Join(t.TempDir(), "never-answers")
	require.NoError(t, os.WriteFile(never, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755))
	timeout := 200 * time.Millisecond

	for _, strict := range []bool{false, true} {
		in := modelInput(filepath.Join(dir, "Llama-3.1-8B"), magicNFS)
		in.Statfs = nil
		in.Probe = nfsProber(t, dir, timeout)
		in.Probe.Exe = never
		in.TimeoutError = strict
		start := time.Now()
		results, _ := runChecks(in, []string{"advertise", "advertise-ip", "rdma", "nofile", "placeholders"})
		assert.GreaterOrEqual(t, time.Since(start), timeout)
		r := find(t, results, "model-dir")
		assert.Equal(t, Fail, r.Status)
		want := Warn
		if strict {
			want = Error
		}
		assert.Equal(t, want, r.Severity)
		assert.Equal(t, "the model directory "+filepath.Join(dir, "Llama-3.1-8B")+" (nfs4 from 10.0.0.5:/export/models) did not answer within 200ms", r.Seen)
		assert.Contains(t, r.Do, "Check the mount "+dir)
		assert.Contains(t, r.Do, "INFERA_PREFLIGHT_TIMEOUT (200ms)")
		assert.True(t, r.DeadlinePassed)
		assert.GreaterOrEqual(t, r.TookMicros, timeout.Microseconds())
		// The other checks are on local filesystems and did not wait.
		shm := find(t, results, "shm")
		assert.False(t, shm.DeadlinePassed)
	}
}

// A local model directory never starts a helper: a helper that would
// never answer is not asked.
func TestModelDirLocalNeedsNoHelper(t *testing.T) {
	dir := modelDir(t, map[string]int64{"a.safetensors": 1e9})
	in := modelInput(dir, magicExt4)
	in.Probe = &fsprobe.Prober{Timeout: time.Hour, Exe: "/nonexistent/helper", Table: func() (*mountinfo.Table, error) {
		return mountinfo.Parse(strings.NewReader("1 0 0:1 / / rw - ext4 /dev/vda rw\n"))
	}}
	r := checkModelDir(in)
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, 0, in.Probe.Passed())
}

func find(t *testing.T, results []Result, name string) Result {
	t.Helper()
	for _, r := range results {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no result for %s", name)
	return Result{}
}
