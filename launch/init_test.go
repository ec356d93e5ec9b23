package launch

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/infera/infera-exec/internal/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The init under test runs in a child of the test binary (marked by
// initChildEnv, the worker's shell script as its value), so that becoming
// a subreaper and reaping every child never touches the test process.
// The tests wait on events only (a line from the worker, a stop or a
// continue reported by waitid, the end of a process): guard is not a
// budget but how long a test that can no longer pass waits before it
// says so.
const (
	initChildEnv = "INITPROC_TEST_CHILD"
	guard        = 2 * time.Minute
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(dropChildEnv); spec != "" {
		os.Exit(dropChild(spec))
	}
	if script := os.Getenv(initChildEnv); script != "" {
		os.Unsetenv(initChildEnv)
		grace, _ := time.ParseDuration(os.Getenv("INITPROC_TEST_GRACE"))
		dir := os.Getenv("INITPROC_TEST_DIR")
		if dir == "" {
			dir = "/"
		}
		if cg, ok := os.LookupEnv("INITPROC_TEST_CGROUP"); ok {
			// Become, as the pass runs it: the outcome is its log.
			if join := os.Getenv("INITPROC_TEST_JOIN"); join != "" {
				if err := os.WriteFile(filepath.Join(join, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(125)
				}
			}
			argv := append([]string{"sh", "-c", script, "sh"}, strings.Fields(os.Getenv("INITPROC_TEST_ARGS"))...)
			code := Become(InitSpec{Path: "/bin/sh", Argv: argv, Env: os.Environ(), Dir: dir, OOM: OOMWatch{Cgroup: cg}},
				logging.New(os.Stderr, false, false, nil))
			fmt.Fprintf(os.Stderr, "outcome={\"Code\":%d}\n", code)
			os.Exit(code)
		}
		out, err := Supervise(InitSpec{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: os.Environ(), Dir: dir,
			Group: os.Getenv("INITPROC_TEST_GROUP") == "1", Grace: grace}, func(s string) { fmt.Fprintln(os.Stderr, s) })
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

// initOpts is how the init under test is started.
type initOpts struct {
	group bool
	dir   string        // the worker's directory (InitSpec.Dir), and the one the init starts in
	grace time.Duration // InitSpec.Grace
	env   []string
}

// initRun is a running init with its worker.
type initRun struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // the worker's standard input
	lines  chan string    // the worker's stdout, line by line; closed at EOF, when every process holding it has ended
	stderr *os.File       // a file, not a pipe: an orphan holding it open must not hold up the test
	waited bool           // the init has been waited for (reaped)
}

func startInit(t *testing.T, script string, o initOpts) *initRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), initChildEnv+"="+script)
	cmd.Env = append(cmd.Env, o.env...)
	if o.group {
		cmd.Env = append(cmd.Env, "INITPROC_TEST_GROUP=1")
	}
	if o.grace != 0 {
		cmd.Env = append(cmd.Env, "INITPROC_TEST_GRACE="+o.grace.String())
	}
	if o.dir != "" {
		cmd.Env = append(cmd.Env, "INITPROC_TEST_DIR="+o.dir)
		cmd.Dir = o.dir // as the pass does: it chdirs there before it stays on as the init
	}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	r := &initRun{cmd: cmd, stdin: stdin, lines: make(chan string, 256), stderr: stderr}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	t.Cleanup(func() {
		defer stderr.Close()
		if r.waited {
			return // its pid may be another process's by now
		}
		// A test that stopped midway leaves the worker, and what it
		// started, waiting: their process groups end with the init (not
		// reaped yet, so its pid and its children's are still theirs).
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", cmd.Process.Pid))
		for _, f := range tasks {
			b, _ := os.ReadFile(f)
			for _, c := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(c); err == nil {
					syscall.Kill(-pid, syscall.SIGKILL)
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		cmd.Process.Kill()
		cmd.Process.Wait()
	})
	return r
}

// line waits for the worker's next line of output.
func (r *initRun) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-r.lines:
		if !ok {
			t.Fatalf("the worker's output ended; stderr: %s", r.errText())
		}
		return l
	case <-time.After(guard):
		t.Fatalf("no output from the worker in %v; stderr: %s", guard, r.errText())
	}
	return ""
}

