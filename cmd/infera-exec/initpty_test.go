package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A terminal for the job-control stories: the master side of a
// pseudo-terminal (posix_openpt through /dev/ptmx), whose output is
// collected, and the path of its slave.
type pty struct {
	master *os.File
	slave  string
	mu     sync.Mutex
	out    bytes.Buffer
	more   chan struct{} // a token when output came
}

func openPty(t *testing.T) *pty {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err, "/dev/ptmx")
	t.Cleanup(func() { m.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0), "unlockpt")
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err, "ptsname")
	p := &pty{master: m, slave: fmt.Sprintf("/dev/pts/%d", n), more: make(chan struct{}, 1)}
	go func() {
		b := make([]byte, 4096)
		for {
			k, err := m.Read(b)
			p.mu.Lock()
			p.out.Write(b[:k])
			p.mu.Unlock()
			select {
			case p.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return p
}

// expect waits until the output after the last expectation holds s, and
// returns that output; the guard only bounds a story that cannot go on.
func (p *pty) expect(t *testing.T, s string) string {
	t.Helper()
	deadline := time.NewTimer(tourGuard)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		got := p.out.String()
		if i := strings.Index(got, s); i >= 0 {
			p.out.Next(i + len(s))
			p.mu.Unlock()
			return got[:i+len(s)]
		}
		p.mu.Unlock()
		select {
		case <-p.more:
		case <-deadline.C:
			t.Fatalf("no %q on the terminal in %v; it shows %q", s, tourGuard, got)
		}
	}
}

func (p *pty) send(t *testing.T, s string) {
	t.Helper()
	_, err := p.master.WriteString(s)
	require.NoError(t, err)
}

// The init on a terminal, under an interactive bash: Ctrl-Z stops the
// worker and the init, so bash reports the job stopped and gives its
// prompt back; a row with bg resumes them in the background, where the
// worker's read stops them again (SIGTTIN); fg resumes both and hands the
// terminal back to the worker, which reads the next line typed; Ctrl-C
// ends the worker, and bash reads the init's 130. The init writes one
// line to the terminal before the worker's (quiet on a terminal).
// dumb-init, where Debian ships it, is the reference row (it has no bg
// row: its worker, in a session of its own, reads the terminal without
// ever being stopped for it).
//
// An interactive bash reports a background job's stop before its next
// prompt, not when it comes (unless `set -b`): after a bare `bg` the
// prompt is often out before the job stops again, and "Stopped" would
// show only after the next line typed. So the story waits for the job
// with bash's own `wait`, which with job control returns when the job
// changes state: 147 (128+SIGSTOP, the init's stop) says the job stopped
// again, and `jobs` then shows it.
//
// When bash shows the job stopped, infera-exec's worker is stopped: the
// init stops itself only on the worker's stop report. dumb-init stops
// itself right after it sends its child SIGSTOP, which the child acts on
// when it next runs; a child still in its read then takes the first byte
// typed at bash's prompt (its session is not the terminal's, so nothing
// stops it for reading): bash read "g" of "fg" in 6 of 40 runs. Its row
// waits for the child to stop before it types.
func TestInitJobControlOnTerminal(t *testing.T) {
	bash, err := exec.LookPath("bash")
	require.NoError(t, err, "bash")
	dir := t.TempDir()
	for _, d := range []string{"payload/py312", "payload/bin", "py"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "py/python3.12"), nil, 0o755))
	worker := `sh -c 'echo "worker $$ started"; while read l; do echo "got $l"; done'`
	rows := []struct {
		name, init string
		bg, own    bool
		settle     bool // wait for the worker's stop after bash shows it
	}{
		{"infera-exec", shim(t) + " --init", true, true, false},
		{"dumb-init", "dumb-init", false, false, true},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			if !row.own {
				if _, err := exec.LookPath(row.init); err != nil {
					t.Skipf("%s is not installed (Debian: apt-get install %s; .ci/run installs it)", row.init, row.init)
				}
			}
			p := openPty(t)
			slave, err := os.OpenFile(p.slave, os.O_RDWR, 0)
			require.NoError(t, err)
			defer slave.Close()
			sh := exec.Command(bash, "--norc", "--noprofile", "-i")
			sh.Stdin, sh.Stdout, sh.Stderr = slave, slave, slave
			sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			sh.Env = append(os.Environ(), "PS1=PROMPT> ", "TERM=dumb", "INFERA_PYTHON="+filepath.Join(dir, "py/python3.12"),
				"PAYLOAD_ROOT="+filepath.Join(dir, "payload"), "INFERA_EXEC_REPORT=off", "INFERA_PREFLIGHT=off", "INFERA_SKIP_ENGINE_PATCHES=1")
			require.NoError(t, sh.Start())
			t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
			p.expect(t, "PROMPT> ")
			p.send(t, row.init+" "+worker+"\n")
			before := p.expect(t, " started\r\n")
			m := regexp.MustCompile(`worker (\d+) started\r\n$`).FindStringSubmatch(before)
			require.NotNil(t, m, "the worker's pid: %q", before)
			wpid, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			if row.own {
				// The echo of the command line names the binary, not "infera-exec: ".
				// Warnings still show (here the one INFERA_PREFLIGHT=off says);
				// of the rest, only the init's start line.
				lines := strings.Count(before, "infera-exec: ") - strings.Count(before, "infera-exec: warning: ")
				require.Equal(t, 1, lines, "one line of the init before the worker's, besides warnings: %q", before)
				require.Contains(t, before, "infera-exec: init: starting ")
			}
			p.send(t, "\x1a") // Ctrl-Z
			p.expect(t, "Stopped")
			p.expect(t, "PROMPT> ")
			if row.settle {
				waitStopped(t, wpid)
			}
			require.Equal(t, byte('T'), procStateOf(t, wpid), "the worker is stopped when bash shows the job stopped")
			if row.bg {
				// The worker reads the terminal from the background: the
				// job stops again. (bash warns "job 1 is stopped" when it
				// stopped before the wait began.)
				p.send(t, "bg; wait %1; echo waited=$?\n")
				p.expect(t, "waited=147\r\n")
				p.expect(t, "PROMPT> ")
				p.send(t, "jobs\n")
				p.expect(t, "Stopped")
				p.expect(t, "PROMPT> ")
				require.Equal(t, byte('T'), procStateOf(t, wpid), "the worker is stopped again")
			}
			p.send(t, "fg\n")
			p.send(t, "hello\n")
			p.expect(t, "got hello")
			p.send(t, "\x03") // Ctrl-C
			p.expect(t, "PROMPT> ")
			p.send(t, "echo status=$?\n")
			p.expect(t, "status=130")
			p.send(t, "exit\n")
			require.NoError(t, sh.Wait())
		})
	}
}

// procStateOf is the state letter of /proc/PID/stat ('T': stopped).
func procStateOf(t *testing.T, pid int) byte {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	i := bytes.LastIndexByte(b, ')')
	require.True(t, i > 0 && i+2 < len(b), "/proc/%d/stat: %q", pid, b)
	return b[i+2]
}

// waitStopped waits until pid, not a child of the test, is stopped; the
// guard only bounds a story that cannot go on.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(tourGuard)
	for procStateOf(t, pid) != 'T' {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d did not stop in %v", pid, tourGuard)
		}
		time.Sleep(time.Millisecond)
	}
}
