// Package pyimport answers where a Python worker will import a top-level
// package from, without starting Python: it reads the worker's command
// (the interpreter, its options, -m, -c or a script), the interpreter's
// layout (its prefix, pyvenv.cfg, Debian's or CPython's site.py), the
// environment (PYTHONPATH, PYTHONHOME, PYTHONNOUSERSITE, PYTHONSAFEPATH,
// PYTHONUSERBASE, HOME) and the site directories with their .pth files,
// and builds sys.path and sys.meta_path as CPython 3's getpath and site
// would. Where something at start-up could run code it does not know (a
// .pth line other than the setuptools editable finder and the
// distutils-precedence shim, a sitecustomize or usercustomize, an
// interpreter it cannot place), the answer says it is uncertain and why,
// and the caller asks the interpreter itself.
package pyimport

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/elfload"
	"github.com/infera/infera-exec/internal/lookpath"
)

// Env reads one variable of the worker's environment.
type Env func(key string) (string, bool)

// Flags are the interpreter options that change sys.path.
type Flags struct {
	Isolated   bool // -I: all three below (and, on 3.10, no sys.path[0])
	IgnoreEnv  bool // -E (and -I): PYTHON* variables are not read
	NoUserSite bool // -s (and -I)
	NoSite     bool // -S: site is not imported
	SafePath   bool // -P (and -I): no script directory or working directory first
}

// Main is how the interpreter is told what to run.
type Main string

const (
	MainCode   Main = "-c"     // -c CODE, or nothing (sys.path[0] is "")
	MainModule Main = "-m"     // -m MODULE (sys.path[0] is the working directory)
	MainScript Main = "script" // a script file (sys.path[0] is its directory)
)

// Command is the worker's command as CPython reads it.
type Command struct {
	Executable string // sys.executable: the interpreter's path as found, links not resolved
	Flags      Flags
	Main       Main
	Script     string   // the script's path, for MainScript
	XOptions   []string // the values of -X, in order ("pycache_prefix=/x")
	optP       bool     // -P given (an option of CPython 3.11 and later only)
}

// NotPythonError is ParseCommand's answer for a command that is not a
// Python interpreter and does not run one itself by its #! line (a shell,
// a shell script, /bin/true): which interpreter imports the engine is then
// not the command's to say.
type NotPythonError struct{ msg string }

func (e *NotPythonError) Error() string { return e.msg }

// isPythonName says whether a file name is python, python3 or python3.N
// (N decimal digits).
func isPythonName(n string) bool {
	if n == "python" || n == "python3" {
		return true
	}
	minor, ok := strings.CutPrefix(n, "python3.")
	return ok && minor != "" && strings.Trim(minor, "0123456789") == ""
}

// ParseCommand reads argv (argv[0] resolved to path on the worker's PATH,
// in working directory cwd) as the command of a CPython interpreter: the
// interpreter itself, or a script whose #! line names one (a console
// script such as `vllm serve`). It fails, saying why, for anything else.
func ParseCommand(argv []string, path string, env Env, cwd string) (Command, error) {
	if len(argv) == 0 || path == "" {
		return Command{}, fmt.Errorf("the worker's command was not resolved")
	}
	head, err := readHead(path)
	if err != nil {
		return Command{}, err
	}
	if bytes.HasPrefix(head, []byte("#!")) {
		if isPythonName(filepath.Base(path)) {
			return Command{}, fmt.Errorf("the interpreter %s is a script (a wrapper or shim), not CPython itself", path)
		}
		return fromShebang(head, argv, path, env, cwd)
	}
	if !bytes.HasPrefix(head, []byte("\x7fELF")) {
		return Command{}, &NotPythonError{fmt.Sprintf("the worker's command %s is neither an ELF executable nor a #! script", path)}
	}
	if !isPythonName(filepath.Base(path)) {
		return Command{}, &NotPythonError{fmt.Sprintf("the worker's command %s is not a Python interpreter (its name is not python, python3 or python3.N)", path)}
	}
	if err := isCPython(path); err != nil {
		return Command{}, err
	}
	return parseOptions(Command{Executable: path}, argv[1:], cwd)
}