// expect waits until every wanted line has come, in any order, passing
// over others (a spurious SIGURG, see TestForwardsEverySignal).
func (r *initRun) expect(t *testing.T, want ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	var seen []string
	for len(missing) > 0 {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("the worker's output ended, still expecting %v; stderr: %s", want, r.errText())
			}
			seen = append(seen, l)
			delete(missing, l)
		case <-time.After(guard):
			t.Fatalf("no %v from the worker in %v (seen %q); stderr: %s", want, guard, seen, r.errText())
		}
	}
}

// eof waits for the end of the worker's output: every process that holds
// it (the worker, its children, the init) has ended.
func (r *initRun) eof(t *testing.T) {
	t.Helper()
	for {
		select {
		case _, ok := <-r.lines:
			if !ok {
				return
			}
		case <-time.After(guard):
			t.Fatalf("the worker's output still open after %v; stderr: %s", guard, r.errText())
		}
	}
}

func (r *initRun) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, r.cmd.Process.Signal(sig))
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
	case <-time.After(guard):
		t.Fatalf("the init did not end within %v; stderr: %s\nprocesses: %s", guard, r.errText(), procTree(r.cmd.Process.Pid))
	}
	require.NoError(t, res.err)
	r.waited = true
	var out InitOutcome
	_, js, ok := strings.Cut(r.errText(), "outcome=")
	require.True(t, ok, "no outcome: %s", r.errText())
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(js)), &out))
	return res.st.ExitCode(), out
}

// procTree describes pid and its descendants (state, group, command), for
// a failure message.
func procTree(pid int) string {
	var b strings.Builder
	var walk func(pid int, depth int)
	walk = func(pid int, depth int) {
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		fmt.Fprintf(&b, "\n%s%d %s %q", strings.Repeat("  ", depth), pid, stat, strings.ReplaceAll(string(cmd), "\x00", " "))
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, f := range tasks {
			c, _ := os.ReadFile(f)
			for _, s := range strings.Fields(string(c)) {
				if n, err := strconv.Atoi(s); err == nil {
					walk(n, depth+1)
				}
			}
		}
	}
	walk(pid, 0)
	return b.String()
}

func (r *initRun) errText() string {
	b, _ := os.ReadFile(r.stderr.Name())
	return string(b)
}

// waitChild waits for a child of the test process to report state (CLD_STOPPED
// with unix.WSTOPPED, CLD_CONTINUED with unix.WCONTINUED) and returns the
// signal that stopped it (0 for a continue). The report is consumed; the
// child is not reaped.
func waitChild(t *testing.T, pid int, state int) syscall.Signal {
	t.Helper()
	type result struct {
		code, status int32
		err          error
	}
	done := make(chan result, 1)
	go func() {
		var info unix.Siginfo
		var err error
		for {
			if err = unix.Waitid(unix.P_PID, pid, &info, state, nil); err != unix.EINTR {
				break
			}
		}
		// si_status follows si_pid and si_uid in the SIGCHLD layout.
		status := *(*int32)(unsafe.Add(unsafe.Pointer(&info), 24))
		done <- result{info.Code, status, err}
	}()
	select {
	case res := <-done:
		require.NoError(t, res.err)
		want := map[int]int32{unix.WSTOPPED: 5, unix.WCONTINUED: 6}[state] // CLD_STOPPED, CLD_CONTINUED
		require.Equal(t, want, res.code, "si_code of pid %d", pid)
		if state == unix.WSTOPPED {
			return syscall.Signal(res.status)
		}
		return 0
	case <-time.After(guard):
		t.Fatalf("pid %d reported no state change within %v", pid, guard)
	}
	return 0
}

