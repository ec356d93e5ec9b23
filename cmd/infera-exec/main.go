// Command infera-exec is the entrypoint of a stock vLLM or SGLang ROCm
// image with an overlay payload mounted beside it. It prepares the
// container in one pass and replaces itself with the worker.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/infera/infera-exec/cli"
	"github.com/infera/infera-exec/fsprobe"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

// Exit codes of infera-exec itself (sysexits.h style); the worker's own
// exit code is whatever the worker returns, since infera-exec is gone by
// then.
const (
	exitOK          = 0
	exitUsage       = 64  // EX_USAGE: bad options or no command
	exitPatch       = 65  // EX_DATAERR: a required engine patch is not in force
	exitUnavailable = 69  // EX_UNAVAILABLE: a required capability is missing
	exitSoftware    = 70  // EX_SOFTWARE: a bug in infera-exec
	exitCantCreate  = 73  // EX_CANTCREAT: --install cannot write its destination
	exitConfig      = 78  // EX_CONFIG: payload, interpreter or configuration unusable
	exitNotExec     = 126 // command found but cannot be executed
	exitNotFound    = 127 // command not found
)

func main() {
	// A helper child started to touch a filesystem that may not answer
	// (see package fsprobe): one operation, then exit. Never a command.
	if op, ok := fsprobe.HelperOp(os.Args, os.Getenv); ok {
		os.Exit(fsprobe.Serve(op, os.Args[1], os.Stdout))
	}
	os.Exit(run(os.Args, os.Environ(), os.Stdout, os.Stderr))
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	o, err := cli.Parse(args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: %v\nRun 'infera-exec --help' for usage.\n", err)
		return exitUsage
	}
	switch {
	case o.Help:
		io.WriteString(stdout, helpText)
		return exitOK
	case o.Version:
		fmt.Fprintf(stdout, "infera-exec %s (commit %s, %s, %s/%s)\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	case o.Doctor:
		return runDoctor(o.Command, o.JSON, environ, stdout, stderr)
	case o.Install != "":
		return runInstall(o.Install, environ, stdout, stderr)
	case o.Check != "":
		return runCheck(o.Check, o.JSON, environ, stdout, stderr)
	case len(o.Command) == 0 && !o.Explain:
		fmt.Fprintf(stderr, "infera-exec: no command given: infera-exec prepares the container and then runs a worker command\nUsage: infera-exec [OPTIONS] [--] COMMAND [ARG...]; run 'infera-exec --help' for more.\n")
		return exitUsage
	}
	return newPass(o, environ, stdout, stderr).run()
}