// isCPython fails unless the ELF executable path is CPython's own: one
// that names Py_BytesMain, CPython's entry point (defined in a static
// build such as Debian's, imported from libpython in a shared one). A
// program named like it that does not (Nix's makeBinaryWrapper, which
// sets PYTHONPATH and the like and then runs the real interpreter) runs
// another interpreter with settings this resolver cannot read.
func isCPython(path string) error {
	ok, err := elfload.NamesDynamic(path, "Py_BytesMain")
	if err != nil {
		return fmt.Errorf("%s is named like CPython, but it cannot be read as CPython's executable (one that names Py_BytesMain): %v", path, err)
	}
	if !ok {
		return fmt.Errorf("%s is named like CPython but is not its executable (it names no Py_BytesMain): a wrapper or launcher that runs an interpreter with settings of its own", path)
	}
	return nil
}

// EnvEdit is one change env(1) makes to the environment of the command
// it runs: a variable set, one unset, or all of them cleared (-i).
type EnvEdit struct {
	Key, Value string
	Unset      bool
	Clear      bool
}

// maxEnvs bounds the env(1) commands followed one inside another.
const maxEnvs = 8

// FollowEnv follows env(1) at the head of the worker's command (argv,
// argv[0] resolved to path): `env [-i] [-u NAME] [NAME=VALUE]... COMMAND
// [ARG]...` runs COMMAND, looked up on the PATH it sets, with those
// changes to the environment. It returns the command env runs, its path,
// the environment it sees and the edits that made it; argv and path as
// they are when the command is not env. Any other option of env (-C,
// -S, ...) is an error: what it runs is then not this resolver's to say.
func FollowEnv(argv []string, path string, env Env, cwd string) ([]string, string, Env, []EnvEdit, error) {
	var edits []EnvEdit
	for n := 0; len(argv) > 0 && filepath.Base(path) == "env"; n++ {
		if n == maxEnvs {
			return nil, "", nil, nil, fmt.Errorf("more than %d env commands one inside another", maxEnvs)
		}
		i := 1
	opts:
		for ; i < len(argv); i++ {
			a := argv[i]
			switch {
			case a == "-i" || a == "-" || a == "--ignore-environment":
				edits = append(edits, EnvEdit{Clear: true})
			case a == "-u" || a == "--unset":
				if i++; i == len(argv) {
					return nil, "", nil, nil, fmt.Errorf("env %s without a name", a)
				}
				edits = append(edits, EnvEdit{Key: argv[i], Unset: true})
			case strings.HasPrefix(a, "--unset="):
				edits = append(edits, EnvEdit{Key: strings.TrimPrefix(a, "--unset="), Unset: true})
			case strings.HasPrefix(a, "-u"):
				edits = append(edits, EnvEdit{Key: a[2:], Unset: true})
			case a == "--":
				i++
				break opts
			case strings.HasPrefix(a, "-"):
				return nil, "", nil, nil, fmt.Errorf("the env option %q is not one this resolver follows", a)
			default:
				break opts
			}
		}
		for ; i < len(argv); i++ {
			k, v, ok := strings.Cut(argv[i], "=")
			if !ok || k == "" {
				break
			}
			edits = append(edits, EnvEdit{Key: k, Value: v})
		}
		if i == len(argv) {
			return nil, "", nil, nil, fmt.Errorf("env without a command (it prints the environment)")
		}
		env = editedEnv(env, edits)
		pathVar, _ := env("PATH")
		p, err := lookpath.Command(argv[i], pathVar, cwd)
		if err != nil {
			return nil, "", nil, nil, fmt.Errorf("the command env runs: %w", err)
		}
		argv, path = argv[i:], p
	}
	return argv, path, env, edits, nil
}

// editedEnv is base with edits applied, in order.
func editedEnv(base Env, edits []EnvEdit) Env {
	set := map[string]*string{}
	cleared := false
	for _, e := range edits {
		switch {
		case e.Clear:
			cleared, set = true, map[string]*string{}
		case e.Unset:
			set[e.Key] = nil
		default:
			v := e.Value
			set[e.Key] = &v
		}
	}
	return func(k string) (string, bool) {
		if v, ok := set[k]; ok {
			if v == nil {
				return "", false
			}
			return *v, true
		}
		if cleared {
			return "", false
		}
		return base(k)
	}
}