// idleFifo is where the shell workers of these tests idle until release
// writes a line for each (see idleLoop).
func idleFifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idle")
	require.NoError(t, unix.Mkfifo(p, 0o600))
	return p
}

// idleLoop is how a shell worker waits with its traps set: in dash's
// wait, which checks for a trapped signal with every signal blocked and
// then sleeps in sigsuspend, so a trap runs as soon as its signal comes.
// (A trap set while dash blocks in read(2) waits for the read to end if
// its signal comes just before the read starts.) What it waits for is a
// reader of $IDLE (opened for reading and writing, so never at its end):
// a signal that ends a reader (in group mode readers are in the group
// too) starts another, until release has made $IDLE.done and written a
// line for the reader to end on. The loop asks the file, not wait's
// status, which a trap can take the place of.
const idleLoop = `exec 3<>"$IDLE"
echo "$role ready $$"
while [ ! -e "$IDLE.done" ]; do
	sh -c 'read x <&3' & r=$!
	while kill -0 $r 2>/dev/null; do wait $r; done
done
exit 0
`

// release ends the idling of n shell processes. A process that sees
// $IDLE.done between two readers ends without reading: the line may find
// no reader (ENXIO, EPIPE), which is as good.
func release(t *testing.T, fifo string, n int) {
	t.Helper()
	require.NoError(t, os.WriteFile(fifo+".done", nil, 0o600))
	f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ENXIO) {
		return
	}
	require.NoError(t, err)
	defer f.Close()
	if _, err = f.WriteString(strings.Repeat("go\n", n)); !errors.Is(err, syscall.EPIPE) {
		require.NoError(t, err)
	}
}

func TestExitStatus(t *testing.T) {
	code, out := startInit(t, "exit 7", initOpts{}).wait(t)
	assert.Equal(t, 7, code)
	assert.Equal(t, 7, out.Code)
	assert.Zero(t, out.Signal)
}

func TestKilledBySignal(t *testing.T) {
	code, out := startInit(t, "kill -KILL $$", initOpts{}).wait(t)
	assert.Equal(t, 137, code, "128+SIGKILL, as a shell reports it")
	assert.Equal(t, syscall.SIGKILL, out.Signal)
}

// A worker that has no handler of its own dies of a forwarded SIGTERM,
// SIGINT, ..., and the init exits with 128+signal. Signal 32 too, where
// the relay carries it: a glibc program reserves it and dies of it.
func TestForwardsSignals(t *testing.T) {
	sigs := []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPWR}
	if relayAvailable {
		sigs = append(sigs, 32)
	}
	for _, sig := range sigs {
		t.Run(sig.String(), func(t *testing.T) {
			r := startInit(t, "echo ready; exec sleep 1000", initOpts{})
			require.Equal(t, "ready", r.line(t))
			r.signal(t, sig)
			code, out := r.wait(t)
			assert.Equal(t, 128+int(sig), code)
			assert.Equal(t, sig, out.Signal)
		})
	}
}

// A worker that handles the signal decides for itself.
func TestWorkerHandlesSignal(t *testing.T) {
	// The trap ends the worker's child too (SIGKILL: a child not yet
	// past its exec would lose a trapped SIGTERM), so nothing outlives the
	// test.
	r := startInit(t, `trap 'echo got-term; kill -KILL $s; exit 3' TERM; sleep 1000 & s=$!; echo "worker ready"; wait $s`, initOpts{})
	require.Equal(t, "worker ready", r.line(t))
	r.signal(t, syscall.SIGTERM)
	assert.Equal(t, "got-term", r.line(t))
	code, _ := r.wait(t)
	assert.Equal(t, 3, code)
}

