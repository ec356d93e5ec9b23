package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/termination"
)

// The kubelet's view of a start (package termination): a refusal, and
// the end of a worker that --init stayed for, leave their exit code and
// reason in the container's termination log; a start that execs leaves it
// empty. Only the runs that are a container's entrypoint write it (the
// start and --install), never a mode run beside a live worker (kubectl
// exec ... --doctor, --check, --report), whose message would become the
// live container's.

// tellKubelet writes code and reason to the termination log; a file that
// is there and cannot be used is a warning, no file is nothing.
func tellKubelet(path string, code int, reason string, log *slog.Logger) {
	if ok, err := termination.Write(path, code, reason); err != nil {
		log.Warn("termination message not written: "+err.Error(), "event", "termination-log", "file", path)
	} else if ok {
		log.Debug("termination message written to "+path, "event", "termination-log", "file", path)
	}
}

// clearKubelet empties the termination log before the worker starts.
func clearKubelet(path string, log *slog.Logger) {
	if ok, err := termination.Clear(path); err != nil {
		log.Warn("termination message not cleared: "+err.Error(), "event", "termination-log", "file", path)
	} else if ok {
		log.Debug("termination message of an earlier start in this container cleared: "+path, "event", "termination-log", "file", path)
	}
}

// usageToKubelet writes a command line that cannot be run to the
// termination log when this process is a container's entrypoint (PID 1:
// a command run with kubectl exec never is), the one refusal that comes
// before the mode is known.
func usageToKubelet(env []string, err error, stderr io.Writer) {
	if os.Getpid() != 1 {
		return
	}
	cfg, _, _ := config.Load(environ.New(env), "", "/", config.Flags{})
	tellKubelet(cfg.TerminationLog, exitCode(err), err.Error(), modeLog(stderr, cfg, "usage"))
}

// startLog is the logger of a start or a mode: INFERA_EXEC_LOG's format,
// from INFERA_EXEC_LOG_LEVEL's level (--verbose: debug), recording into
// rec (which may be nil) for the report.
func startLog(w io.Writer, cfg config.Config, verbose bool, rec *logging.Recorder) *slog.Logger {
	o := logging.Options{Name: "infera-exec", Format: cfg.LogFormat, Level: cfg.LogLevel}
	if verbose {
		o.Level = "debug"
	}
	return logging.Open(w, o, rec)
}

// modeLog is the logger of a mode that runs no worker, its records' step
// the mode's name.
func modeLog(w io.Writer, cfg config.Config, mode string) *slog.Logger {
	return logging.WithStep(startLog(w, cfg, false, nil), mode)
}
