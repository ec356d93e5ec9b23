package preflight

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/workerargs"
)

const (
	magicNFS     = 0x6969
	magicFUSE    = 0x65735546
	magicLustre  = 0x0BD00BD0
	magicExt4    = 0xEF53
	magicOverlay = 0x794c7630
)

func fakeStatfs(magic uint32) func(string) (FS, error) {
	return func(string) (FS, error) { return fsFromMagic(magic), nil }
}

// modelDir makes a model directory of sparse files: sizes cost no disk.
func modelDir(t *testing.T, files map[string]int64) string {
	t.Helper()
	dir := t.TempDir()
	for name, size := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		require.NoError(t, os.Truncate(p, size))
	}
	return dir
}

func modelInput(dir string, magic uint32) *Facts {
	return &Facts{
		Args:         workerargs.Parse([]string{"python3", "-m", "infera.engine.vllm", "--model", dir, "--tensor-parallel-size", "8"}),
		ReadyTimeout: config.DefaultReadyTimeout,
		ReadyDefault: true,
		Chdir:        config.DefaultChdir,
		Statfs:       fakeStatfs(magic),
	}
}

// unprivileged runs fn without the capabilities that let root read
// anything (on a thread of its own, which dies with it), so that a test
// of an unreadable file can fail as root too.
func unprivileged(t *testing.T, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		fn()
		return
	}
	errc := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		drop := uint32(1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH)
		data[0].Effective &^= drop
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		fn()
		errc <- nil
	}()
	require.NoError(t, <-errc)
}

func TestModelDirSkipped(t *testing.T) {
	r := checkModelDir(&Facts{Args: workerargs.Parse([]string{"python3", "-m", "router", "--port", "8000"})})
	assert.Equal(t, Skipped, r.Status)
	assert.Equal(t, "no --model, --model-path or serve argument in the command", r.Seen)

	for _, id := range []string{"meta-llama/Llama-3.1-8B", "gpt2", "models/x", "~/m"} {
		r = checkModelDir(&Facts{Args: workerargs.Parse([]string{"vllm", "serve", id})})
		assert.Equal(t, Skipped, r.Status, id)
		assert.Equal(t, id+" (serve) is not a path (absolute, ./ or ../): a Hugging Face repository id, nothing to check", r.Seen)
	}
}

func TestModelDirLocalPass(t *testing.T) {
	dir := modelDir(t, map[string]int64{
		"config.json":                      100,
		"model-00001-of-00002.safetensors": 5e9,
		"model-00002-of-00002.safetensors": 3e9,
		"pytorch_model.bin":                8e9, // the engine loads safetensors when both are there
		"tokenizer.json":                   1000,
		"original/consolidated.00.pth":     8e9, // and only looks down when the top has none
		".cache/huggingface/x.safetensors": 1,
	})
	r := checkModelDir(modelInput(dir, magicExt4))
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, dir+" on ext4, 2 shards (*.safetensors), 8.00 GB", r.Seen)

	// Overlay (baked into the image) is local: no estimate even when large.
	dir = modelDir(t, map[string]int64{"a.bin": 300e9})
	r = checkModelDir(modelInput(dir, magicOverlay))
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, dir+" on overlay, 1 shard (*.bin), 300 GB", r.Seen)
}

func TestModelDirSubdirectories(t *testing.T) {
	dir := modelDir(t, map[string]int64{
		"config.json":                  100,
		"original/consolidated.00.pth": 2e9,
		"original/consolidated.01.pt":  2e9,
		".git/lfs/objects/x.bin":       1e9,
	})
	r := checkModelDir(modelInput(dir, magicExt4))
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, dir+" on ext4, 2 shards (*.pt, *.pth) in subdirectories, 4.00 GB", r.Seen)
}

