package launch

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The init under test runs in a child of the test binary (marked by
// initChildEnv, the worker's shell script as its value), so that becoming
// a subreaper and reaping every child never touches the test process.
const initChildEnv = "INITPROC_TEST_CHILD"

func TestMain(m *testing.M) {
	if script := os.Getenv(initChildEnv); script != "" {
		os.Unsetenv(initChildEnv)
		out, err := Supervise(InitSpec{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: os.Environ(), Dir: "/",
			Group: os.Getenv("INITPROC_TEST_GROUP") == "1"}, func(s string) { fmt.Fprintln(os.Stderr, s) })
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(125)
		}
		b, _ := json.Marshal(out)
		fmt.Fprintf(os.Stderr, "outcome=%s\n", b)
		os.Exit(out.Code)
	}
	os.Exit(m.Run())
}

// initRun is a running init with its worker.
type initRun struct {
	cmd    *exec.Cmd
	lines  chan string // the worker's stdout, line by line
	stderr *os.File    // a file, not a pipe: an orphan holding it open must not hold up the test
}

func startInit(t *testing.T, script string, group bool) *initRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), initChildEnv+"="+script)
	if group {
		cmd.Env = append(cmd.Env, "INITPROC_TEST_GROUP=1")
	}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	r := &initRun{cmd: cmd, lines: make(chan string, 16), stderr: stderr}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Process.Wait(); stderr.Close() })
	return r
}

// line waits for the worker's next line of output.
func (r *initRun) line(t *testing.T) string {
	t.Helper()
	select {
	case l := <-r.lines:
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("no output from the worker in 10s; stderr: %s", r.errText())
	}
	return ""
}

// wait returns the init's exit code and its outcome line.
func (r *initRun) wait(t *testing.T) (int, InitOutcome) {
	t.Helper()
	type result struct {
		st  *os.ProcessState
		err error
	}
	done := make(chan result, 1)
	go func() { st, err := r.cmd.Process.Wait(); done <- result{st, err} }()
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the init did not end within 10s; stderr: %s", r.errText())
	}
	require.NoError(t, res.err)
	var out InitOutcome
	_, js, ok := strings.Cut(r.errText(), "outcome=")
	require.True(t, ok, "no outcome: %s", r.errText())
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(js)), &out))
	return res.st.ExitCode(), out
}

func (r *initRun) errText() string {
	b, _ := os.ReadFile(r.stderr.Name())
	return string(b)
}

func TestExitStatus(t *testing.T) {
	code, out := startInit(t, "exit 7", false).wait(t)
	assert.Equal(t, 7, code)
	assert.Equal(t, 7, out.Code)
	assert.Zero(t, out.Signal)
}

func TestKilledBySignal(t *testing.T) {
	code, out := startInit(t, "kill -KILL $$", false).wait(t)
	assert.Equal(t, 137, code, "128+SIGKILL, as a shell reports it")
	assert.Equal(t, syscall.SIGKILL, out.Signal)
}

// A worker that has no handler of its own dies of a forwarded SIGTERM or
// SIGINT, and the init exits with 128+signal.
func TestForwardsSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			r := startInit(t, "echo ready; exec sleep 30", false)
			require.Equal(t, "ready", r.line(t))
			require.NoError(t, r.cmd.Process.Signal(sig))
			code, out := r.wait(t)
			assert.Equal(t, 128+int(sig), code)
			assert.Equal(t, sig, out.Signal)
		})
	}
}

// A worker that handles the signal decides for itself.
func TestWorkerHandlesSignal(t *testing.T) {
	r := startInit(t, `trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done`, false)
	require.Equal(t, "ready", r.line(t))
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, "got-term", r.line(t))
	code, _ := r.wait(t)
	assert.Equal(t, 3, code)
}

// An orphaned grandchild is reparented to the init (a subreaper here, not
// PID 1) and its zombie reaped while the worker still runs.
func TestReapsOrphans(t *testing.T) {
	r := startInit(t, `sh -c 'sleep 0.1 &'; sleep 1
z=0
for f in /proc/[0-9]*/stat; do
  set -- $(cat "$f" 2>/dev/null)
  [ "$3" = Z ] && [ "$4" = "$PPID" ] && z=$((z+1))
done
echo "zombies=$z"`, false)
	assert.Equal(t, "zombies=0", r.line(t))
	code, out := r.wait(t)
	assert.Equal(t, 0, code)
	assert.Equal(t, 1, out.Reaped, "the orphaned sleep")
}

// With Group, a signal reaches every process of the worker's group, not
// only the worker.
func TestGroup(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprintf("group=%t", group), func(t *testing.T) {
			r := startInit(t, `sleep 30 & echo "$!"; wait`, group)
			pid, err := strconv.Atoi(r.line(t))
			require.NoError(t, err)
			t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
			require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
			code, _ := r.wait(t)
			assert.Equal(t, 143, code)
			alive := func() bool {
				stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				return err == nil && !strings.Contains(string(stat), ") Z ")
			}
			if group {
				deadline := time.Now().Add(5 * time.Second)
				for alive() && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				assert.False(t, alive(), "the worker's background sleep got the signal too")
			} else {
				assert.True(t, alive(), "only the worker got the signal")
			}
		})
	}
}

func TestStartFails(t *testing.T) {
	_, err := Supervise(InitSpec{Path: "/nonexistent/worker", Argv: []string{"worker"}, Dir: "/"}, func(string) {})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "start /nonexistent/worker")
}
