package containers_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
)

// The recipe's command lines, without a runtime: run.sh is run with a
// stand-in for docker/podman that records each argv it is given (and says
// that no volume exists yet). TestRuntime runs the same script in podman.

const (
	engineImage  = "registry.example/rocm/vllm:v1"
	overlayImage = "registry.example/infera/overlay:v1"
)

var worker = []string{"python3", "-m", "infera.engine.vllm", "--model", "/models/X"}

// recipe runs run.sh with env (and nothing else of this process's
// environment but PATH) and returns the argv of each runtime call, its
// stderr and its exit code.
func recipe(t *testing.T, env map[string]string, args ...string) (calls [][]string, stderr string, code int) {
	t.Helper()
	dir := t.TempDir()
	fake := filepath.Join(dir, "cli")
	require.NoError(t, os.WriteFile(fake, []byte(`#!/bin/sh
n=$(ls "$CALLS" | wc -l)
printf '%s\0' "$@" > "$CALLS/$n"
[ "$1 $2" = "volume inspect" ] && exit 1
exit 0
`), 0o755))
	callDir := filepath.Join(dir, "calls")
	require.NoError(t, os.Mkdir(callDir, 0o755))
	cmd := exec.Command("./run.sh", args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CONTAINER_CLI=" + fake, "CALLS=" + callDir,
		"HOST_LIBIONIC_DIR=" + filepath.Join(dir, "no-libionic")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	for i := 0; ; i++ {
		data, err := os.ReadFile(filepath.Join(callDir, strconv.Itoa(i)))
		if err != nil {
			break
		}
		argv := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
		calls = append(calls, argv)
	}
	return calls, errb.String(), code
}

// engineCall runs `run.sh engine` and splits its one runtime call into the
// options before the image and infera-exec's command line after it,
// which must parse with the binary's own parser.
func engineCall(t *testing.T, env map[string]string, opts ...string) (runtimeOpts []string, shim config.Options) {
	t.Helper()
	args := append(append([]string{"engine", engineImage}, opts...), "--")
	calls, stderr, code := recipe(t, env, append(args, worker...)...)
	require.Equal(t, 0, code, stderr)
	require.Len(t, calls, 1, stderr)
	argv := calls[0]
	require.Equal(t, "run", argv[0])
	i := slices.Index(argv, engineImage)
	require.Positive(t, i, "the image in %q", argv)
	shim, err := config.ParseArgs(argv[i+1:])
	require.NoError(t, err, "infera-exec's command line %q", argv[i+1:])
	assert.Equal(t, worker, shim.Command)
	assert.Contains(t, stderr, "+ ", "the command is printed")
	return argv[1:i], shim
}

func TestRecipeEngineDefaults(t *testing.T) {
	opts, shim := engineCall(t, map[string]string{"DEVICES": "none"}, "--name", "vllm", "-d")
	assert.Equal(t, []string{
		"--entrypoint", "/overlay/bin/infera-exec",
		"-v", "infera-overlay:/overlay:ro",
		"--ulimit", "nofile=1048576:1048576",
		"--pids-limit", "-1",
		"--network", "host",
		"--ipc", "host",
		"--name", "vllm", "-d",
	}, opts)
	assert.True(t, shim.Init, "infera-exec --init by default")
}

func TestRecipeEngineSettings(t *testing.T) {
	lib := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(lib, "libionic.so"), nil, 0o644))
	opts, shim := engineCall(t, map[string]string{
		"OVERLAY_VOLUME": "ov-2", "SHM_SIZE": "16g", "NOFILE": "65536", "NPROC": "4096", "PIDS_LIMIT": "100000",
		"NETWORK": "bridge", "MODELS": "/mnt/models", "HOST_LIBIONIC_DIR": lib,
		"DEVICES": "/dev/kfd /dev/dri /dev/infiniband",
	}, "-p", "8000:8000")
	line := strings.Join(opts, " ")
	for _, want := range []string{
		"-v ov-2:/overlay:ro",
		"--ulimit nofile=65536:65536 --ulimit nproc=4096:4096",
		"--pids-limit 100000 --network bridge",
		"--tmpfs /dev/shm:rw,nosuid,nodev,exec,size=16g",
		"--device /dev/kfd --device /dev/dri --device /dev/infiniband",
		"--cap-add IPC_LOCK --ulimit memlock=-1:-1",
		"-v " + lib + ":/host-libionic:ro",
		"-v /mnt/models:/models:ro",
		"-p 8000:8000",
	} {
		assert.Contains(t, line, want)
	}
	assert.NotContains(t, line, "--ipc")
	assert.True(t, shim.Init)
}