func TestModelDirGGUFFile(t *testing.T) {
	dir := modelDir(t, map[string]int64{"q4.gguf": 4.9e9, "notes.txt": 10})
	r := checkModelDir(&Facts{Args: workerargs.Parse([]string{"vllm", "serve", filepath.Join(dir, "q4.gguf")}), Statfs: fakeStatfs(magicExt4), ReadyTimeout: config.DefaultReadyTimeout, ReadyDefault: true})
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, filepath.Join(dir, "q4.gguf")+" on ext4, 1 shard (a GGUF file), 4.90 GB", r.Seen)

	r = checkModelDir(&Facts{Args: workerargs.Parse([]string{"vllm", "serve", filepath.Join(dir, "notes.txt")}), Statfs: fakeStatfs(magicExt4), ReadyTimeout: config.DefaultReadyTimeout, ReadyDefault: true})
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, Error, r.Severity)
	assert.Equal(t, filepath.Join(dir, "notes.txt")+" (serve) is not a directory", r.Seen)
	assert.Equal(t, "Point serve at the model's directory.", r.Do)
}

func TestModelDirHuggingFaceSnapshotLinks(t *testing.T) {
	root := modelDir(t, map[string]int64{"blobs/aaa": 2e9, "blobs/bbb": 1e9})
	snap := filepath.Join(root, "snapshots", "rev")
	require.NoError(t, os.MkdirAll(snap, 0o755))
	require.NoError(t, os.Symlink("../../blobs/aaa", filepath.Join(snap, "model-1.safetensors")))
	require.NoError(t, os.Symlink("../../blobs/bbb", filepath.Join(snap, "model-2.safetensors")))
	r := checkModelDir(modelInput(snap, magicExt4))
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, snap+" on ext4, 2 shards (*.safetensors), 3.00 GB", r.Seen)

	// A blob that never arrived: the link dangles.
	require.NoError(t, os.Symlink("../../blobs/ccc", filepath.Join(snap, "model-3.safetensors")))
	r = checkModelDir(modelInput(snap, magicExt4))
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, Error, r.Severity)
	assert.Equal(t, snap+": weight file "+filepath.Join(snap, "model-3.safetensors")+" cannot be read: no such file or directory", r.Seen)
}

func TestModelDirMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "models", "llama")
	r := checkModelDir(&Facts{Args: workerargs.Parse([]string{"python3", "-m", "sglang.launch_server", "--model-path", missing})})
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, Error, r.Severity)
	assert.Equal(t, missing+" (--model-path) does not exist", r.Seen)
	assert.Contains(t, r.Why, "fail to load the model")
	assert.Contains(t, r.Do, "mountPath, subPath, claim")
}

func TestModelDirNoShards(t *testing.T) {
	dir := modelDir(t, map[string]int64{"config.json": 100, "model.safetensors.incomplete": 5e9, "sub/readme.md": 1})
	r := checkModelDir(modelInput(dir, magicNFS))
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, Warn, r.Severity)
	assert.Equal(t, dir+" on nfs: no weight files (*.safetensors, *.bin, *.pt, *.pth, *.gguf) in it or one level down", r.Seen)
	assert.Contains(t, r.Why, "unfinished download")
	assert.Equal(t, "Point --model at the directory holding config.json and the weight files, and check that the download finished.", r.Do)
}

func TestModelDirUnreadable(t *testing.T) {
	dir := modelDir(t, map[string]int64{"model.safetensors": 1e9})
	require.NoError(t, os.Chmod(dir, 0o000))
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	var r Result
	unprivileged(t, func() { r = checkModelDir(modelInput(dir, magicExt4)) })
	require.Equal(t, Fail, r.Status, r.Seen)
	assert.Equal(t, Error, r.Severity)
	assert.Equal(t, dir+" (--model) cannot be listed: permission denied", r.Seen)
	assert.Contains(t, r.Do, "fsGroup")

	require.NoError(t, os.Chmod(dir, 0o755))
	shard := filepath.Join(dir, "model.safetensors")
	require.NoError(t, os.Chmod(shard, 0o000))
	unprivileged(t, func() { r = checkModelDir(modelInput(dir, magicExt4)) })
	require.Equal(t, Fail, r.Status, r.Seen)
	assert.Equal(t, Error, r.Severity)
	assert.Equal(t, dir+": weight file "+shard+" cannot be read: permission denied", r.Seen)

	require.NoError(t, os.Chmod(shard, 0o644))
	unprivileged(t, func() { r = checkModelDir(modelInput(dir, magicExt4)) })
	assert.Equal(t, Pass, r.Status, r.Seen)
}

