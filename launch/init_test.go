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

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/sigstart"
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
	if StarterCall(os.Args, os.Getenv) {
		os.Exit(Starter(os.Args))
	}
	if script := os.Getenv(initChildEnv); script != "" {
		os.Unsetenv(initChildEnv)
		if os.Getenv("INITPROC_TEST_BUSY") == "1" {
			// Load on the init's own runtime: a goroutine that never
			// yields, which the runtime preempts with SIGURG every 10 ms
			// (sysmon) and whenever the collector runs.
			go func() {
				for x := 0; ; x++ {
					_ = x * x
				}
			}()
		}
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
		spec := InitSpec{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: os.Environ(), Dir: dir,
			Group: os.Getenv("INITPROC_TEST_GROUP") == "1", Grace: grace}
		spec.Self, _ = os.Executable() // as the pass sets it: absolute, since the init moves to /
		if argv := strings.Fields(os.Getenv("INITPROC_TEST_ARGV")); len(argv) > 0 {
			// A worker that is not a shell (dash clears its mask at start).
			spec.Path, _ = exec.LookPath(argv[0])
			spec.Argv = argv
		}
		ign, _ := strconv.ParseUint(os.Getenv("INITPROC_TEST_IGNORED"), 16, 64)
		blk, _ := strconv.ParseUint(os.Getenv("INITPROC_TEST_BLOCKED"), 16, 64)
		spec.Given = sigstart.State{Ignored: sigstart.Set(ign), Blocked: sigstart.Set(blk)}
		if m := os.Getenv("INITPROC_TEST_EXITMAP"); m != "" {
			spec.ExitMap, _ = config.ParseExitMap(m)
		}
		if m := os.Getenv("INITPROC_TEST_REWRITE"); m != "" {
			spec.Rewrite, _ = config.ParseRewrite(m)
		}
		if os.Getenv("INITPROC_TEST_LISTEN_SELF") == "1" {
			spec.Env = append(spec.Env, "LISTEN_PID="+strconv.Itoa(os.Getpid()))
		}
		if m := os.Getenv("INITPROC_TEST_PDEATHSIG"); m != "" {
			spec.ParentDeath, _ = config.ParseSignal(m, false)
		}
		out, err := Supervise(spec, func(s string) { fmt.Fprintln(os.Stderr, s) })
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
	files []*os.File // the init's descriptors from 3 on
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
	cmd.ExtraFiles = o.files
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
// over others (see TestForwardsEverySignal).
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
// (POSIX), so the member never reports those two. Where the relay is not
// available (not amd64) the sender is not known and a worker may see a
// SIGURG of the init's runtime; a line for one passes unnoticed
// (TestNoStraySignals holds amd64 to none).
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
	assert.False(t, out.GroupCont, "no SIGCONT to a group of which nothing was stopped")
	r.eof(t) // every holder of the worker's stdout has ended
}

// A member that is stopped when the worker ends gets SIGCONT after the
// SIGTERM, so that it acts on it: the stopped member, a child of the
// test in the worker's group, dies of SIGTERM.
func TestGroupStoppedMemberContinued(t *testing.T) {
	r := startInit(t, `echo "worker $$"; read x; exit 0`, initOpts{group: true})
	f := strings.Fields(r.line(t))
	require.Len(t, f, 2)
	pgid, err := strconv.Atoi(f[1])
	require.NoError(t, err)
	member := exec.Command("sleep", "1000")
	member.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	require.NoError(t, member.Start())
	t.Cleanup(func() { member.Process.Kill(); member.Wait() })
	require.NoError(t, member.Process.Signal(syscall.SIGSTOP))
	assert.Equal(t, syscall.SIGSTOP, waitChild(t, member.Process.Pid, unix.WSTOPPED))
	_, err = io.WriteString(r.stdin, "end\n")
	require.NoError(t, err)
	err = member.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, syscall.SIGTERM, ee.Sys().(syscall.WaitStatus).Signal(), "the stopped member was continued and ended on SIGTERM")
	code, out := r.wait(t)
	assert.Equal(t, 0, code)
	assert.True(t, out.GroupCont)
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

// strayWorker is a Python worker that takes its signals in sigwaitinfo
// (blocked, so none is lost between two waits): it answers each SIGUSR1
// with its count, counts every SIGURG, with its sender, and on SIGUSR2
// says how many SIGURGs came and ends.
const strayWorker = `
import signal
sigs = {signal.SIGUSR1, signal.SIGUSR2, signal.SIGURG}
signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
n, urg = 0, []
print("ready", flush=True)
while True:
    i = signal.sigwaitinfo(sigs)
    if i.si_signo == signal.SIGUSR1:
        n += 1
        print("usr1 %d" % n, flush=True)
    elif i.si_signo == signal.SIGURG:
        urg.append((i.si_pid, i.si_code))
    else:
        print("urg %d %s" % (len(urg), urg[:5]), flush=True)
        break
`

