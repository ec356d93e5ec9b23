// Command infera-exec is the entrypoint of a stock vLLM or SGLang ROCm
// image with an overlay payload mounted beside it. It prepares the
// container in one pass and replaces itself with the worker.
//
// This package only sequences: the step table of the pass (pass.go), the
// modes, the options they come from, the exit codes outcomes map to, and
// the help. What each step decides lives in the step's own package.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/cli"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/preflight"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

// Exit codes of infera-exec itself (sysexits.h style); the worker's own
// exit code is whatever the worker returns, since infera-exec is gone by
// then. 126 and 127 are the shell's, from package lookup.
const (
	exitOK          = 0
	exitWarnings    = 1  // --doctor: only warnings failed
	exitUsage       = 64 // EX_USAGE: bad options or no command
	exitPatch       = 65 // EX_DATAERR: a required engine patch is not in force; --check: drift
	exitUnavailable = 69 // EX_UNAVAILABLE: a required capability is missing
	exitSoftware    = 70 // EX_SOFTWARE: a bug in infera-exec
	exitCantCreate  = 73 // EX_CANTCREAT: --install cannot write its destination
	exitConfig      = 78 // EX_CONFIG: payload, interpreter or configuration unusable
)

// exitCode maps a step's refusal to the code infera-exec exits with.
// Anything a step cannot use that has no code of its own is configuration.
func exitCode(err error) int {
	var (
		unavailable *capability.Unavailable
		required    *patches.RequiredError
		command     *launch.Error
		dest        *overlay.DestError
	)
	switch {
	case errors.As(err, &unavailable):
		return exitUnavailable
	case errors.As(err, &required):
		return exitPatch
	case errors.As(err, &command):
		return command.Code
	case errors.As(err, &dest):
		return exitCantCreate
	}
	return exitConfig
}

func main() {
	// A helper child started to touch a filesystem that may not answer
	// (see package fsprobe): one operation, then exit. Never a command.
	if op, ok := fsprobe.HelperOp(os.Args, os.Getenv); ok {
		os.Exit(fsprobe.Serve(op, os.Args[1], os.Stdout))
	}
	os.Exit(run(os.Args, os.Environ(), os.Stdout, os.Stderr))
}

// startMemoryLimit bounds the heap while the collector is off.
const startMemoryLimit = 256 << 20

// collectLater turns the collector off for the start, with a memory
// limit as the backstop (or the environment's GOMEMLIMIT, if lower). A
// start allocates a few megabytes and is over in milliseconds; a first
// start reads and rewrites engine files, and a collection in the middle
// of that only costs time (about 2.5 ms of a first start here).
func collectLater() (restore func()) {
	pct := debug.SetGCPercent(-1)
	lim := debug.SetMemoryLimit(-1)
	debug.SetMemoryLimit(min(lim, startMemoryLimit))
	return func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(lim)
	}
}

