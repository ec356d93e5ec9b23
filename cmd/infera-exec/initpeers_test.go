package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// givenDispositions starts COMMAND with SIGHUP, SIGINT, SIGUSR1 and
// SIGTTOU ignored and SIGILL, SIGTERM and SIGUSR2 blocked, as nohup, a
// shell's `trap ”` or a supervisor's sigprocmask leave them (Python also
// ignores SIGPIPE and SIGXFSZ itself).
const givenDispositions = `
import os, signal, sys
for s in (signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGTTOU):
    signal.signal(s, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGILL, signal.SIGTERM, signal.SIGUSR2})
os.execvp(sys.argv[1], sys.argv[1:])
`

// sigLine reads SigIgn and SigBlk from a /proc/PID/status text.
func sigLine(t *testing.T, status string) (ign, blk uint64) {
	t.Helper()
	for _, l := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		switch k {
		case "SigIgn":
			require.NoError(t, err)
			ign = n
		case "SigBlk":
			require.NoError(t, err)
			blk = n
		}
	}
	return ign, blk
}

// The worker keeps the dispositions it was given, with infera-exec
// exec'ing it or staying as its init, as tini and catatonit keep them:
// the rows are the worker's SigIgn and SigBlk against those of the same
// command started with no init between (the baseline). The peers' rows
// are the reference, each with what its source does: catatonit blocks
// SIGTSTP, SIGTTIN and SIGTTOU in its child besides; dumb-init gives its
// child a clean slate of signals 1-31 (it leaves the real-time ones).
func TestWorkerKeepsDispositionsLikePeers(t *testing.T) {
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "python3")
	dir := t.TempDir()
	for _, d := range []string{"payload/py312", "payload/bin", "py"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "py/python3.12"), nil, 0o755))
	env := append(os.Environ(), "INFERA_PYTHON="+filepath.Join(dir, "py/python3.12"), "PAYLOAD_ROOT="+filepath.Join(dir, "payload"),
		"INFERA_EXEC_REPORT=off", "INFERA_PREFLIGHT=off", "INFERA_SKIP_ENGINE_PATCHES=1")
	status := func(t *testing.T, init ...string) (uint64, uint64) {
		t.Helper()
		argv := append(append([]string{"-c", givenDispositions}, init...), "cat", "/proc/self/status")
		cmd := exec.Command(python, argv...)
		cmd.Env = env
		out, err := cmd.Output()
		require.NoError(t, err, "%v: %s", init, out)
		return sigLine(t, string(out))
	}
	ign0, blk0 := status(t)
	require.NotZero(t, ign0&(1<<(10-1)), "the baseline ignores SIGUSR1")
	require.NotZero(t, blk0&(1<<(15-1)), "the baseline blocks SIGTERM")
	jobStops := uint64(1<<(20-1) | 1<<(21-1) | 1<<(22-1))
	// dumb-init resets signals 1-31 and unblocks what glibc's sigfillset
	// holds: all but 32 and 33, which stay as they were given.
	glibcReserved := uint64(1<<(32-1) | 1<<(33-1))
	realtime := ^uint64(1<<31 - 1)
	for _, row := range []struct {
		name     string
		init     []string
		own      bool
		ign, blk uint64
	}{
		{"infera-exec", []string{shim(t)}, true, ign0, blk0},
		{"infera-exec --init", []string{shim(t), "--init"}, true, ign0, blk0},
		{"infera-exec --init-group", []string{shim(t), "--init-group"}, true, ign0, blk0},
		{"tini", []string{"tini", "-s", "--"}, false, ign0, blk0},
		{"catatonit", []string{"catatonit", "--"}, false, ign0, blk0 | jobStops},
		{"dumb-init", []string{"dumb-init"}, false, ign0 & realtime, blk0 & glibcReserved},
	} {
		t.Run(row.name, func(t *testing.T) {
			if !row.own {
				if _, err := exec.LookPath(row.init[0]); err != nil {
					t.Skipf("%s is not installed (Debian: apt-get install %s; .ci/run installs it)", row.init[0], row.init[0])
				}
			}
			ign, blk := status(t, row.init...)
			assert.Equal(t, fmt.Sprintf("%016x", row.ign), fmt.Sprintf("%016x", ign), "SigIgn")
			assert.Equal(t, fmt.Sprintf("%016x", row.blk), fmt.Sprintf("%016x", blk), "SigBlk")
		})
	}
}