// tourSignals are the signals a tour sends: every signal 1-31 that can be
// sent asynchronously (all but SIGKILL and SIGSTOP, which cannot be
// caught, SIGCHLD, the init's own, and SIGTSTP, SIGTTIN and SIGTTOU,
// which stop the worker and have TestJobControl), the synchronous ones
// (SIGSEGV, SIGBUS, ...) sent with kill() among them: 25 signals; then
// real-time ones (34, where the relay carries it).
func tourSignals() []syscall.Signal {
	var l []syscall.Signal
	for _, s := range Forwarded {
		switch s {
		case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
			continue
		}
		// 32 is glibc's own (thread cancellation): the printer, a glibc
		// shell, cannot trap it; TestForwardsSignals sends it.
		if s > 31 && s != 34 && s != 35 && s != 64 {
			continue
		}
		l = append(l, s)
	}
	return l
}

// The printer: a shell worker that traps each signal of $SIGS and prints
// "ROLE N" when signal N comes. In group mode the worker starts a second
// printer, the member, as a background job in its process group.
const printer = `if [ "$role" = worker ] && [ -n "$MEMBER" ]; then role=member sh -c "$PRINTER" & fi
for s in $SIGS; do trap "echo $role $s" "$s"; done
` + idleLoop

// Every signal that can be sent reaches the worker, or with Group every
// process of its group, and none of them ends the init, which exits with
// the worker's status when the tour is over. The tour goes one signal at
// a time: the next is sent when the last one's lines are in.
//
// Background jobs of a non-interactive shell ignore SIGINT and SIGQUIT
// (POSIX), so the member never reports those two. The Go runtime preempts
// its threads with SIGURG, so a worker may see a SIGURG nobody sent; a
// line for one passes unnoticed.
func TestForwardsEverySignal(t *testing.T) {
	sigs := tourSignals()
	require.Len(t, sigs[:25], 25)
	require.Equal(t, syscall.SIGSYS, sigs[24], "the 25 signals from 1 to 31")
	var nums []string
	for _, s := range sigs {
		nums = append(nums, strconv.Itoa(int(s)))
	}
	for _, group := range []bool{false, true} {
		t.Run(map[bool]string{false: "init", true: "init-group"}[group], func(t *testing.T) {
			idle := idleFifo(t)
			env := []string{"SIGS=" + strings.Join(nums, " "), "IDLE=" + idle, "PRINTER=" + printer}
			printers := 1
			if group {
				env = append(env, "MEMBER=1")
				printers = 2
			}
			r := startInit(t, "role=worker; "+printer, initOpts{group: group, env: env})
			ready := []string{"worker ready"}
			if group {
				ready = append(ready, "member ready")
			}
			for len(ready) > 0 {
				l := r.line(t)
				for i, w := range ready {
					if strings.HasPrefix(l, w+" ") {
						ready = append(ready[:i], ready[i+1:]...)
						break
					}
				}
			}
			// Signal 33 is the Go runtime's: it does not reach the worker,
			// and must not end the init (the tour after it shows it did not).
			r.signal(t, sigRuntime)
			for _, s := range sigs {
				r.signal(t, s)
				want := []string{fmt.Sprintf("worker %d", s)}
				if group && s != syscall.SIGINT && s != syscall.SIGQUIT {
					want = append(want, fmt.Sprintf("member %d", s))
				}
				r.expect(t, want...)
			}
			release(t, idle, printers)
			code, out := r.wait(t)
			assert.Equal(t, 0, code, "stderr: %s", r.errText())
			assert.Zero(t, out.Signal)
		})
	}
}

// The init leaves its start directory for / before it starts the worker,
// which runs in its own: the directory's filesystem can be unmounted while
// the worker runs elsewhere.
func TestInitLeavesStartDirectory(t *testing.T) {
	dir := t.TempDir()
	idle := idleFifo(t)
	r := startInit(t, `pwd; echo "init=$(readlink /proc/$PPID/cwd)"; role=worker; `+idleLoop,
		initOpts{dir: dir, env: []string{"IDLE=" + idle}})
	real, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	assert.Equal(t, real, r.line(t), "the worker's directory")
	assert.Equal(t, "init=/", r.line(t), "the init's, read by the worker")
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", r.cmd.Process.Pid))
	require.NoError(t, err)
	assert.Equal(t, "/", cwd, "the init's, read by the test")
	release(t, idle, 1)
	code, _ := r.wait(t)
	assert.Equal(t, 0, code)
}

