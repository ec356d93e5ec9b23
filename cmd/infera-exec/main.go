// Command infera-exec is the entrypoint of a stock vLLM or SGLang ROCm
// image with an overlay payload mounted beside it. It prepares the
// container in one pass and replaces itself with the worker.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
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
	exitConfig      = 78  // EX_CONFIG: payload, interpreter or configuration unusable
	exitNotExec     = 126 // command found but cannot be executed
	exitNotFound    = 127 // command not found
)

func main() {
	os.Exit(run(os.Args, os.Environ(), os.Stdout, os.Stderr))
}

type options struct {
	help, version, explain, json, verbose bool
	check                                 string // --check ROOT
	command                               []string
}

// usageError is a command line that cannot be run.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// parseArgs splits infera-exec's own options from the command. Options come
// first; the first word that does not start with '-' begins the command and
// everything after it belongs to the command, so no worker argument can be
// taken for an option and no mode can shadow a command name. "--" also ends
// the options.
func parseArgs(args []string) (options, error) {
	var o options
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			o.command = args[i+1:]
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			o.command = args[i:]
			break
		}
		switch {
		case a == "--check" || strings.HasPrefix(a, "--check="):
			v, inline := strings.CutPrefix(a, "--check=")
			if !inline {
				v = ""
				if i+1 < len(args) {
					i++
					v = args[i]
				}
			}
			if v == "" {
				return o, &usageError{"--check needs a directory: an unpacked image root filesystem or a site-packages directory"}
			}
			o.check = v
		case a == "-h" || a == "--help":
			o.help = true
		case a == "--version":
			o.version = true
		case a == "--explain":
			o.explain = true
		case a == "--json":
			o.json = true
		case a == "--verbose":
			o.verbose = true
		default:
			return o, &usageError{fmt.Sprintf("unknown option %s; options go before the command, and a command that starts with '-' goes after --", a)}
		}
	}
	if o.json && !o.explain && o.check == "" {
		return o, &usageError{"--json goes with --explain or --check (it prints their result as JSON); for JSON log lines set INFERA_EXEC_LOG=json"}
	}
	if o.check != "" && (o.explain || len(o.command) > 0) {
		return o, &usageError{"--check evaluates patches against a directory and runs no command; use it alone (with --json if wanted)"}
	}
	return o, nil
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: %v\nRun 'infera-exec --help' for usage.\n", err)
		return exitUsage
	}
	switch {
	case o.help:
		io.WriteString(stdout, helpText)
		return exitOK
	case o.version:
		fmt.Fprintf(stdout, "infera-exec %s (commit %s, %s, %s/%s)\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	case o.check != "":
		return runCheck(o.check, o.json, environ, stdout, stderr)
	case len(o.command) == 0 && !o.explain:
		fmt.Fprintf(stderr, "infera-exec: no command given: infera-exec prepares the container and then runs a worker command\nUsage: infera-exec [OPTIONS] [--] COMMAND [ARG...]; run 'infera-exec --help' for more.\n")
		return exitUsage
	}
	return newPass(o, environ, stdout, stderr).run()
}
