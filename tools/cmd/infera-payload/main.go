// Command infera-payload builds what the overlay ships: the payload
// directory with its index, and the overlay image. Each subcommand is a
// row of the subcommands table; the work is done by a package of this
// module (payloadindex, ociimage), the table only wires flags to it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/progress"
	"github.com/infera/infera-exec/tools/harvest"
	"github.com/infera/infera-exec/tools/outdir"
)

// Exit codes: 0 done, 1 the build failed, 64 (EX_USAGE) a wrong command
// line, an output directory the tool refuses to replace among them
// (outdir.Error: it holds an input, or is not an earlier run's).
const (
	exitFailed = 1
	exitUsage  = 64
)

// A subcommand is one verb of the tool. Adding one is a row in
// subcommands: a summary for the overview, the help text, and flags, which
// registers its options on the flag set and returns what to run once they
// are parsed.
type subcommand struct {
	name     string
	summary  string   // one line in the overview
	synopsis string   // the command line, after "infera-payload NAME"
	about    string   // what it does, for NAME --help
	examples []string // shell commands run from the repository root
	flags    func(fl *flag.FlagSet) action
}

// action runs a subcommand with the process environment, reporting what
// it wrote on stdout and how far long work is on stderr. A usageError is
// a wrong command line, not a failure.
type action func(env []string, stdout, stderr io.Writer) error

type usageError struct{ error }

var version = "dev" // set by make build: -ldflags "-X main.version=..."

var subcommands = []subcommand{harvestCommand, verifyCommand, pruneCommand, indexCommand, imageCommand}

func main() {
	harvest.SandboxChild() // the import check's sandbox: does not return
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

func run(args, env []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		overview(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, "infera-payload", version)
		return 0
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			if sc := lookup(args[1]); sc != nil {
				help(stdout, sc, nil)
				return 0
			}
			fmt.Fprintf(stderr, "infera-payload: no subcommand %q\n\n", args[1])
			overview(stderr)
			return exitUsage
		}
		overview(stdout)
		return 0
	}
	sc := lookup(args[0])
	if sc == nil {
		fmt.Fprintf(stderr, "infera-payload: no subcommand %q\n\n", args[0])
		overview(stderr)
		return exitUsage
	}

	fl := flag.NewFlagSet("infera-payload "+sc.name, flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {} // help goes to stdout below; errors get a pointer to it
	act := sc.flags(fl)
	hint := fmt.Sprintf("run 'infera-payload %s --help' for its options\n", sc.name)
	if err := fl.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help(stdout, sc, fl)
			return 0
		}
		fmt.Fprint(stderr, hint)
		return exitUsage
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "infera-payload %s: unexpected argument %q\n%s", sc.name, fl.Arg(0), hint)
		return exitUsage
	}
	if err := act(env, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "infera-payload %s: %v\n", sc.name, err)
		var u usageError
		var refused *outdir.Error
		if errors.As(err, &u) || errors.As(err, &refused) {
			fmt.Fprint(stderr, hint)
			return exitUsage
		}
		return exitFailed
	}
	return 0
}

func lookup(name string) *subcommand {
	for i := range subcommands {
		if subcommands[i].name == name {
			return &subcommands[i]
		}
	}
	return nil
}

func overview(w io.Writer) {
	fmt.Fprint(w, `infera-payload builds what the overlay ships, at build time; the shim
(infera-exec) does not link it. Run it from the repository root: the
defaults are paths there, as make uses them.

Usage:
  infera-payload SUBCOMMAND [OPTIONS]
  infera-payload SUBCOMMAND --help    options and examples of one subcommand

Subcommands:
`)
	width := 0
	for _, sc := range subcommands {
		width = max(width, len(sc.name))
	}
	for _, sc := range subcommands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, sc.name, sc.summary)
	}
	fmt.Fprint(w, "\nExamples:\n")
	for _, sc := range subcommands {
		fmt.Fprintf(w, "  %s\n", sc.examples[0])
	}
	fmt.Fprint(w, "\nExit status: 0 done, 1 the build failed, 64 a wrong command line (an output\ndirectory it will not replace among them: one that holds or sits inside an\ninput, or a non-empty directory without the "+outdir.Marker+" an earlier run\nwrote; -force replaces the latter).\n")
}

// help is the subcommand's page; fl, when given, lists its options with
// their defaults.
func help(w io.Writer, sc *subcommand, fl *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: infera-payload %s %s\n\n%s\n", sc.name, sc.synopsis, strings.TrimSpace(sc.about))
	if fl == nil {
		fl = flag.NewFlagSet(sc.name, flag.ContinueOnError)
		sc.flags(fl)
	}
	fmt.Fprint(w, "\nOptions:\n")
	fl.SetOutput(w)
	fl.PrintDefaults()
	fmt.Fprint(w, "\nExamples:\n")
	for _, e := range sc.examples {
		fmt.Fprintf(w, "  %s\n", e)
	}
}

// clock times the progress lines: a seam for tests, which step it.
var clock = time.Now

// quietFlag registers -q, which turns the progress lines off.
func quietFlag(fl *flag.FlagSet) *bool {
	return fl.Bool("q", false, "quiet: no progress lines on stderr")
}

// reporter says how far long work is on stderr, a line at most every
// progress.Interval and one when each step is done, in infera-exec's log
// format: text, or JSON lines with INFERA_EXEC_LOG=json. Quiet: nil.
func reporter(quiet bool, env []string, stderr io.Writer) *progress.Reporter {
	if quiet {
		return nil
	}
	log := logging.NewNamed(stderr, "infera-payload", logJSON(env), false, nil)
	return &progress.Reporter{Say: func(l string) { log.Info(l) }, Now: clock}
}

// logJSON reads INFERA_EXEC_LOG as infera-exec does: json, in any case.
func logJSON(env []string) bool {
	json := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "INFERA_EXEC_LOG="); ok {
			json = strings.EqualFold(v, "json")
		}
	}
	return json
}