// SIGTSTP, SIGTTIN and SIGTTOU sent to the init stop the worker's group
// (--init-group) and then the init; SIGCONT resumes both. The stops and
// continues are the kernel's reports to a parent: the test's of the init,
// and of a helper the test starts into the worker's process group.
func TestJobControl(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU} {
		t.Run(sig.String(), func(t *testing.T) {
			idle := idleFifo(t)
			r := startInit(t, `trap 'echo worker cont' CONT; role=worker; `+idleLoop, initOpts{group: true, env: []string{"IDLE=" + idle}})
			f := strings.Fields(r.line(t))
			require.Len(t, f, 3)
			pgid, err := strconv.Atoi(f[2])
			require.NoError(t, err)

			member := exec.Command("sleep", "1000")
			member.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
			require.NoError(t, member.Start())
			t.Cleanup(func() { member.Process.Kill(); member.Wait() })

			init := r.cmd.Process.Pid
			r.signal(t, sig)
			assert.Equal(t, syscall.SIGSTOP, waitChild(t, init, unix.WSTOPPED), "the init stops itself")
			assert.Equal(t, sig, waitChild(t, member.Process.Pid, unix.WSTOPPED), "the group got %v", sig)

			r.signal(t, syscall.SIGCONT)
			waitChild(t, init, unix.WCONTINUED)
			waitChild(t, member.Process.Pid, unix.WCONTINUED)
			r.expect(t, "worker cont")

			// The helper is the test's child, not the init's: it leaves
			// the group before the worker ends, or it would count as a
			// member until the test reaped it.
			member.Process.Kill()
			member.Wait()
			release(t, idle, 1)
			code, out := r.wait(t)
			assert.Equal(t, 0, code)
			assert.Zero(t, out.GroupSignal, "nothing of the group outlived the worker")
		})
	}
}

// Without --init-group the stop goes to the worker alone; the init stops
// too and forwards the SIGCONT that resumes it.
func TestJobControlWorkerOnly(t *testing.T) {
	idle := idleFifo(t)
	r := startInit(t, `trap 'echo worker tstp' TSTP; trap 'echo worker cont' CONT; role=worker; `+idleLoop, initOpts{env: []string{"IDLE=" + idle}})
	require.Contains(t, r.line(t), "worker ready")
	r.signal(t, syscall.SIGTSTP)
	r.expect(t, "worker tstp")
	assert.Equal(t, syscall.SIGSTOP, waitChild(t, r.cmd.Process.Pid, unix.WSTOPPED))
	r.signal(t, syscall.SIGCONT)
	waitChild(t, r.cmd.Process.Pid, unix.WCONTINUED)
	r.expect(t, "worker cont")
	release(t, idle, 1)
	code, _ := r.wait(t)
	assert.Equal(t, 0, code)
}

// With --init-group, when the worker ends the rest of its group gets
// SIGTERM, and the init waits for it to end before it exits with the
// worker's status: no orphan outlives it.
func TestGroupEndsWithWorker(t *testing.T) {
	idle := idleFifo(t)
	// The member waits for one reader (idleLoop would start another when
	// SIGTERM ends the first, and that one, started after the group got
	// SIGTERM, would last until SIGKILL). It starts the reader before it
	// sets its trap: a child forked with the trap's handler loses a signal
	// that comes before its exec.
	r := startInit(t, `sh -c 'exec 3<>"$IDLE"; sh -c "read x <&3" & r=$!; trap "echo member got TERM; exit 0" TERM; echo "member ready $$"; wait $r' &
read x; exit 5`, initOpts{group: true, env: []string{"IDLE=" + idle}})
	require.Contains(t, r.line(t), "member ready")
	_, err := io.WriteString(r.stdin, "exit\n") // the worker ends
	require.NoError(t, err)
	assert.Equal(t, "member got TERM", r.line(t))
	code, out := r.wait(t)
	assert.Equal(t, 5, code, "the worker's status")
	assert.Equal(t, syscall.SIGTERM, out.GroupSignal, "stderr: %s", r.errText())
	r.eof(t) // every holder of the worker's stdout has ended
}

