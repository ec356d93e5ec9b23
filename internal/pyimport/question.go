package pyimport

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
)

// Question is how the probe asks the worker's own interpreter where it
// imports from, as the worker will start: the interpreter the worker's
// command runs (through env(1) and a #! line), the worker's options that
// change imports, its sys.path[0] rule and its environment. The probe
// runs Interpreter Options... -c PROGRAM Path0 NAMES...: its program
// puts in sys.path[0] what the worker's would hold there (Path0).
type Question struct {
	Interpreter string
	Options     []string  // -I, -E, -s, -S, -P and -X as the worker gives them
	Edits       []EnvEdit // what env(1) in the worker's command changes
	// Path0 is the worker's sys.path[0] rule for the probe's program:
	// "c" (-c: the empty string), "m" (-m: the working directory as
	// getcwd names it), or "s" and the script's directory (links
	// resolved). The interpreter itself leaves none under -I, -P or (from
	// 3.11) PYTHONSAFEPATH, and the program then puts none.
	Path0 string
	// Unfollowed says why the worker's own interpreter cannot be asked
	// (a shell script, a launcher this does not follow); "" when it can.
	// The probe then asks the interpreter infera-exec was given, which
	// is the worker's only when the operator says so (INFERA_PYTHON).
	Unfollowed string
}

// Path0Program begins the probe's program: run as Question says, with
// the Path0 rule as its first argument (which it takes off sys.argv), it
// puts in sys.path[0] what the worker's would hold, unless the
// interpreter put nothing there (-I, -P, PYTHONSAFEPATH from 3.11; -I
// on 3.10).
const Path0Program = `import sys
rule = sys.argv.pop(1)
if sys.path and not (getattr(sys.flags, "safe_path", False) or sys.flags.isolated):
    if rule == "m":
        sys.path[0] = __import__("os").getcwd()
    elif rule[:1] == "s":
        sys.path[0] = rule[1:]
`

// Ask is the worker's question, for the worker started by q.
func Ask(q Query) Question {
	env := q.Env
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	argv, path, env, edits, err := FollowEnv(q.Argv, q.Path, env, q.Cwd)
	if err != nil {
		return Question{Unfollowed: err.Error()}
	}
	c, err := ParseCommand(argv, path, env, q.Cwd)
	if err != nil {
		// An ELF named like CPython that is not its executable (a
		// wrapper that runs it with settings of its own) is still the
		// worker's interpreter: asked as the worker asks it, it answers
		// as the worker will.
		var np *NotPythonError
		head, herr := readHead(path)
		if errors.As(err, &np) || herr != nil || !bytes.HasPrefix(head, []byte("\x7fELF")) || !isPythonName(filepath.Base(path)) {
			return Question{Unfollowed: err.Error()}
		}
		if c, err = parseOptions(Command{Executable: path}, argv[1:], q.Cwd); err != nil {
			return Question{Unfollowed: err.Error()}
		}
	}
	qn := Question{Interpreter: c.Executable, Edits: edits, Path0: "c"}
	f := c.Flags
	switch {
	case f.Isolated:
		qn.Options = append(qn.Options, "-I")
	default:
		for _, o := range []struct {
			on   bool
			flag string
		}{{f.IgnoreEnv, "-E"}, {f.NoUserSite, "-s"}, {c.optP, "-P"}} {
			if o.on {
				qn.Options = append(qn.Options, o.flag)
			}
		}
	}
	if f.NoSite {
		qn.Options = append(qn.Options, "-S")
	}
	for _, x := range c.XOptions {
		qn.Options = append(qn.Options, "-X", x)
	}
	switch c.Main {
	case MainModule:
		qn.Path0 = "m"
	case MainScript:
		real, err := hostFS.evalSymlinks(c.Script)
		if err != nil {
			return Question{Unfollowed: fmt.Sprintf("resolving the script %s: %v", c.Script, err)}
		}
		qn.Path0 = "s" + filepath.Dir(real)
	}
	return qn
}