func TestModelDirRelative(t *testing.T) {
	cwd := modelDir(t, map[string]int64{"models/m/model.safetensors": 2e9})
	in := modelInput("./models/m", magicExt4)
	in.Chdir = cwd
	r := checkModelDir(in)
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, "./models/m ("+cwd+"/models/m) on ext4, 1 shard (*.safetensors), 2.00 GB", r.Seen)

	in = modelInput("../m", magicExt4)
	in.Chdir = filepath.Join(cwd, "models", "x")
	r = checkModelDir(in)
	assert.Equal(t, Pass, r.Status, r.Seen)

	// Without INFERA_EXEC_CHDIR the worker runs in /.
	in = modelInput("./models/m", magicExt4)
	r = checkModelDir(in)
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, "./models/m (/models/m) (--model) does not exist", r.Seen)
}

func TestModelDirNetworkTimesOut(t *testing.T) {
	// 1.5 TB from NFS: about 95 minutes, as measured.
	dir := modelDir(t, map[string]int64{"a.safetensors": 500e9, "b.safetensors": 500e9, "c.safetensors": 500e9})
	r := checkModelDir(modelInput(dir, magicNFS))
	require.Equal(t, Fail, r.Status, r.Seen)
	assert.Equal(t, Warn, r.Severity)
	assert.Equal(t, dir+" on nfs, 3 shards (*.safetensors), 1500 GB; estimated load 1h35m at ~0.26 GB/s over the network; INFERA_ENGINE_READY_TIMEOUT is 30m (the default)", r.Seen)
	assert.Equal(t, "Weights load slowly over the network: a 1.5 TB checkpoint takes about 95 minutes from NFS against 8 from local NVMe. The worker would time out mid-load and restart forever, loading again each time.", r.Why)
	assert.Equal(t, "Set INFERA_ENGINE_READY_TIMEOUT=2h25m (the estimate plus half), or copy the model to a local disk (a local volume on NVMe) and point --model there.", r.Do)

	// Set explicitly but still too short: warned too, without "(the default)".
	in := modelInput(dir, magicLustre)
	in.ReadyTimeout, in.ReadyDefault = 3600, false
	r = checkModelDir(in)
	require.Equal(t, Fail, r.Status, r.Seen)
	assert.Equal(t, Warn, r.Severity)
	assert.Contains(t, r.Seen, "on lustre, 3 shards")
	assert.Contains(t, r.Seen, "; INFERA_ENGINE_READY_TIMEOUT is 1h")
	assert.NotContains(t, r.Seen, "default")
	assert.Contains(t, r.Why, "time out mid-load")

	// Set explicitly long enough: pass, the estimate shown.
	in.ReadyTimeout = 7200
	r = checkModelDir(in)
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, dir+" on lustre, 3 shards (*.safetensors), 1500 GB; estimated load 1h35m at ~0.26 GB/s over the network", r.Seen)
}

