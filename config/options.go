package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/infera/infera-exec/internal/userdb"
)

// Options is a parsed command line: infera-exec's own options, then the
// worker command.
type Options struct {
	Help, Version, Explain, Doctor, JSON, Verbose, Quiet bool
	Report                                               bool     // --report: print the last report
	Flags                                                         // --init, --init-group
	Check                                                string   // --check ROOT
	Apply                                                string   // --apply ROOT
	Install                                              string   // --install DEST
	Command                                              []string // the worker command and its arguments
}

// UsageError is a command line that cannot be run: exit code 64.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// ExitCode is EX_USAGE.
func (e *UsageError) ExitCode() int { return 64 }

// option is one command-line option: registered once, with its value's
// name (valued options only) and its --help text.
type option struct {
	names []string // the first is the one --help shows first
	arg   string   // the value's name; "" for a switch
	usage string
	field func(o *Options) any // *bool or *string
}

var options = []option{
	{[]string{"explain"}, "", "run every detection and check, change nothing, print the plan: the exact argv and cwd, what the environment gains (--verbose or --json: all of it); exit 0 if the worker would start, else the code it would refuse with", func(o *Options) any { return &o.Explain }},
	{[]string{"json"}, "", "with --explain, --doctor or --check: print the result as JSON", func(o *Options) any { return &o.JSON }},
	{[]string{"doctor"}, "", "run only the preflight checks on the command that follows; exit 0, 1 (warnings) or 78 (errors)", func(o *Options) any { return &o.Doctor }},
	{[]string{"install"}, "DEST", "copy the payload this binary belongs to into DEST (an emptyDir), checked against payload.index.json; no command", func(o *Options) any { return &o.Install }},
	{[]string{"check"}, "ROOT", "evaluate the engine patches against an unpacked image or a site-packages directory, without Python, writing nothing, and the payload's trees against it; exit 65 if a patch drifted, 69 if a payload file does not load there or shadows the image's", func(o *Options) any { return &o.Check }},
	{[]string{"apply"}, "ROOT", "write the engine patches (built-in and the payload's) into an unpacked image or a site-packages directory at build time, without Python, as a start would write them; then the payload's trees against it; exit codes as --check (65 also when a patch could not be written)", func(o *Options) any { return &o.Apply }},
	{[]string{"report"}, "", "print the last report of the state directory (INFERA_EXEC_REPORT, else report.json there) and exit, for an image without a shell or cat; --json: as the file holds it; exit 0, or 66 when there is none or it cannot be read", func(o *Options) any { return &o.Report }},
	{[]string{"init"}, "", "do not exec: start COMMAND as a child and stay as its minimal init (PID 1, else a child subreaper), forwarding every signal but KILL, STOP and CHLD (TSTP, TTIN, TTOU stop the init too), reaping zombies, exiting with its status (128+signal when a signal killed it); for docker run", func(o *Options) any { return &o.Init }},
	{[]string{"init-group"}, "", "as --init, forwarding signals to the worker's process group, which gets SIGTERM when the worker ends (SIGKILL 5s later)", func(o *Options) any { return &o.InitGroup }},
	{[]string{"user"}, "UID[:GID]", "after the steps that need root (libionic swap, patches, limits), run the worker as this user (a uid or a name of the image's /etc/passwd; GID or group name: that group and no supplementary ones, else the user's groups from /etc/group), HOME from /etc/passwd; as gosu does; only as root (else 77); also INFERA_EXEC_USER", func(o *Options) any { return &o.User }},
	{[]string{"init-exit-map"}, "MAP", "with --init: exit codes to exit with instead of the worker's, FROM:TO or FROM for FROM:0, e.g. 143 (INFERA_EXEC_INIT_EXIT_MAP)", func(o *Options) any { return &o.InitExitMap }},
	{[]string{"init-rewrite"}, "MAP", "with --init: signals rewritten before they are forwarded, FROM:TO, TO 0 drops FROM, e.g. TERM:QUIT (INFERA_EXEC_INIT_REWRITE)", func(o *Options) any { return &o.InitRewrite }},
	{[]string{"init-pdeathsig"}, "SIG", "with --init: the signal the init gets when its parent ends, e.g. KILL (INFERA_EXEC_INIT_PDEATHSIG)", func(o *Options) any { return &o.InitPdeathsig }},
	{[]string{"verbose"}, "", "also log debug lines; with --explain, the full environment", func(o *Options) any { return &o.Verbose }},
	{[]string{"q", "quiet"}, "", "with --install: no progress lines, only the summary", func(o *Options) any { return &o.Quiet }},
	{[]string{"version"}, "", "print version, commit and Go version", func(o *Options) any { return &o.Version }},
	{[]string{"h", "help"}, "", "print this help", func(o *Options) any { return &o.Help }},
}