// Devices: GPUs alone get no RDMA capability; with DEVICES=auto only what
// exists is passed (so a machine without /dev/kfd gets no --device).
func TestRecipeDevices(t *testing.T) {
	opts, _ := engineCall(t, map[string]string{"DEVICES": "/dev/kfd /dev/dri"})
	line := strings.Join(opts, " ")
	assert.Contains(t, line, "--device /dev/kfd --device /dev/dri")
	assert.NotContains(t, line, "IPC_LOCK")
	assert.NotContains(t, line, "memlock")
	assert.NotContains(t, line, "host-libionic")

	opts, _ = engineCall(t, nil)
	for _, d := range []string{"/dev/kfd", "/dev/dri", "/dev/infiniband"} {
		_, err := os.Stat(d)
		assert.Equal(t, err == nil, slices.Contains(opts, d), "--device %s exactly when it exists", d)
	}
}

// INIT: one init, never two.
func TestRecipeInit(t *testing.T) {
	opts, shim := engineCall(t, map[string]string{"INIT": "runtime", "DEVICES": "none"})
	assert.Contains(t, opts, "--init", "the runtime's init")
	assert.False(t, shim.Init, "and not infera-exec's")

	opts, shim = engineCall(t, map[string]string{"INIT": "none", "DEVICES": "none"})
	assert.NotContains(t, opts, "--init")
	assert.False(t, shim.Init)

	_, stderr, code := recipe(t, map[string]string{"INIT": "tini"}, append([]string{"engine", engineImage, "--"}, worker...)...)
	assert.Equal(t, 64, code)
	assert.Contains(t, stderr, "INIT=tini")
}

func TestRecipeInstall(t *testing.T) {
	calls, stderr, code := recipe(t, map[string]string{"NPROC": "4096"}, "install", overlayImage)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, [][]string{
		{"volume", "inspect", "infera-overlay"},
		{"volume", "create", "infera-overlay"},
		{"run", "--rm", "--network", "none", "--ulimit", "nofile=1048576:1048576", "--ulimit", "nproc=4096:4096",
			"-v", "infera-overlay:/overlay", overlayImage},
	}, calls)
	// The overlay image's own entrypoint and command do the install:
	// nothing follows the image.
}

func TestRecipeUsage(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"serve"},
		{"install"},
		{"install", overlayImage, "extra"},
		{"engine", engineImage, "--name", "x"}, // no "--"
		{"engine", engineImage, "--name", "x", "--"}, // no command
	} {
		calls, _, code := recipe(t, nil, args...)
		assert.Equal(t, 64, code, "%q", args)
		assert.Empty(t, calls, "%q runs nothing", args)
	}
}

// DRY_RUN=1 prints the commands, quoted for a shell, and runs nothing.
func TestRecipeDryRun(t *testing.T) {
	calls, stderr, code := recipe(t, map[string]string{"DRY_RUN": "1", "DEVICES": "none"},
		"engine", engineImage, "-e", "NOTE=it's here", "--", "python3", "-c", `print("a b")`)
	require.Equal(t, 0, code, stderr)
	assert.Empty(t, calls)
	assert.Regexp(t, `(?m)^\+ \S+/cli run --entrypoint /overlay/bin/infera-exec .* -e 'NOTE=it'\\''s here' `+
		strings.ReplaceAll(engineImage, ".", `\.`)+` --init python3 -c 'print\("a b"\)'$`, stderr)
}
