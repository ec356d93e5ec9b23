package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infera/infera-exec/internal/memcg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const oomLine = "killed by the kernel's OOM killer"

// fakeCgroup is a cgroup filesystem root holding one group's memory
// files, v2 or v1, with the OOM-kill count at 3; it returns the root and
// the counter's file, which the worker raises to play the kernel.
func fakeCgroup(t *testing.T, v1 bool) (root, counter string) {
	t.Helper()
	root = t.TempDir()
	dir, limit, events, content := root, "memory.max", "memory.events", "low 0\nhigh 0\nmax 9\noom 4\noom_kill 3\noom_group_kill 0\n"
	if v1 {
		dir, limit, events, content = filepath.Join(root, "memory"), "memory.limit_in_bytes", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, limit), []byte("103079215104\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, events), []byte(content), 0o644))
	return root, filepath.Join(dir, events)
}

// model is a model directory of two safetensors shards, 1.5 GB in all
// (sparse), and a .bin the engine would not load.
func model(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, size := range map[string]int64{"model-00001-of-00002.safetensors": 1e9, "model-00002-of-00002.safetensors": 5e8, "pytorch_model.bin": 7e9} {
		f, err := os.Create(filepath.Join(dir, name))
		require.NoError(t, err)
		require.NoError(t, f.Truncate(size))
		require.NoError(t, f.Close())
	}
	return dir
}

// raise is the worker's part: the kernel's count going up by one, as
// the OOM killer's would.
func raise(counter string) string {
	return fmt.Sprintf(`sed -i 's/^oom_kill 3$/oom_kill 4/' %s`, counter)
}

func runBecome(t *testing.T, script, cgroup, args string) (int, string) {
	t.Helper()
	r := startInit(t, script, initOpts{env: []string{"INITPROC_TEST_CGROUP=" + cgroup, "INITPROC_TEST_ARGS=" + args}})
	code, _ := r.wait(t)
	return code, r.errText()
}

func oomLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, oomLine) {
			out = append(out, l)
		}
	}
	return out
}

func TestOOMKillSaid(t *testing.T) {
	for _, v1 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v1=%v", v1), func(t *testing.T) {
			root, counter := fakeCgroup(t, v1)
			m := model(t)
			code, log := runBecome(t, raise(counter)+"; kill -KILL $$", root, "--model "+m)
			assert.Equal(t, 137, code)
			lines := oomLines(log)
			require.Len(t, lines, 1, "one line: %s", log)
			l := lines[0]
			assert.True(t, strings.HasPrefix(l, "infera-exec: error: init: the worker (pid "), l)
			assert.Contains(t, l, "its memory cgroup "+filepath.Dir(counter)+" counted 1 OOM kill(s) while it ran")
			limit := "memory.max"
			if v1 {
				limit = "memory.limit_in_bytes"
			}
			assert.Contains(t, l, "the container's memory limit is 96Gi ("+limit+")")
			assert.Contains(t, l, fmt.Sprintf("the model %s holds 1.5 GB in 2 *.safetensors file(s); exit 137", m))
			assert.NotContains(t, log, "was killed by SIGKILL", "the OOM line replaces the plain one")
		})
	}
}

func TestOOMKillModelUnknown(t *testing.T) {
	root, counter := fakeCgroup(t, false)
	_, log := runBecome(t, raise(counter)+"; kill -KILL $$", root, "--model meta-llama/Llama-3.1-8B")
	require.Len(t, oomLines(log), 1, log)
	assert.Contains(t, log, "the model meta-llama/Llama-3.1-8B is a hub id, its size on disk is not known here")

	root, counter = fakeCgroup(t, false)
	gone := filepath.Join(t.TempDir(), "gone")
	_, log = runBecome(t, raise(counter)+"; kill -KILL $$", root, "--model "+gone)
	require.Len(t, oomLines(log), 1, log)
	assert.Contains(t, log, "the model directory "+gone+" could not be read: open "+gone+": no such file or directory")
}

// A SIGKILL the count does not account for, an OOM kill of another
// process while the worker ended by itself, and no cgroup to read: the
// init says nothing of the OOM killer.
func TestNoOOMLine(t *testing.T) {
	root, counter := fakeCgroup(t, false)
	code, log := runBecome(t, "kill -KILL $$", root, "--model "+model(t))
	assert.Equal(t, 137, code)
	assert.Empty(t, oomLines(log), log)
	assert.Contains(t, log, "was killed by SIGKILL (killed); exit 137")

	code, log = runBecome(t, raise(counter)+"; exit 3", root, "--model "+model(t))
	assert.Equal(t, 3, code)
	assert.Empty(t, oomLines(log), log)

	_, log = runBecome(t, "kill -KILL $$", t.TempDir(), "")
	assert.Empty(t, oomLines(log), log)
}

// The kernel's own OOM killer, in a memory cgroup of 128Mi made for the
// test below this process's own: the init joins it, and its worker
// allocates 1 GiB.
func TestOOMKillReal(t *testing.T) {
	const enable = "needs root and a writable memory cgroup (cgroup v1's memory hierarchy, or v2 with the memory controller enabled for the test's cgroup's children): run the tests as root, as CI does"
	if os.Geteuid() != 0 {
		t.Skip(enable)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 for the memory hog (apt-get install python3)")
	}
	own := memcg.Find("/sys/fs/cgroup")
	dir := filepath.Join(own.Dir, fmt.Sprintf("infera-oom-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("%s (mkdir %s: %v)", enable, dir, err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	limit, swap := "memory.max", "memory.swap.max"
	if own.V1 {
		limit, swap = "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
	}
	if err := os.WriteFile(filepath.Join(dir, limit), []byte("134217728"), 0); err != nil {
		t.Skipf("%s (%s: %v)", enable, limit, err)
	}
	// No swap to escape to: over the limit is the OOM killer. A kernel
	// without swap accounting has no such file (nor swap to account).
	swapTo := "0"
	if own.V1 {
		swapTo = "134217728" // memory and swap together
	}
	if err := os.WriteFile(filepath.Join(dir, swap), []byte(swapTo), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s (%s: %v)", enable, swap, err)
	}
	m := model(t)
	// The worker makes itself the OOM killer's first choice, then
	// allocates and touches 1 GiB.
	script := `echo 1000 > /proc/self/oom_score_adj; exec python3 -c 'b = b"x" * (1 << 30); print(len(b))'`
	r := startInit(t, script, initOpts{env: []string{"INITPROC_TEST_CGROUP=/sys/fs/cgroup", "INITPROC_TEST_JOIN=" + dir, "INITPROC_TEST_ARGS=--model " + m}})
	code, _ := r.wait(t)
	log := r.errText()
	require.Equal(t, 137, code, "the hog was not killed: %s", log)
	lines := oomLines(log)
	require.Len(t, lines, 1, log)
	t.Log(lines[0])
	assert.Contains(t, lines[0], "its memory cgroup "+dir+" counted 1 OOM kill(s)")
	assert.Contains(t, lines[0], "the container's memory limit is 128Mi ("+limit+")")
	assert.Contains(t, lines[0], "the model "+m+" holds 1.5 GB in 2 *.safetensors file(s)")
}
