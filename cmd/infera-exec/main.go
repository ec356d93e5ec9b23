// Command infera-exec is the entrypoint of a stock vLLM or SGLang ROCm
// image with an overlay payload mounted beside it. It prepares the
// container in one pass and replaces itself with the worker.
//
// This package only sequences: the step table of the pass (pass.go), the modes
// that run no worker (modes.go), and the help. What each step decides lives in
// the stage's own package; every refusal carries its exit code.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/heappages"
	"github.com/infera/infera-exec/internal/inheritfd"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/overlay"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var version, commit = "dev", "unknown"

// The exit codes main decides itself (sysexits.h); a refusal's is its own.
const (
	exitOK       = 0
	exitWarnings = 1  // --doctor: only warnings failed
	exitUsage    = 64 // EX_USAGE: bad options or no command
	exitPatch    = 65 // EX_DATAERR: --check, --apply: a patch drifted (--apply: or was not written)
	exitSoftware = 70 // EX_SOFTWARE: a bug in infera-exec
	exitConfig   = 78 // EX_CONFIG: payload, interpreter or configuration unusable
)

// coded is a refusal: every error a stage refuses with carries its code.
type coded interface{ ExitCode() int }

// exitCode is the code of a refusal; an error without one is a bug (70).
func exitCode(err error) int {
	var c coded
	if errors.As(err, &c) {
		return c.ExitCode()
	}
	return exitSoftware
}

func main() {
	// A helper child started to touch a filesystem that may not answer
	// (see package fsprobe): one operation, then exit. Never a command.
	if op, ok := fsprobe.HelperOp(os.Args, os.Getenv); ok {
		os.Exit(fsprobe.Serve(op, os.Args[1], os.Stdout))
	}
	// The init's starter (see package launch): the worker's LISTEN_PID
	// and dispositions, then its exec. Never a command.
	if launch.StarterCall(os.Args, os.Getenv) {
		os.Exit(launch.Starter(os.Args))
	}
	os.Exit(run(os.Args, os.Environ(), os.Stdout, os.Stderr))
}

// collectLater turns the collector off for the start, with a 256 MiB
// limit as the backstop (or GOMEMLIMIT, if lower): a start allocates a few
// megabytes in milliseconds, and a collection in it only costs time.
func collectLater() (restore func()) {
	pct := debug.SetGCPercent(-1)
	lim := debug.SetMemoryLimit(-1)
	debug.SetMemoryLimit(min(lim, 256<<20))
	return func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(lim)
	}
}

func run(args, env []string, stdout, stderr io.Writer) int {
	o, err := config.ParseArgs(args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: %v\nRun 'infera-exec --help' for usage.\n", err)
		usageToKubelet(env, err, stderr)
		return exitCode(err)
	}
	switch {
	case o.Help:
		io.WriteString(stdout, helpText())
		return exitOK
	case o.Version:
		fmt.Fprintf(stdout, "infera-exec %s (commit %s, %s, %s/%s)\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	}
	inheritfd.Hold() // the descriptors we were given are the worker's, no helper's
	e := environ.New(env)
	cfg, warns, err := config.FromProcess(e, o.Flags)
	noWorker := o.Doctor || o.Check != "" || o.Apply != "" || o.Install != "" || o.Report
	// A start's heap on huge pages (package heappages), before the start
	// touches it; not the heap of an init that stays for the worker's life.
	heap := heappages.Outcome{Skipped: "not a start that execs its worker"}
	if !noWorker && cfg.Init == config.InitOff {
		heap = heappages.Back(e.Value("GODEBUG"))
	}
	probe := fsprobe.New(cfg.PreflightTimeoutDuration()) // one for the run: a mount that did not answer is not asked again
	warns = append(config.UnknownNames(e, overlay.EnvNamesAnswering(cfg.PayloadRoot, probe.AllAnswer)), warns...)
	if noWorker {
		// The modes that run no worker print their result on stdout
		// (text, or --json); their stderr is a log like a start's, in
		// INFERA_EXEC_LOG's format, each record's step the mode.
		log := modeLog(stderr, cfg, modeName(o))
		for _, w := range warns {
			log.Warn(w)
		}
		if err != nil {
			if o.Install != "" { // an init container's entrypoint
				tellKubelet(cfg.TerminationLog, exitCode(err), err.Error(), log)
			}
			return refuse(log, err)
		}
		switch {
		case o.Doctor:
			return runDoctor(cfg, o, e, probe, stdout, log)
		case o.Install != "":
			return runInstall(cfg, o.Install, o.Quiet, log)
		case o.Check != "":
			return runCheck(cfg, o.Check, o.JSON, stdout, log)
		case o.Apply != "":
			return runApply(cfg, o.Apply, o.JSON, stdout, log)
		default:
			return runReport(cfg, o.JSON, stdout, log)
		}
	}
	// Only the start runs with the collector off (see collectLater):
	// --install, --check and --doctor may read files of any size.
	restore := collectLater()
	defer restore()
	p := newPass(o, e, cfg, warns, err, probe, stdout, stderr)
	p.restoreGC = restore
	p.log.Debug("heap pages: " + heap.String())
	return p.run()
}