// valueWhat says what a valued option needs, for the error when it is
// missing.
var valueWhat = map[string]string{
	"check":          "a directory: an unpacked image root filesystem or a site-packages directory",
	"apply":          "a directory: an unpacked image root filesystem or a site-packages directory",
	"install":        "the directory to install the payload into (an emptyDir in a pod)",
	"user":           "the user to run the worker as: UID[:GID] or NAME[:GROUP], e.g. 1000:1000",
	"init-exit-map":  "a map of exit codes, FROM:TO or FROM (for FROM:0), e.g. 143",
	"init-rewrite":   "a map of signals, FROM:TO, e.g. TERM:QUIT",
	"init-pdeathsig": "a signal, e.g. KILL",
}

// ParseArgs splits infera-exec's own options from the command (args
// without the program name). Options come first; the first word that does
// not start with '-' begins the command and everything after it belongs to
// the command, so no worker argument can be taken for an option and no
// mode can shadow a command name. "--" also ends the options.
func ParseArgs(args []string) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("infera-exec", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, opt := range options {
		for _, n := range opt.names {
			switch p := opt.field(&o).(type) {
			case *bool:
				fs.BoolVar(p, n, false, opt.usage)
			case *string:
				fs.StringVar(p, n, "", opt.usage)
			}
		}
	}
	if err := fs.Parse(valuesAfterSwitches(args)); err != nil {
		return o, usageOf(err, args)
	}
	if len(fs.Args()) > 0 {
		o.Command = fs.Args()
	}
	for _, n := range []string{"check", "apply", "install", "user", "init-exit-map", "init-rewrite", "init-pdeathsig"} {
		if f := fs.Lookup(n); f != nil && f.Value.String() == "" && set(fs, n) {
			return o, &UsageError{fmt.Sprintf("--%s needs %s", n, valueWhat[n])}
		}
	}
	if o.InitGroup {
		o.Init = true
	}
	if o.User != "" {
		if _, err := userdb.ParseSpec(o.User); err != nil {
			return o, &UsageError{fmt.Sprintf("--user %v", err)}
		}
	}
	if err := o.checkInitOptions(); err != nil {
		return o, err
	}
	return o, o.validate()
}

// valuesAfterSwitches lets a valued option's switches come between it and
// its value, as in --check --json ROOT: the switches move before it, so
// that ROOT, not --json, is its value. Only the options part changes.
func valuesAfterSwitches(args []string) []string {
	isSwitch := func(a string) bool {
		for _, opt := range options {
			for _, n := range opt.names {
				if _, b := opt.field(&Options{}).(*bool); b && (a == "-"+n || a == "--"+n) {
					return true
				}
			}
		}
		return false
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return append(out, args[i:]...)
		}
		if name := strings.TrimLeft(a, "-"); valueWhat[name] != "" && !strings.Contains(a, "=") {
			j := i + 1
			for j < len(args) && isSwitch(args[j]) {
				out = append(out, args[j])
				j++
			}
			out = append(out, a)
			i = j - 1
			continue
		}
		out = append(out, a)
	}
	return out
}