func TestModelDirNetworkLittleHeadroom(t *testing.T) {
	// 300 GB from NFS: 19 minutes, within two thirds of 30: pass.
	dir := modelDir(t, map[string]int64{"a.safetensors": 150e9, "b.safetensors": 150e9})
	r := checkModelDir(modelInput(dir, magicNFS))
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, dir+" on nfs, 2 shards (*.safetensors), 300 GB; estimated load 19m at ~0.26 GB/s over the network", r.Seen)

	// 400 GB over FUSE: 25 minutes, under the 30 minute default but with
	// no room for the engine's start: warned.
	dir = modelDir(t, map[string]int64{"a.safetensors": 200e9, "b.safetensors": 200e9})
	r = checkModelDir(modelInput(dir, magicFUSE))
	require.Equal(t, Fail, r.Status, r.Seen)
	assert.Equal(t, Warn, r.Severity)
	assert.Equal(t, dir+" on fuse, 2 shards (*.safetensors), 400 GB; estimated load 25m at ~0.26 GB/s over the network; INFERA_ENGINE_READY_TIMEOUT is 30m (the default)", r.Seen)
	assert.Contains(t, r.Why, "leaves little of the timeout")
	assert.Contains(t, r.Do, "INFERA_ENGINE_READY_TIMEOUT=40m ")

	// The same, set explicitly to 30 minutes: the operator chose it.
	in := modelInput(dir, magicFUSE)
	in.ReadyDefault = false
	r = checkModelDir(in)
	assert.Equal(t, Pass, r.Status, r.Seen)
}

func TestModelDirLocalTooLarge(t *testing.T) {
	// 6 TB even from local disk: 32 minutes.
	dir := modelDir(t, map[string]int64{"a.safetensors": 3e12, "b.safetensors": 3e12})
	r := checkModelDir(modelInput(dir, magicExt4))
	require.Equal(t, Fail, r.Status, r.Seen)
	assert.Equal(t, Warn, r.Severity)
	assert.Equal(t, dir+" on ext4, 2 shards (*.safetensors), 6000 GB; estimated load 32m at ~3.1 GB/s from local disk; INFERA_ENGINE_READY_TIMEOUT is 30m (the default)", r.Seen)
	assert.Equal(t, "Even from local disk 6000 GB take a while to load. The worker would time out mid-load and restart forever, loading again each time.", r.Why)
	assert.Equal(t, "Set INFERA_ENGINE_READY_TIMEOUT=50m (the estimate plus half).", r.Do)
}

func TestModelDirStatfsFails(t *testing.T) {
	dir := modelDir(t, map[string]int64{"model.safetensors": 1e9})
	in := modelInput(dir, 0)
	in.Statfs = func(string) (FS, error) { return FS{}, errors.New("boom") }
	r := checkModelDir(in)
	assert.Equal(t, Pass, r.Status)
	assert.Equal(t, dir+" on an unknown filesystem, 1 shard (*.safetensors), 1.00 GB", r.Seen)
}

func TestModelDirRealStatfs(t *testing.T) {
	dir := modelDir(t, map[string]int64{"model.safetensors": 1e9})
	in := modelInput(dir, 0)
	in.Statfs = nil
	r := checkModelDir(in)
	assert.Equal(t, Pass, r.Status, r.Seen)
	fs, err := RealStatfs(dir)
	require.NoError(t, err)
	assert.Equal(t, dir+" on "+fs.Type+", 1 shard (*.safetensors), 1.00 GB", r.Seen)
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                 "0s",
		300 * time.Millisecond:            "1s",
		40 * time.Second:                  "40s",
		59*time.Second + time.Millisecond: "1m",
		90 * time.Second:                  "2m",
		8 * time.Minute:                   "8m",
		95 * time.Minute:                  "1h35m",
		2 * time.Hour:                     "2h",
		150 * time.Minute:                 "2h30m",
	} {
		assert.Equal(t, want, formatDuration(d), "%v", d)
	}
}

func TestFormatGB(t *testing.T) {
	for n, want := range map[uint64]string{
		0:       "0.00 GB",
		4.9e9:   "4.90 GB",
		16.06e9: "16.1 GB",
		300e9:   "300 GB",
		1.5e12:  "1500 GB",
	} {
		assert.Equal(t, want, formatGB(n), "%d", n)
	}
}
