// Package cli is infera-exec's command line: its own options first, then
// the worker command. It is a package of its own so that anything that
// writes infera-exec command lines (the Kubernetes examples' tests) can
// check them with the same parser the binary uses.
package cli

import (
	"fmt"
	"strings"
)

// Options is a parsed command line.
type Options struct {
	Help, Version, Explain, Doctor, JSON, Verbose bool
	// Init: stay as the worker's init instead of exec'ing it; InitGroup:
	// and forward signals to its process group.
	Init, InitGroup bool
	Check           string   // --check ROOT
	Install         string   // --install DEST
	Command         []string // the worker command and its arguments
}

// UsageError is a command line that cannot be run.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// valued are the options that take a value, as --opt VALUE or --opt=VALUE.
var valued = map[string]string{
	"--check":   "a directory: an unpacked image root filesystem or a site-packages directory",
	"--install": "the directory to install the payload into (an emptyDir in a pod)",
}

// Parse splits infera-exec's own options from the command. Options come
// first; the first word that does not start with '-' begins the command and
// everything after it belongs to the command, so no worker argument can be
// taken for an option and no mode can shadow a command name. "--" also ends
// the options.
func Parse(args []string) (Options, error) {
	var o Options
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			o.Command = args[i+1:]
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			o.Command = args[i:]
			break
		}
		name, value, inline := strings.Cut(a, "=")
		if what, ok := valued[name]; ok {
			if !inline {
				value = ""
				if i+1 < len(args) {
					i++
					value = args[i]
				}
			}
			if value == "" {
				return o, &UsageError{fmt.Sprintf("%s needs %s", name, what)}
			}
			switch name {
			case "--check":
				o.Check = value
			case "--install":
				o.Install = value
			}
			continue
		}
		switch a {
		case "-h", "--help":
			o.Help = true
		case "--version":
			o.Version = true
		case "--explain":
			o.Explain = true
		case "--doctor":
			o.Doctor = true
		case "--json":
			o.JSON = true
		case "--verbose":
			o.Verbose = true
		case "--init":
			o.Init = true
		case "--init-group":
			o.Init, o.InitGroup = true, true
		default:
			return o, &UsageError{fmt.Sprintf("unknown option %s; options go before the command, and a command that starts with '-' goes after --", a)}
		}
	}
	modes := 0
	for _, on := range []bool{o.Explain, o.Doctor, o.Check != "", o.Install != ""} {
		if on {
			modes++
		}
	}
	switch {
	case o.JSON && !o.Explain && !o.Doctor && o.Check == "":
		return o, &UsageError{"--json goes with --explain, --doctor or --check (it prints their result as JSON); for JSON log lines set INFERA_EXEC_LOG=json"}
	case o.Init && (o.Doctor || o.Check != "" || o.Install != ""):
		return o, &UsageError{"--init starts a worker and stays as its init; --doctor, --check and --install run no worker"}
	case o.Doctor && modes > 1:
		return o, &UsageError{"--doctor runs the preflight checks on the command that follows it; use it without --explain, --check or --install"}
	case o.Check != "" && (modes > 1 || len(o.Command) > 0):
		return o, &UsageError{"--check evaluates patches against a directory and runs no command; use it alone (with --json if wanted)"}
	case o.Install != "" && (modes > 1 || len(o.Command) > 0):
		return o, &UsageError{"--install copies the payload and runs no command; use it alone"}
	}
	return o, nil
}
