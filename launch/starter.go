package launch

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/internal/lookpath"
	"github.com/infera/infera-exec/internal/sigstart"
	"golang.org/x/sys/unix"
)

// The starter is infera-exec re-executed as the init's child to become
// the worker, for what a fork and exec from Go cannot give the worker:
//
//   - LISTEN_PID: sd_listen_fds(3) passes the descriptors only to the
//     process whose pid LISTEN_PID names, and the worker's pid is known
//     only once it is forked; the starter sets it to its own pid, which
//     the exec keeps for the worker.
//   - the dispositions infera-exec was given: syscall.ForkExec's child
//     resets every signal the runtime handles to the default action
//     before the exec, so an ignore given to infera-exec would not reach
//     the worker; the starter sets them (sigstart.Restore) and execs.
//
// The init waits until the starter has exec'd the worker (a close-on-exec
// pipe ends) before it forwards a signal: one sent in between waits in
// the relay. It costs a start of the Go runtime, and is used only when
// the worker needs it (needsStarter).
const (
	starterArgv0 = "infera-exec-start"
	// starterEnv marks the starter (config.Foreign: INFERA_EXEC_HELPER);
	// the starter takes it out of the worker's environment.
	starterEnv = "INFERA_EXEC_HELPER"
	starterOp  = "start"
)

// listenFDs reports whether env passes socket-activation descriptors on
// to this process's child: LISTEN_FDS set, and LISTEN_PID unset or this
// process's pid (sd_listen_fds(3): descriptors meant for another process
// are not passed on as the worker's).
func listenFDs(env []string) bool {
	fds, pid := "", ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LISTEN_FDS="); ok {
			fds = v
		} else if v, ok := strings.CutPrefix(kv, "LISTEN_PID="); ok {
			pid = v
		}
	}
	return fds != "" && (pid == "" || pid == strconv.Itoa(os.Getpid()))
}

// needsStarter reports whether the worker must be started through the
// starter: it gets socket-activation descriptors, or infera-exec was
// started with a signal ignored or blocked.
func needsStarter(s InitSpec) bool {
	return listenFDs(s.Env) || s.Given.Ignored != 0 || s.Given.Blocked != 0
}

// startWorker forks and execs the worker, directly or through the
// starter, and returns its pid once it runs the worker's program.
func startWorker(s InitSpec, dir string, attr *syscall.SysProcAttr) (pid int, starter bool, err error) {
	if !needsStarter(s) || s.Self == "" {
		pid, err := syscall.ForkExec(s.Path, s.Argv, &syscall.ProcAttr{Dir: dir, Env: s.Env, Files: []uintptr{0, 1, 2}, Sys: attr})
		return pid, false, err
	}
	// The pipe's write end goes to the starter as an inherited descriptor
	// of its own number (not one of 0-2 or a passed LISTEN_FDS one); the
	// starter marks it close-on-exec, so the worker's exec closes it.
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return 0, false, fmt.Errorf("starter pipe: %w", err)
	}
	defer unix.Close(p[0])
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETFD, 0); err != nil {
		unix.Close(p[1])
		return 0, false, fmt.Errorf("starter pipe: %w", err)
	}
	listen := "0"
	if listenFDs(s.Env) {
		listen = "1"
	}
	argv := append([]string{starterArgv0, strconv.Itoa(p[1]), strconv.FormatUint(uint64(s.Given.Ignored), 16),
		strconv.FormatUint(uint64(s.Given.Blocked), 16), listen, s.Path}, s.Argv...)
	env := append(slices.Clip(s.Env), starterEnv+"="+starterOp)
	pid, err = syscall.ForkExec(s.Self, argv, &syscall.ProcAttr{Dir: dir, Env: env, Files: []uintptr{0, 1, 2}, Sys: attr})
	unix.Close(p[1])
	if err != nil {
		return 0, true, err
	}
	// EOF: the starter exec'd the worker (or exited). A byte: its errno.
	var b [4]byte
	n, _ := readFull(p[0], b[:])
	if n == 4 {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
		return 0, true, syscall.Errno(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
	}
	return pid, true, nil
}

func readFull(fd int, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Read(fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if m <= 0 || err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// StarterCall reports whether this process is the starter (argv and the
// marker as startWorker sets them).
func StarterCall(args []string, getenv func(string) string) bool {
	return len(args) >= 7 && args[0] == starterArgv0 && getenv(starterEnv) == starterOp
}

// Starter is the starter's whole life: LISTEN_PID, the dispositions, the
// exec. It returns only when the exec failed, with the shell's code.
func Starter(args []string) int {
	fd, err := strconv.Atoi(args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "infera-exec: starter: bad descriptor %q\n", args[1])
		return lookpath.CodeNotExecutable
	}
	unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
	ign, err1 := strconv.ParseUint(args[2], 16, 64)
	blk, err2 := strconv.ParseUint(args[3], 16, 64)
	if err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "infera-exec: starter: bad signal sets %q %q\n", args[2], args[3])
		return lookpath.CodeNotExecutable
	}
	env := make([]string, 0, len(os.Environ())+1)
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, starterEnv+"=") || (args[4] == "1" && strings.HasPrefix(kv, "LISTEN_PID=")) {
			continue
		}
		env = append(env, kv)
	}
	if args[4] == "1" {
		env = append(env, "LISTEN_PID="+strconv.Itoa(os.Getpid()))
	}
	path, argv := args[5], args[6:]
	if err := sigstart.Restore(sigstart.State{Ignored: sigstart.Set(ign), Blocked: sigstart.Set(blk)}); err != nil {
		fmt.Fprintf(os.Stderr, "infera-exec: starter: %v\n", err)
	}
	err = syscall.Exec(path, argv, env)
	errno, _ := err.(syscall.Errno)
	unix.Write(fd, []byte{byte(errno), byte(errno >> 8), byte(errno >> 16), byte(errno >> 24)})
	if errno == syscall.ENOENT {
		return lookpath.CodeNotFound
	}
	return lookpath.CodeNotExecutable
}
