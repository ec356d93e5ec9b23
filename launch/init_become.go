package launch

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/infera/infera-exec/internal/lookpath"
	"golang.org/x/sys/unix"
)

// Role is what infera-exec becomes for the worker: PID 1 in a container
// of its own, else a child subreaper.
func InitRole() string {
	if os.Getpid() == 1 {
		return "PID 1"
	}
	return "child subreaper"
}

// Become runs the worker as this process's child and stays its init
// until it ends, logging what happened; it returns the code infera-exec
// exits with: the worker's, 128+N when signal N killed it, or the shell's
// 126/127 when it could not be started at all, as a failed exec gives
// (77 when it did not get the user's credentials exactly).
func Become(s InitSpec, log *slog.Logger) int {
	code, _ := become(s, log)
	return code
}

// become is Become, with the line that says how the worker ended (for
// the termination message).
func become(s InitSpec, log *slog.Logger) (int, string) {
	before := s.OOM.count()
	out, err := Supervise(s, func(msg string) { log.Warn(msg) })
	if err != nil {
		code := lookpath.CodeNotExecutable
		var drop *DropError
		switch {
		case errors.As(err, &drop):
			code = drop.ExitCode()
		case errors.Is(err, syscall.ENOENT):
			code = lookpath.CodeNotFound
		}
		log.Error(err.Error(), "event", "refused", "exit_code", code)
		return code, err.Error()
	}
	if out.Code != out.Status {
		defer log.Info(fmt.Sprintf("init: exit %d for the worker's %d (exit-code map)", out.Code, out.Status))
	}
	var ended string
	if oom := s.OOM.explain(before, s, out); oom != "" {
		ended = oom
		log.Error(oom, "event", "worker-ended", "exit_code", out.Code)
	} else if out.Signal != 0 {
		ended = fmt.Sprintf("init: the worker (pid %d) was killed by %s (%v); exit %d", out.PID, unix.SignalName(out.Signal), out.Signal, out.Status)
		log.Info(ended, "event", "worker-ended", "exit_code", out.Code)
	} else {
		ended = fmt.Sprintf("init: the worker (pid %d) exited with %d", out.PID, out.Status)
		log.Debug(ended, "event", "worker-ended", "exit_code", out.Code)
	}
	if out.Reaped > 0 {
		log.Debug(fmt.Sprintf("init: reaped %d orphaned process(es) of the worker", out.Reaped))
	}
	switch out.GroupSignal {
	case syscall.SIGTERM:
		log.Info("init: the rest of the worker's process group ended on SIGTERM")
	case syscall.SIGKILL:
		log.Warn(fmt.Sprintf("init: the rest of the worker's process group was still there %v after SIGTERM; sent SIGKILL", GroupGrace))
	}
	return out.Code, ended
}
