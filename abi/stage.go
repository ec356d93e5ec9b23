package abi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/lookpath"
	"github.com/infera/infera-exec/report"
)

// Input is what the ABI step takes: the decided configuration, the
// container's environment as it started infera-exec, and the PATH the
// worker will get (the payload's bin/ first), on which the interpreter is
// resolved as the worker's command will be.
type Input struct {
	Config     config.Config
	Env        *environ.Env
	WorkerPath string
	// Answers says whether the filesystems of paths answer in time.
	Answers func(paths ...string) error
	Log     *slog.Logger
}

// Outcome is the ABI step's decision: the family, and the interpreter
// resolved once for every later step that runs Python.
type Outcome struct {
	Family
	// Interpreter is INFERA_PYTHON resolved on the worker's PATH; ""
	// when it cannot run (InterpreterErr says why). Only the steps that
	// need Python refuse over it.
	Interpreter    string `json:"-"`
	InterpreterErr error  `json:"-"`

	decided bool // the family is known
}

// Error is a family that cannot be decided: exit code 78.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ExitCode is EX_CONFIG.
func (e *Error) ExitCode() int { return 78 }

// Run resolves the interpreter and decides the container's ABI family.
// On error the outcome holds what was found so far, for the report.
func Run(ctx context.Context, in Input) (*Outcome, error) {
	cfg := in.Config
	o := &Outcome{}
	// Everything below and the chdir before the exec would block on a
	// working directory that does not answer: nothing to start.
	if err := in.Answers(cfg.Chdir); err != nil {
		return o, &Error{fmt.Errorf("INFERA_EXEC_CHDIR %w", err)}
	}
	// Command resolution (the interpreter's here, the worker's later)
	// stats every PATH directory; so do the ROCm roots' listings.
	if err := in.Answers(lookpath.AbsDirs(in.WorkerPath)...); err != nil {
		return o, &Error{fmt.Errorf("a PATH directory %w", err)}
	}
	if err := in.Answers(cfg.ROCmRoots...); err != nil {
		return o, &Error{fmt.Errorf("a ROCm root (ROCM_PATH, %s) %w", config.DefaultROCmRoot, err)}
	}
	o.Interpreter, o.InterpreterErr = Resolve(cfg.Python, in.WorkerPath, cfg.WorkDir(), in.Answers)
	if cfg.ABIFamily != nil {
		o.Family = FromConfig(*cfg.ABIFamily)
		if err := checkOverride(ctx, in, o); err != nil {
			return o, err
		}
		o.decided = true
		return o, nil
	}
	if o.InterpreterErr != nil {
		return o, &Error{o.InterpreterErr}
	}
	var err error
	o.Family, err = detect(ctx, in, o.Interpreter)
	if err != nil {
		return o, &Error{err}
	}
	o.decided = true
	return o, nil
}

// detect reads ROCm's major from the HIP runtime and CPython's minor from
// the interpreter.
func detect(ctx context.Context, in Input, interpreter string) (Family, error) {
	var f Family
	rocm, err := DetectROCm(in.Config.ROCmRoots)
	f.ROCm = rocm
	if err != nil {
		return f, err
	}
	for _, n := range rocm.Notes {
		in.Log.Warn("ROCm: " + n)
	}
	py, err := DetectPython(ctx, PythonProbe{
		Interpreter: in.Config.Python,
		Path:        interpreter,
		Env:         in.Env,
		Dir:         in.Config.WorkDir(),
		Timeout:     in.Config.PythonTimeoutDuration(),
	})
	f.Python = py
	if err != nil {
		return f, err
	}
	rocmText := fmt.Sprintf("no ROCm (no libamdhip64 in %s)", strings.Join(rocm.Searched, ", "))
	if rocm.Found {
		rocmText = fmt.Sprintf("ROCm %d from %s", rocm.Major, rocm.DecidedBy)
	}
	in.Log.Info(fmt.Sprintf("ABI family %s: %s; CPython %s from %s", f.Name(), rocmText, py.Version(), py.DecidedBy),
		"event", "abi", "family", f.Name())
	return f, nil
}

// Fields and WriteText render the outcome in the report and --explain.
func (o *Outcome) Fields() []report.Field {
	if !o.decided {
		return []report.Field{{Key: "abi", Value: &o.Family}}
	}
	return []report.Field{{Key: "family", Value: o.Name()}, {Key: "abi", Value: &o.Family}}
}