// No signal reaches the worker that no process sent: 1,000 forwards of
// SIGUSR1, each answered before the next is sent, while the init's own
// runtime preempts a goroutine that never yields with SIGURG every 10 ms
// (INITPROC_TEST_BUSY): the worker saw no SIGURG at all. Before the relay
// read the sender, every preemption reached the worker (a relay that
// sends the init's own SIGURG on fails here with hundreds).
func TestNoStraySignals(t *testing.T) {
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "python3 (Debian's python3) runs the worker")
	for _, group := range []bool{false, true} {
		t.Run(map[bool]string{false: "init", true: "init-group"}[group], func(t *testing.T) {
			r := startInit(t, `exec "$PY" -c "$WORKER"`, initOpts{group: group, env: []string{"PY=" + python, "WORKER=" + strayWorker, "INITPROC_TEST_BUSY=1"}})
			require.Equal(t, "ready", r.line(t))
			for i := 1; i <= 1000; i++ {
				r.signal(t, syscall.SIGUSR1)
				require.Equal(t, fmt.Sprintf("usr1 %d", i), r.line(t))
			}
			r.signal(t, syscall.SIGUSR2)
			assert.Equal(t, "urg 0 []", r.line(t), "SIGURGs the worker got that nobody sent (sender, si_code)")
			code, _ := r.wait(t)
			assert.Equal(t, 0, code)
		})
	}
}

// A SIGURG that another process sends is forwarded: the relay drops only
// what the init raised itself.
func TestSentSIGURGForwarded(t *testing.T) {
	idle := idleFifo(t)
	r := startInit(t, `trap 'echo worker 23' URG; role=worker; `+idleLoop, initOpts{env: []string{"IDLE=" + idle}})
	require.Contains(t, r.line(t), "worker ready")
	r.signal(t, syscall.SIGURG)
	r.expect(t, "worker 23")
	release(t, idle, 1)
	code, _ := r.wait(t)
	assert.Equal(t, 0, code)
}

// The worker starts with the signals ignored and blocked that infera-exec
// was started with (Given), as tini and catatonit start theirs: here
// SIGHUP, SIGINT, SIGQUIT, SIGUSR1 and SIGTTOU ignored, SIGILL, SIGTERM
// and SIGUSR2 blocked. Without Given the worker starts with none.
func TestWorkerKeepsGivenDispositions(t *testing.T) {
	var ign, blk sigstart.Set
	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGTTOU} {
		ign = ign.With(s)
	}
	for _, s := range []syscall.Signal{syscall.SIGILL, syscall.SIGTERM, syscall.SIGUSR2} {
		blk = blk.With(s)
	}
	for _, tc := range []struct {
		name     string
		ign, blk sigstart.Set
		starter  bool
	}{
		{"given", ign, blk, true},
		{"none", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startInit(t, "unused", initOpts{env: []string{"INITPROC_TEST_ARGV=grep -E ^Sig(Ign|Blk) /proc/self/status",
				fmt.Sprintf("INITPROC_TEST_IGNORED=%x", uint64(tc.ign)), fmt.Sprintf("INITPROC_TEST_BLOCKED=%x", uint64(tc.blk))}})
			assert.Equal(t, fmt.Sprintf("SigBlk:\t%016x", uint64(tc.blk)), r.line(t))
			assert.Equal(t, fmt.Sprintf("SigIgn:\t%016x", uint64(tc.ign)), r.line(t))
			code, out := r.wait(t)
			assert.Equal(t, 0, code)
			assert.Equal(t, tc.starter, out.Starter)
		})
	}
}