// fromShebang reads a script's #! line: "#!/abs/python3 [option]" or
// "#!/usr/bin/env python3", the interpreter then running the script.
func fromShebang(head []byte, argv []string, path string, env Env, cwd string) (Command, error) {
	line, _, _ := bytes.Cut(head[2:], []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) == 0 {
		return Command{}, fmt.Errorf("the #! line of %s names no interpreter", path)
	}
	interp, opts := fields[0], fields[1:]
	if filepath.Base(interp) == "env" && len(opts) == 1 && !strings.HasPrefix(opts[0], "-") {
		pathVar, _ := env("PATH")
		p, err := lookpath.Command(opts[0], pathVar, cwd)
		if err != nil {
			return Command{}, fmt.Errorf("the #! line of %s: %w", path, err)
		}
		interp, opts = p, nil
	}
	if len(opts) > 1 || !filepath.IsAbs(interp) {
		return Command{}, fmt.Errorf("the #! line of %s (%q) is not one this resolver reads", path, string(line))
	}
	ihead, err := readHead(interp)
	if err != nil {
		return Command{}, err
	}
	if !isPythonName(filepath.Base(interp)) {
		return Command{}, &NotPythonError{fmt.Sprintf("the #! line of %s names %s, not a CPython interpreter executable", path, interp)}
	}
	if !bytes.HasPrefix(ihead, []byte("\x7fELF")) {
		return Command{}, fmt.Errorf("the #! line of %s names %s, not a CPython interpreter executable", path, interp)
	}
	if err := isCPython(interp); err != nil {
		return Command{}, fmt.Errorf("the #! line of %s: %w", path, err)
	}
	// The kernel runs: interp [opt] path args...
	args := append(append(opts[:len(opts):len(opts)], path), argv[1:]...)
	return parseOptions(Command{Executable: interp}, args, cwd)
}

// parseOptions reads the interpreter's options up to what it runs, as
// CPython's command line parser does (letters combine: -Es is -E -s).
func parseOptions(c Command, args []string, cwd string) (Command, error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-" || a == "--" || strings.HasPrefix(a, "--"):
			return c, fmt.Errorf("the interpreter option %q is not one this resolver reads", a)
		case !strings.HasPrefix(a, "-"):
			c.Main, c.Script = MainScript, a
			if !filepath.IsAbs(a) {
				c.Script = filepath.Join(cwd, a)
			}
			return c, nil
		}
		for j := 1; j < len(a); j++ {
			switch ch := a[j]; ch {
			case 'I':
				c.Flags.Isolated, c.Flags.IgnoreEnv, c.Flags.NoUserSite, c.Flags.SafePath = true, true, true, true
			case 'E':
				c.Flags.IgnoreEnv = true
			case 's':
				c.Flags.NoUserSite = true
			case 'S':
				c.Flags.NoSite = true
			case 'P':
				c.Flags.SafePath, c.optP = true, true
			case 'b', 'B', 'd', 'i', 'O', 'q', 'R', 'u', 'v', 'x':
			case 'c', 'm':
				c.Main = MainCode
				if ch == 'm' {
					c.Main = MainModule
				}
				return c, nil
			case 'W', 'X':
				val := a[j+1:]
				if j == len(a)-1 {
					i++ // the value is the next argument
					if i >= len(args) {
						return c, fmt.Errorf("the interpreter option -%c has no value", ch)
					}
					val = args[i]
				}
				if ch == 'X' {
					c.XOptions = append(c.XOptions, val)
				}
				j = len(a) // the rest of this argument was the value
			default:
				return c, fmt.Errorf("the interpreter option -%c (in %q) is not one this resolver reads", ch, a)
			}
		}
	}
	c.Main = MainCode // no command: the REPL or stdin, with "" first
	return c, nil
}

// readHead reads the first bytes of an executable: its magic or #! line.
func readHead(path string) ([]byte, error) {
	f, err := boundedread.Open(path, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the interpreter: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := f.Read(buf)
	return buf[:n], nil
}

// HomeOf is the home directory /etc/passwd gives uid, as Python's
// expanduser falls back to when HOME is not set; "" when not listed.
func HomeOf(uid int) string {
	data, err := boundedread.File("/etc/passwd", boundedread.SmallText)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 6 && f[2] == strconv.Itoa(uid) {
			return f[5]
		}
	}
	return ""
}