func (o *Outcome) WriteText(w io.Writer) {
	a := o.Family
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("ABI family: %s", a.Name())
	if a.Override != "" {
		p("  set by INFERA_ABI_FAMILY=%s (detection skipped)", a.Override)
		return
	}
	if a.ROCm.Found {
		p("  ROCm %d      %s", a.ROCm.Major, a.ROCm.DecidedBy)
		if len(a.ROCm.Chain) > 1 {
			p("               chain %s", strings.Join(a.ROCm.Chain, " -> "))
		}
	} else {
		p("  ROCm         none (no libamdhip64 in %s)", strings.Join(a.ROCm.Searched, ", "))
	}
	for _, n := range a.ROCm.Notes {
		p("               note: %s", n)
	}
	p("  CPython %-4s %s", a.Python.Version(), a.Python.DecidedBy)
	if a.Python.Path != "" {
		p("               interpreter %s", strings.Join(a.Python.Chain, " -> "))
	}
}

// checkOverride holds INFERA_ABI_FAMILY to what the container says, so
// that a forced family is never a silent workaround: always a warning
// naming both, and a refusal when the Python tree it picks cannot be the
// interpreter's (a py39 tree's packages do not import under CPython
// 3.11). A ROCm major other than the HIP runtime's is a warning only: a
// native tree of another ROCm may be what is being debugged.
func checkOverride(ctx context.Context, in Input, o *Outcome) error {
	set := o.Name()
	var seen Family
	rocm, rerr := DetectROCm(in.Config.ROCmRoots)
	seen.ROCm = rocm
	perr := o.InterpreterErr
	if perr == nil {
		seen.Python, perr = DetectPython(ctx, PythonProbe{Interpreter: in.Config.Python, Path: o.Interpreter, Env: in.Env,
			Dir: in.Config.WorkDir(), Timeout: in.Config.PythonTimeoutDuration()})
	}
	if perr != nil {
		msg, _ := logging.ErrorRecord(perr)
		in.Log.Warn(fmt.Sprintf("INFERA_ABI_FAMILY=%s (for debugging only), not checked: %s", o.Override, msg), "event", "abi-override",
			"detail", fmt.Sprintf("not checked against the interpreter: %v", perr))
		return nil
	}
	o.Python.Interpreter, o.Python.Path, o.Python.Chain = seen.Python.Interpreter, seen.Python.Path, seen.Python.Chain
	if rerr == nil {
		o.Detected = seen.Name()
	}
	if seen.Python.Major != o.Python.Major || seen.Python.Minor != o.Python.Minor {
		return &Error{logging.WithBrief(fmt.Errorf("INFERA_ABI_FAMILY=%s picks the %s tree, but the interpreter %s is CPython %s (%s): the packages of a %s tree do not import under it; unset INFERA_ABI_FAMILY to detect the family, or set it to %s",
			o.Override, o.Python.Tree(), seen.Python.Path, seen.Python.Version(), seen.Python.DecidedBy, o.Python.Tree(), overrideFor(o.Family, seen.Python)),
			fmt.Sprintf("INFERA_ABI_FAMILY=%s picks the %s tree, but the interpreter %s is CPython %s; unset it, or set it to %s",
				o.Override, o.Python.Tree(), seen.Python.Path, seen.Python.Version(), overrideFor(o.Family, seen.Python)))}
	}
	// The text line says what the container is and what that means; the
	// record's detail how it was decided.
	detected, short := "the container's ROCm is not known: "+fmt.Sprint(rerr), "the container's ROCm is not known"
	if rerr == nil {
		detected = "the container is " + seen.Name()
		short = detected
		switch {
		case rocm.Found && (!o.ROCm.Found || rocm.Major != o.ROCm.Major):
			detected += fmt.Sprintf(" (ROCm %d from %s): a native tree built for another ROCm may not load", rocm.Major, rocm.DecidedBy)
			short += ": a native tree built for another ROCm may not load"
		case !rocm.Found && o.ROCm.Found:
			detected += fmt.Sprintf(" (no libamdhip64 in %s): a native tree for ROCm %d needs its HIP runtime", strings.Join(rocm.Searched, ", "), o.ROCm.Major)
			short += fmt.Sprintf(" (no libamdhip64): a native tree for ROCm %d needs its HIP runtime", o.ROCm.Major)
		}
	}
	in.Log.Warn(fmt.Sprintf("ABI family %s set by INFERA_ABI_FAMILY; %s; for debugging only", set, short), "event", "abi-override", "detail", detected)
	return nil
}

// overrideFor is the INFERA_ABI_FAMILY value that keeps f's ROCm with
// the interpreter's CPython.
func overrideFor(f Family, py Python) string {
	f.Python = py
	return f.Name()
}