func run(args, env []string, stdout, stderr io.Writer) int {
	o, err := cli.Parse(args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: %v\nRun 'infera-exec --help' for usage.\n", err)
		return exitUsage
	}
	switch {
	case o.Help:
		io.WriteString(stdout, helpText())
		return exitOK
	case o.Version:
		fmt.Fprintf(stdout, "infera-exec %s (commit %s, %s, %s/%s)\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	case len(o.Command) == 0 && !o.Explain && !o.Doctor && o.Check == "" && o.Install == "":
		fmt.Fprintf(stderr, "infera-exec: no command given: infera-exec prepares the container and then runs a worker command\nUsage: infera-exec [OPTIONS] [--] COMMAND [ARG...]; run 'infera-exec --help' for more.\n")
		return exitUsage
	}
	e := environ.New(env)
	cfg, warns, err := config.FromProcess(e)
	if o.Doctor || o.Check != "" || o.Install != "" {
		// The modes that run no worker log plainly to stderr.
		for _, w := range warns {
			fmt.Fprintf(stderr, "infera-exec: warning: %s\n", w)
		}
		if err != nil {
			fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
			return exitConfig
		}
	}
	switch {
	case o.Doctor:
		return runDoctor(cfg, o.Command, e, o.JSON, stdout, stderr)
	case o.Install != "":
		return runInstall(cfg, o.Install, stderr)
	case o.Check != "":
		return runCheck(cfg, o.Check, o.JSON, stdout, stderr)
	}
	// Only the start runs with the collector off (see collectLater):
	// --install, --check and --doctor may read files of any size.
	restore := collectLater()
	defer restore()
	p := newPass(o, e, cfg, warns, err, stdout, stderr)
	p.restoreGC = restore
	return p.run()
}

// runDoctor runs only the preflight checks, on the command that follows
// and this process's environment, and prints a report readable in 80
// columns (or JSON). Exit 0 when every check passed, 1 when only warnings
// failed, 78 when an error-level check failed.
func runDoctor(cfg config.Config, argv []string, env *environ.Env, asJSON bool, stdout, stderr io.Writer) int {
	probe := fsprobe.New(cfg.PreflightTimeoutDuration())
	out, _, _ := preflight.Evaluate(preflight.ForDoctor(cfg, argv, env, probe), cfg.PreflightSkip)
	for _, w := range out.UnknownSkips() {
		fmt.Fprintf(stderr, "infera-exec: warning: %s\n", w)
	}
	// The payload's trees against this image: version shadows and the
	// native trees' load check.
	if probe.AllAnswer(cfg.PayloadRoot) == nil {
		out.Audit, _ = overlay.AuditPayload(cfg.PayloadRoot, overlay.ImageAt("/", env.Value("LD_LIBRARY_PATH")))
	}
	if asJSON {
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		preflight.WriteText(stdout, out.Checks)
		if out.Audit != nil {
			out.Audit.WriteText(stdout, "payload trees against this image:")
		}
	}
	switch {
	case out.Worst() == preflight.Error:
		return exitConfig
	case out.Worst() == preflight.Warn, out.Audit != nil && out.Audit.Problems():
		return exitWarnings
	}
	return exitOK
}

// runInstall copies the payload this binary belongs to into dest: what the
// overlay image's init container runs, so the image needs no shell.
func runInstall(cfg config.Config, dest string, stderr io.Writer) int {
	if abs, err := filepath.Abs(dest); err == nil {
		dest = abs
	}
	r, err := overlay.InstallAnswering(cfg.PayloadRoot, dest, fsprobe.New(cfg.PreflightTimeoutDuration()).AllAnswer)
	if r != nil {
		// What the install had to change in DEST (modes, entries of
		// another uid), said even when it then failed.
		for _, n := range r.Notes {
			fmt.Fprintf(stderr, "infera-exec: %s\n", n)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitCode(err)
	}
	fmt.Fprintf(stderr, "infera-exec: installed the payload %s into %s: %d entries, %d copied, %d already identical, %d removed\n",
		r.Source, r.Dest, r.Entries, len(r.Copied), r.Unchanged, len(r.Removed))
	for _, l := range overlay.InstalledAudit(dest) {
		fmt.Fprintf(stderr, "infera-exec: %s\n", l)
	}
	return exitOK
}

// runCheck evaluates every patch definition against an unpacked image root
// or a site-packages directory, offline; exit 65 on drift.
func runCheck(cfg config.Config, root string, asJSON bool, stdout, stderr io.Writer) int {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	// An image root on a filesystem that does not answer would block the
	// walk: ask first, with the deadline.
	if err := fsprobe.New(cfg.PreflightTimeoutDuration()).AllAnswer(root, cfg.PayloadRoot); err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitConfig
	}
	rep, err := patches.Check(root, cfg.PayloadRoot)
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitConfig
	}
	rep.Audit = overlay.AuditImageRoot(cfg.PayloadRoot, root)
	if asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		rep.WriteText(stdout)
		if rep.Audit != nil {
			rep.Audit.WriteText(stdout, fmt.Sprintf("payload %s against %s:", cfg.PayloadRoot, root))
		}
	}
	if rep.Drift {
		return exitPatch
	}
	return exitOK
}
