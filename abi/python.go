package abi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/linkchain"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/lookpath"
	"github.com/infera/infera-exec/internal/procgroup"
)

// Python is the interpreter the worker will run and its CPython version.
type Python struct {
	Interpreter string   `json:"interpreter"` // as configured (INFERA_PYTHON or python3)
	Path        string   `json:"path"`        // resolved on PATH
	Chain       []string `json:"chain,omitempty"`
	Major       int      `json:"major"`
	Minor       int      `json:"minor"`
	DecidedBy   string   `json:"decided_by"`
	Asked       bool     `json:"asked"` // the interpreter was run
	AskTime     string   `json:"ask_time,omitempty"`
}

// Tree is the payload's pure-Python tree name for this version, e.g. py312.
func (p Python) Tree() string { return fmt.Sprintf("py%d%d", p.Major, p.Minor) }

// Version is "3.12".
func (p Python) Version() string { return fmt.Sprintf("%d.%d", p.Major, p.Minor) }

var (
	pyVersionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\d+)\.(\d+)(?:\.\d+)?`) })
	askOutputRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)$`) })
)

// PythonProbe says how to find and, if needed, ask the interpreter.
type PythonProbe struct {
	Interpreter string        // INFERA_PYTHON, default python3
	Path        string        // Interpreter resolved; "" = resolve it here
	Env         *environ.Env  // environment the interpreter is run with
	Dir         string        // working directory (pyenv reads .python-version there)
	Timeout     time.Duration // for asking the interpreter
}

type claim struct {
	major, minor int
	source       string
}

// DetectPython decides the CPython major.minor without starting Python when
// the interpreter's name, its symlink chain or its venv's pyvenv.cfg say it
// and agree; otherwise it runs the interpreter once, with a timeout.
func DetectPython(ctx context.Context, pr PythonProbe) (Python, error) {
	p := Python{Interpreter: pr.Interpreter}
	if p.Interpreter == "" {
		p.Interpreter = "python3"
	}
	path, err := pr.Path, error(nil)
	if path == "" {
		if path, err = Interpreter(p.Interpreter, pathOf(pr.Env), pr.Dir); err != nil {
			return p, err
		}
	}
	// With an empty or relative Dir the lookup answers relative to this
	// process's cwd. Run that very file: exec would search PATH again for a
	// bare "python3", and take a relative path relative to Dir once more.
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	p.Path = path

	var claims []claim
	add := func(major, minor int, source string) {
		claims = append(claims, claim{major, minor, source})
	}
	if major, minor, ok := pythonNameVersion(filepath.Base(path)); ok {
		add(atoi(major), atoi(minor), "interpreter name "+path)
	}
	if cfg, major, minor, ok := venvVersion(path); ok {
		add(major, minor, "pyvenv.cfg "+cfg)
	}
	chain, err := linkchain.Follow(path)
	p.Chain = chain
	if err != nil {
		return p, fmt.Errorf("python interpreter %s: %w", path, err)
	}
	for _, hop := range chain[1:] {
		if major, minor, ok := pythonNameVersion(filepath.Base(hop)); ok {
			add(atoi(major), atoi(minor), "symlink chain "+strings.Join(chain, " -> "))
			break
		}
	}

	if len(claims) > 0 {
		agree := true
		for _, c := range claims[1:] {
			if c.major != claims[0].major || c.minor != claims[0].minor {
				agree = false
			}
		}
		if agree {
			p.Major, p.Minor, p.DecidedBy = claims[0].major, claims[0].minor, claims[0].source
			return p, checkMajor(p)
		}
	}

	start := time.Now()
	major, minor, err := ask(ctx, path, pr)
	p.Asked = true
	p.AskTime = time.Since(start).Round(time.Millisecond).String()
	if err != nil {
		return p, err
	}
	p.Major, p.Minor = major, minor
	p.DecidedBy = fmt.Sprintf("the interpreter's own answer (%s)", p.AskTime)
	if len(claims) > 0 {
		var s []string
		for _, c := range claims {
			s = append(s, fmt.Sprintf("%s says %d.%d", c.source, c.major, c.minor))
		}
		p.DecidedBy += "; asked because " + strings.Join(s, ", ") + ", which disagree"
	}
	return p, checkMajor(p)
}