// With LISTEN_FDS passed on (LISTEN_PID unset or the init's), the worker
// sees LISTEN_PID as its own pid (sd_listen_fds(3)) and the descriptor at
// 3; LISTEN_PID naming another process is left alone.
func TestListenPID(t *testing.T) {
	for _, tc := range []struct {
		name, pid string
		own       bool
	}{
		{"unset", "", true},
		{"the init's", "self", true},
		{"another process's", "1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd, wr, err := os.Pipe()
			require.NoError(t, err)
			defer rd.Close()
			defer wr.Close()
			env := []string{"LISTEN_FDS=1"}
			script := `echo "pid=$$ listen=$LISTEN_PID"; [ -e /proc/self/fd/3 ] && echo fd3; echo "helper=$INFERA_EXEC_HELPER"`
			if tc.pid == "self" {
				env = append(env, "INITPROC_TEST_LISTEN_SELF=1") // the init's pid, set in the init
			} else if tc.pid != "" {
				env = append(env, "LISTEN_PID="+tc.pid)
			}
			r := startInit(t, script, initOpts{env: env, files: []*os.File{wr}})
			f := strings.Fields(r.line(t))
			require.Len(t, f, 2)
			pid, listen := strings.TrimPrefix(f[0], "pid="), strings.TrimPrefix(f[1], "listen=")
			if tc.own {
				assert.Equal(t, pid, listen, "LISTEN_PID is the worker's pid")
			} else {
				assert.Equal(t, tc.pid, listen, "LISTEN_PID meant for another process is left as it was")
			}
			assert.Equal(t, "fd3", r.line(t), "the descriptor passed on")
			assert.Equal(t, "helper=", r.line(t), "the starter's marker is not the worker's")
			code, out := r.wait(t)
			assert.Equal(t, 0, code)
			assert.Equal(t, tc.own, out.Starter)
		})
	}
}

// The exit-code map turns the worker's status into the init's: 143 (a
// worker that ended on SIGTERM) counted as success, as tini -e 143 does;
// a status not in the map is the worker's.
func TestExitMap(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"kill -TERM $$", 0},
		{"exit 3", 1},
		{"exit 4", 4},
	} {
		code, out := startInit(t, tc.script, initOpts{env: []string{"INITPROC_TEST_EXITMAP=143,3:1"}}).wait(t)
		assert.Equal(t, tc.want, code, tc.script)
		assert.Equal(t, tc.want, out.Code, tc.script)
	}
}

// Rewriting: a SIGTERM sent to the init reaches the worker as SIGQUIT;
// SIGUSR1 rewritten to 0 reaches it not at all (dumb-init's --rewrite):
// the SIGUSR2 sent after it comes in alone (the shell runs pending traps
// by number, so a forwarded SIGUSR1 would show before it).
func TestRewrite(t *testing.T) {
	idle := idleFifo(t)
	r := startInit(t, `for s in 3 10 12 15; do trap "echo worker $s" $s; done; role=worker; `+idleLoop,
		initOpts{env: []string{"IDLE=" + idle, "INITPROC_TEST_REWRITE=TERM:QUIT,USR1:0"}})
	require.Contains(t, r.line(t), "worker ready")
	r.signal(t, syscall.SIGTERM)
	assert.Equal(t, "worker 3", r.line(t), "SIGTERM as SIGQUIT")
	r.signal(t, syscall.SIGUSR1)
	r.signal(t, syscall.SIGUSR2)
	assert.Equal(t, "worker 12", r.line(t), "SIGUSR1 dropped")
	release(t, idle, 1)
	code, _ := r.wait(t)
	assert.Equal(t, 0, code)
}

// The parent-death signal: the init's parent ends, the init gets SIGTERM
// (tini -p SIGTERM) and forwards it to the worker, which dies of it.
func TestParentDeathSignal(t *testing.T) {
	// The parent is a shell that starts the init and then waits for a line
	// on its stdin; the test ends the parent by closing that.
	cmd := exec.Command("/bin/sh", "-c", `"$0" -test.run='^$' & echo "init $!"; read x || :`, os.Args[0])
	cmd.Env = append(os.Environ(), initChildEnv+`=echo "worker ready"; exec sleep 1000 >/dev/null`, "INITPROC_TEST_PDEATHSIG=TERM")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	cmd.Stderr = errf
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Two lines in either order: the init's pid from the parent, and the
	// worker's, which shares the parent's stdout.
	sc := bufio.NewScanner(stdout)
	pid := 0
	for i := 0; i < 2; i++ {
		require.True(t, sc.Scan(), "the parent's output ended")
		if p, ok := strings.CutPrefix(sc.Text(), "init "); ok {
			pid, err = strconv.Atoi(p)
			require.NoError(t, err)
		} else {
			require.Equal(t, "worker ready", sc.Text())
		}
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	require.NoError(t, err)
	defer unix.Close(pidfd)
	stdin.Close() // the parent ends
	require.NoError(t, cmd.Wait())
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(guard.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		require.NoError(t, err)
		require.Equal(t, 1, n, "the init did not end after its parent")
		break
	}
	b, _ := os.ReadFile(errf.Name())
	assert.Contains(t, string(b), `"Signal":15`, "the worker died of the forwarded SIGTERM")
}