// set reports whether the option name was given.
func set(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// usageOf turns the flag package's errors into infera-exec's wording,
// naming an unknown option as it was written.
func usageOf(err error, args []string) error {
	msg := err.Error()
	if errors.Is(err, flag.ErrHelp) {
		return &UsageError{"unknown option -help"}
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return &UsageError{fmt.Sprintf("--%s needs %s", name, valueWhat[name])}
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		for _, a := range args {
			if given, _, _ := strings.Cut(a, "="); strings.TrimLeft(given, "-") == strings.TrimLeft(name, "-") {
				name = given
				break
			}
		}
		return &UsageError{fmt.Sprintf("unknown option %s; options go before the command, and a command that starts with '-' goes after --", name)}
	}
	return &UsageError{msg}
}

// checkInitOptions refuses a malformed init option as a usage error
// (Load reads it again, with the same parser, in place of its variable).
func (o Options) checkInitOptions() error {
	checks := []struct {
		name, v string
		parse   func(string) error
	}{
		{"init-exit-map", o.InitExitMap, func(v string) error { _, err := ParseExitMap(v); return err }},
		{"init-rewrite", o.InitRewrite, func(v string) error { _, err := ParseRewrite(v); return err }},
		{"init-pdeathsig", o.InitPdeathsig, func(v string) error { _, err := ParseSignal(v, false); return err }},
	}
	for _, c := range checks {
		if c.v != "" {
			if err := c.parse(c.v); err != nil {
				return &UsageError{"--" + c.name + ": " + err.Error()}
			}
		}
	}
	return nil
}

// validate refuses the combinations of modes that cannot run together.
func (o Options) validate() error {
	modes := 0
	for _, on := range []bool{o.Explain, o.Doctor, o.Check != "", o.Apply != "", o.Install != "", o.Report} {
		if on {
			modes++
		}
	}
	switch {
	case len(o.Command) == 0 && modes == 0 && !o.Help && !o.Version:
		return &UsageError{"no command given: infera-exec prepares the container and then runs a worker command (infera-exec [OPTIONS] [--] COMMAND [ARG...])"}
	case o.Report && (modes > 1 || len(o.Command) > 0 || o.Init || o.User != ""):
		return &UsageError{"--report prints the last report and runs no command; use it alone (with --json if wanted)"}
	case o.JSON && !o.Explain && !o.Doctor && o.Check == "" && o.Apply == "" && !o.Report:
		return &UsageError{"--json goes with --explain, --doctor, --check, --apply or --report (it prints their result as JSON); for JSON log lines set INFERA_EXEC_LOG=json"}
	case o.Init && (o.Doctor || o.Check != "" || o.Apply != "" || o.Install != ""):
		return &UsageError{"--init starts a worker and stays as its init; --doctor, --check, --apply and --install run no worker"}
	case o.User != "" && (o.Doctor || o.Check != "" || o.Apply != "" || o.Install != ""):
		return &UsageError{"--user says whom the worker runs as; --doctor, --check, --apply and --install run no worker"}
	case o.Doctor && modes > 1:
		return &UsageError{"--doctor runs the preflight checks on the command that follows it; use it without --explain, --check or --install"}
	case o.Check != "" && (modes > 1 || len(o.Command) > 0):
		return &UsageError{"--check evaluates patches against a directory and runs no command; use it alone (with --json if wanted)"}
	case o.Apply != "" && (modes > 1 || len(o.Command) > 0):
		return &UsageError{"--apply writes the patches into a directory and runs no command; use it alone (with --json if wanted)"}
	case o.Install != "" && (modes > 1 || len(o.Command) > 0):
		return &UsageError{"--install copies the payload and runs no command; use it alone"}
	}
	return nil
}

// HelpOptions is the options part of --help, from the one table of them.
func HelpOptions() string {
	var b strings.Builder
	b.WriteString("Options (before COMMAND; the first word that is not an option starts it):\n")
	for _, opt := range options {
		var names []string
		for _, n := range opt.names {
			if len(n) == 1 {
				names = append(names, "-"+n)
			} else {
				names = append(names, "--"+n)
			}
		}
		head := strings.Join(names, ", ")
		if opt.arg != "" {
			head += " " + opt.arg
		}
		writeWrapped(&b, head, opt.usage, 17)
	}
	writeWrapped(&b, "--", "end of options; use it when COMMAND starts with '-'", 17)
	return b.String()
}