// A member that ignores SIGTERM gets SIGKILL once the grace period is
// over (a short one here; GroupGrace by default).
func TestGroupKilledAfterGrace(t *testing.T) {
	idle := idleFifo(t)
	r := startInit(t, `role=member sh -c "trap 'echo member ignores TERM' TERM; $IDLELOOP" &
read x; exit 0`, initOpts{group: true, grace: 100 * time.Millisecond, env: []string{"IDLE=" + idle, "IDLELOOP=" + idleLoop}})
	require.Contains(t, r.line(t), "member ready")
	_, err := io.WriteString(r.stdin, "exit\n")
	require.NoError(t, err)
	code, out := r.wait(t)
	assert.Equal(t, 0, code)
	assert.Equal(t, syscall.SIGKILL, out.GroupSignal)
	r.eof(t) // the member, killed, no longer holds the output
}

// An orphaned grandchild is reparented to the init (a subreaper here, not
// PID 1), which reaps its zombie. The orphan's parent is gone (the shell
// waited for it) before the orphan is killed, and the worker ends only
// after the orphan's end has been reported (pidfd): its zombie is the
// init's to reap, and is reaped, by the time the init is done.
func TestReapsOrphans(t *testing.T) {
	r := startInit(t, `o=$(sh -c 'sleep 1000 </dev/null >/dev/null 2>&1 & echo $!'); echo "$o"; read x`, initOpts{})
	orphan, err := strconv.Atoi(r.line(t))
	require.NoError(t, err)
	pidfd, err := unix.PidfdOpen(orphan, 0)
	require.NoError(t, err)
	defer unix.Close(pidfd)
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", orphan))
	require.NoError(t, err)
	_, rest, _ := strings.Cut(string(stat), ") ")
	assert.Equal(t, strconv.Itoa(r.cmd.Process.Pid), strings.Fields(rest)[1], "the orphan's parent is the init")

	require.NoError(t, unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0))
	ended := make(chan error, 1)
	go func() {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if err != unix.EINTR {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		require.NoError(t, err)
	case <-time.After(guard):
		t.Fatal("the orphan did not end")
	}
	_, err = io.WriteString(r.stdin, "done\n")
	require.NoError(t, err)
	code, out := r.wait(t)
	assert.Equal(t, 0, code)
	assert.Equal(t, 1, out.Reaped, "the orphaned sleep")
}

// With Group, a signal reaches every process of the worker's group, not
// only the worker. The worker's background sleep holds its output: the
// output ends when the sleep has ended.
func TestGroup(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprintf("group=%t", group), func(t *testing.T) {
			r := startInit(t, `sleep 1000 & echo "$!"; wait`, initOpts{group: group})
			pid, err := strconv.Atoi(r.line(t))
			require.NoError(t, err)
			t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
			r.signal(t, syscall.SIGTERM)
			code, _ := r.wait(t)
			assert.Equal(t, 143, code)
			if group {
				r.eof(t)
			} else {
				stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				require.NoError(t, err, "only the worker got the signal")
				assert.NotContains(t, string(stat), ") Z ", "only the worker got the signal")
			}
		})
	}
}

func TestStartFails(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	_, err = Supervise(InitSpec{Path: "/nonexistent/worker", Argv: []string{"worker"}, Dir: "/"}, func(string) {})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "start /nonexistent/worker")
	after, _ := os.Getwd()
	assert.Equal(t, wd, after, "a start that fails leaves the working directory as it was")
}