// Interpreter resolves name (INFERA_PYTHON) on pathList as exec will,
// relative to dir, the directory it will run in.
func Interpreter(name, pathList, dir string) (string, error) {
	path, err := lookpath.Command(name, pathList, dir)
	if err != nil {
		// %v: the lookup's 126/127 are the worker's codes, not the
		// interpreter's, which is configuration (78).
		const say = "python interpreter (INFERA_PYTHON): %v; install it or set INFERA_PYTHON to its path"
		full := fmt.Errorf(say, err)
		if b, ok := err.(logging.Briefer); ok && b.Brief() != "" { // the text line without every PATH directory
			return "", logging.WithBrief(full, fmt.Sprintf(say, b.Brief()))
		}
		return "", full
	}
	return path, nil
}

// Resolve is Interpreter for the pass: an absolute INFERA_PYTHON is
// first asked, through answers, whether its filesystem answers in time,
// since its links and pyvenv.cfg are read in this process.
func Resolve(name, pathList, dir string, answers func(paths ...string) error) (string, error) {
	if filepath.IsAbs(name) {
		if err := answers(name); err != nil {
			return "", fmt.Errorf("interpreter (INFERA_PYTHON) %w", err)
		}
	}
	return Interpreter(name, pathList, dir)
}

func checkMajor(p Python) error {
	if p.Major != 3 {
		return fmt.Errorf("python interpreter %s is Python %d.%d (%s); payload trees are built for CPython 3 only", p.Path, p.Major, p.Minor, p.DecidedBy)
	}
	return nil
}

func pathOf(env *environ.Env) string {
	if env == nil {
		return os.Getenv("PATH")
	}
	if v, ok := env.Get("PATH"); ok {
		return v
	}
	return lookpath.DefaultPath
}

// venvVersion reads the version a venv was created with (PEP 405: the
// pyvenv.cfg next to the executable or one directory up). The stdlib venv
// writes "version = 3.12.3"; virtualenv and uv write "version_info".
func venvVersion(exe string) (cfg string, major, minor int, ok bool) {
	for _, dir := range []string{filepath.Dir(exe), filepath.Dir(filepath.Dir(exe))} {
		cfg = filepath.Join(dir, "pyvenv.cfg")
		data, err := boundedread.File(cfg, boundedread.SmallText)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			k, v, found := strings.Cut(line, "=")
			if !found {
				continue
			}
			switch strings.TrimSpace(k) {
			case "version", "version_info":
				if m := pyVersionRE().FindStringSubmatch(strings.TrimSpace(v)); m != nil {
					return cfg, atoi(m[1]), atoi(m[2]), true
				}
			}
		}
		return "", 0, 0, false
	}
	return "", 0, 0, false
}

// askScript prints major.minor.micro and nothing else; -I -S keeps user
// site-packages, PYTHON* variables and site.py out of it, which also makes
// it start in a few milliseconds.
const askScript = "import sys; sys.stdout.write('%d.%d.%d' % sys.version_info[:3])"

func ask(ctx context.Context, path string, pr PythonProbe) (int, int, error) {
	// The deadline is the configuration's (INFERA_PYTHON_TIMEOUT); none
	// when the caller gives none.
	if pr.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pr.Timeout)
		defer cancel()
	}
	cmd := procgroup.Command(ctx, path, "-I", "-S", "-c", askScript)
	if pr.Env != nil {
		cmd.Env = pr.Env.Slice()
	}
	cmd.Dir = pr.Dir
	var out, errb procgroup.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := procgroup.Run(ctx, cmd)
	if ctx.Err() == context.DeadlineExceeded {
		return 0, 0, fmt.Errorf("python interpreter %s did not answer its version within %s (INFERA_PYTHON_TIMEOUT); set INFERA_PYTHON to a python3.X path so no run is needed", path, pr.Timeout)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return 0, 0, fmt.Errorf("python interpreter %s failed to report its version (%v): %s", path, err, excerpt(errb.String()))
		}
		return 0, 0, fmt.Errorf("python interpreter %s: %w", path, err)
	}
	m := askOutputRE().FindStringSubmatch(strings.TrimSpace(out.String()))
	if m == nil {
		return 0, 0, fmt.Errorf("python interpreter %s answered %s when asked its version, not MAJOR.MINOR.MICRO", path, excerpt(out.String()))
	}
	return atoi(m[1]), atoi(m[2]), nil
}

func excerpt(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return strconv.Quote(s)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
