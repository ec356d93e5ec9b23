package patches

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/launch"
)

// countingPython is an interpreter that records each start in log, then
// runs python3 (after sleeping sleep seconds, to be stopped mid-way).
func countingPython(t *testing.T, sleep string) (string, string) {
	t.Helper()
	py := python(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "starts")
	script := filepath.Join(dir, "python3")
	write(t, script, "#!/bin/sh\necho start >> "+log+"\nsleep "+sleep+"\nexec "+py+" \"$@\"\n")
	require.NoError(t, os.Chmod(script, 0o755))
	return script, log
}

func starts(t *testing.T, log string) int {
	data, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(data), "start")
}

// earlyInput is the patch step's input for a payload without definitions
// of its own: the built-in set, whose packages (vllm, sglang) are looked
// for on PYTHONPATH=site.
func earlyInput(t *testing.T, py, site string) Input {
	return Input{Config: config.Config{PayloadRoot: t.TempDir()}, Python: py, Env: envWith("PYTHONPATH", site), Worker: &launch.Outcome{Cwd: "/"},
		DryRun: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// The probe started ahead answers the patch step: one interpreter start.
func TestEarlyProbeAnswersRun(t *testing.T) {
	py, log := countingPython(t, "0")
	site := t.TempDir()
	write(t, filepath.Join(site, "vllm/__init__.py"), "")
	in := earlyInput(t, py, site)
	in.Early = StartEarly(context.Background(), in)
	require.NotNil(t, in.Early)
	out, err := Run(context.Background(), in)
	require.NoError(t, err)
	assert.True(t, out.Location.Packages["vllm"].Found)
	assert.Equal(t, 1, starts(t, log), "the patch step ran the interpreter again")
}

// A variable that changes where Python imports from, edited after the
// early start (a later step's environment edit): its answer is dropped
// and the patch step asks again, with the final environment.
func TestEarlyProbeDroppedWhenEnvironmentChanged(t *testing.T) {
	py, log := countingPython(t, "0")
	old, site := t.TempDir(), t.TempDir()
	write(t, filepath.Join(site, "vllm/__init__.py"), "")
	in := earlyInput(t, py, old)
	in.Early = StartEarly(context.Background(), in)
	require.Eventually(t, func() bool { return starts(t, log) == 1 }, 10*time.Second, 5*time.Millisecond)
	in.Env.Set("PYTHONPATH", site) // the pass's own environment, edited later
	out, err := Run(context.Background(), in)
	require.NoError(t, err)
	assert.True(t, out.Location.Packages["vllm"].Found, "the answer for the old PYTHONPATH was used")
	assert.Equal(t, filepath.Join(site, "vllm"), out.Location.Packages["vllm"].Dir)
	assert.Equal(t, 2, starts(t, log))
}

// A pass that ends before its patch step stops the probe: the interpreter
// is killed and reaped at once, not waited for.
func TestEarlyProbeStopped(t *testing.T) {
	py, log := countingPython(t, "30")
	in := earlyInput(t, py, t.TempDir())
	e := StartEarly(context.Background(), in)
	require.NotNil(t, e)
	require.Eventually(t, func() bool { return starts(t, log) == 1 }, 10*time.Second, 10*time.Millisecond)
	t0 := time.Now()
	e.Stop()
	assert.Less(t, time.Since(t0), 10*time.Second, "Stop waited for the interpreter")
	e.Stop() // twice is harmless
	var nilEarly *Early
	nilEarly.Stop()
}

// Nothing to locate, nothing started.
func TestEarlyProbeNotStarted(t *testing.T) {
	py, log := countingPython(t, "0")
	in := earlyInput(t, py, t.TempDir())
	in.Config.SkipEnginePatches = true
	assert.Nil(t, StartEarly(context.Background(), in))
	in.Config.SkipEnginePatches, in.Python = false, ""
	assert.Nil(t, StartEarly(context.Background(), in))
	assert.Equal(t, 0, starts(t, log))
}

// A restart: the cached answer still holds, so StartEarly takes it at
// once (no interpreter, nothing left running) and Run uses it.
func TestEarlyProbeFromCache(t *testing.T) {
	py, log := countingPython(t, "0")
	site := t.TempDir()
	write(t, filepath.Join(site, "vllm/__init__.py"), "")
	in := earlyInput(t, py, site)
	in.DryRun, in.StateDir = false, t.TempDir()
	time.Sleep(fileid.RacyWindow) // inputs written within the clock's granularity are not cached
	first, err := Run(context.Background(), in)
	require.NoError(t, err)
	require.False(t, first.Location.Cached)
	require.Equal(t, 1, starts(t, log))

	in.Early = StartEarly(context.Background(), in)
	require.NotNil(t, in.Early)
	select {
	case <-in.Early.done:
	default:
		t.Fatal("a cached answer left the early probe running")
	}
	out, err := Run(context.Background(), in)
	require.NoError(t, err)
	assert.True(t, out.Location.Cached)
	assert.Equal(t, filepath.Join(site, "vllm"), out.Location.Packages["vllm"].Dir)
	assert.Equal(t, 1, starts(t, log), "the interpreter ran again")
}
