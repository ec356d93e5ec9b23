package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/cli"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/environ"
	"github.com/infera/infera-exec/fsprobe"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/lookup"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/report"
)

// refusal ends the pass without exec.
type refusal struct {
	code int
	err  error
}

func (r *refusal) Error() string { return r.err.Error() }

func refuse(code int, err error) error { return &refusal{code, err} }

// pass is one run: each step reads what earlier steps decided and adds its
// own decision to the report; none reaches back.
type pass struct {
	opt            cli.Options
	stdout, stderr io.Writer
	log            *slog.Logger
	rec            *logging.Recorder
	rep            *report.Report
	dry            bool
	started        time.Time

	env0  *environ.Env // as the container started us
	env   *environ.Env // what the worker gets
	cwd   string       // where we were started
	cfg   config.Config
	fam   abi.Family
	ionic *libionic.Result // what the host-provider step decided
	sel   *overlay.Selection
	probe *fsprobe.Prober // touches filesystems that may not answer with the deadline
}

func newPass(o cli.Options, env []string, stdout, stderr io.Writer) *pass {
	p := &pass{opt: o, stdout: stdout, stderr: stderr, dry: o.Explain, started: time.Now()}
	p.env0 = environ.New(env)
	p.env = p.env0.Clone()
	p.rec = &logging.Recorder{}
	jsonLog := strings.EqualFold(p.env0.Value("INFERA_EXEC_LOG"), "json")
	logTo := stderr
	if p.dry && !o.Verbose {
		// The plan lists every warning; the log lines would say it twice.
		logTo = io.Discard
	}
	p.log = logging.New(logTo, jsonLog, o.Verbose, p.rec)
	mode := "exec"
	if p.dry {
		mode = "explain"
	}
	p.rep = &report.Report{
		Schema:  report.Schema,
		Tool:    report.Tool{Version: version, Commit: commit, Go: runtime.Version()},
		Mode:    mode,
		Started: p.started.UTC(),
		PID:     os.Getpid(),
		UID:     os.Getuid(),
		GID:     os.Getgid(),
		Args:    append([]string{"infera-exec"}, os.Args[1:]...),
	}
	return p
}

// step runs fn and records how long it took.
func (p *pass) step(name string, fn func() error) error {
	t := time.Now()
	err := fn()
	p.rep.Timings = append(p.rep.Timings, report.Timing{Step: name, Micros: time.Since(t).Microseconds()})
	return err
}

func (p *pass) run() int {
	ctx := context.Background()
	err := p.prepare(ctx)
	var ref *refusal
	switch {
	case err == nil:
	case errors.As(err, &ref):
		return p.finish(ref.code, "refused", ref.err)
	default:
		return p.finish(exitSoftware, "refused", fmt.Errorf("internal error: %w", err))
	}
	if p.dry {
		if len(p.opt.Command) == 0 {
			return p.finish(exitUsage, "refused", errors.New("no command given"))
		}
		return p.finish(exitOK, "would-start", nil)
	}
	return p.exec()
}

// prepare is the pass up to, not including, the exec.
func (p *pass) prepare(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"config", p.loadConfig},
		{"abi", p.detectABI},
		{"payload", p.selectTrees},
		{"capabilities", p.checkCapabilities},
		{"environment", p.composeEnv},
		{"command", p.resolveCommand},
		{"libionic", p.hostLibionic},
		{"preflight", p.preflight},
		{"patches", p.enginePatches},
		{"limits", p.limits},
	}
	for _, s := range steps {
		if err := p.step(s.name, func() error { return s.fn(ctx) }); err != nil {
			return err
		}
	}
	return nil
}

func (p *pass) loadConfig(context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	if p.cwd, err = os.Getwd(); err != nil {
		p.cwd = "/"
	}
	cfg, warns, err := config.Load(p.env0, exe, p.cwd)
	for _, w := range warns {
		p.log.Warn(w)
	}
	p.cfg = cfg
	p.probe = fsprobe.New(cfg.PreflightTimeoutDuration())
	p.rep.Config = &p.cfg
	if err != nil {
		return refuse(exitConfig, err)
	}
	return nil
}

func (p *pass) detectABI(ctx context.Context) error {
	if f := p.cfg.ABIFamily; f != nil {
		p.fam = *f
		p.rep.ABI, p.rep.Family = &p.fam, p.fam.Name()
		p.log.Warn(fmt.Sprintf("ABI family %s set by INFERA_ABI_FAMILY; detection skipped (for debugging only)", p.fam.Name()))
		return nil
	}
	rocm, err := abi.DetectROCm(p.cfg.ROCmRoots)
	p.fam.ROCm = rocm
	p.rep.ABI = &p.fam
	if err != nil {
		return refuse(exitConfig, err)
	}
	for _, n := range rocm.Notes {
		p.log.Warn("ROCm: " + n)
	}
	if filepath.IsAbs(p.cfg.Python) {
		// Its links and pyvenv.cfg are read in this process.
		if _, err := p.probe.Answers(p.cfg.Python); err != nil {
			return refuse(exitConfig, fmt.Errorf("interpreter (INFERA_PYTHON) %w", err))
		}
	}
	py, err := abi.DetectPython(ctx, abi.PythonProbe{
		Interpreter: p.cfg.Python,
		Env:         p.env0,
		Dir:         p.probeDir(),
		Timeout:     p.cfg.PythonTimeoutDuration(),
	})
	p.fam.Python = py
	if err != nil {
		return refuse(exitConfig, err)
	}
	p.rep.Family = p.fam.Name()
	rocmText := fmt.Sprintf("no ROCm (no libamdhip64 in %s)", strings.Join(rocm.Searched, ", "))
	if rocm.Found {
		rocmText = fmt.Sprintf("ROCm %d from %s", rocm.Major, rocm.DecidedBy)
	}
	p.log.Info(fmt.Sprintf("ABI family %s: %s; CPython %s from %s", p.fam.Name(), rocmText, py.Version(), py.DecidedBy),
		"family", p.fam.Name())
	return nil
}

// probeDir is where a Python probe runs: the worker's working directory
// when it exists (pyenv and the import system both look at the cwd).
func (p *pass) probeDir() string {
	if _, err := p.probe.Answers(p.cfg.Chdir); err != nil {
		return p.cwd // resolveCommand refuses it
	}
	if fi, err := os.Stat(p.cfg.Chdir); err == nil && fi.IsDir() {
		return p.cfg.Chdir
	}
	return p.cwd
}

func (p *pass) selectTrees(context.Context) error {
	if _, err := p.probe.Answers(p.cfg.PayloadRoot); err != nil {
		return refuse(exitConfig, fmt.Errorf("payload root %w (payload root from %s)", err, p.cfg.PayloadRootFrom))
	}
	pl, err := overlay.Open(p.cfg.PayloadRoot)
	if err != nil {
		return refuse(exitConfig, fmt.Errorf("%w (payload root from %s)", err, p.cfg.PayloadRootFrom))
	}
	p.rep.Payload = pl
	sel, err := pl.Select(p.fam)
	if err != nil {
		return refuse(exitConfig, err)
	}
	p.sel = sel
	p.rep.Trees = sel
	p.log.Info("python tree " + sel.PyTree)
	if sel.Native != nil {
		p.log.Info(fmt.Sprintf("native tree %s (capabilities: %s)", sel.Native.Dir, sel.Native.Caps))
	} else if !p.fam.ROCm.Found {
		p.log.Info("no native tree: " + sel.NoNativeWhy)
	}
	for _, w := range sel.Warnings {
		p.log.Warn(w)
	}
	return nil
}

func (p *pass) checkCapabilities(context.Context) error {
	c := &report.Capabilities{Requirement: p.cfg.RequireNative, Provided: capability.Set{}}
	tree := p.sel.NativeCapTree()
	if tree != nil {
		c.Tree, c.Provided, c.Evidence = tree.Name, tree.Caps, p.sel.Native.Evidence
	}
	p.rep.Capabilities = c
	c.Implied = capability.Implied(p.opt.Command)
	req := p.cfg.RequireNative.With(c.Implied)
	c.Requirement = req
	required, err := capability.Check(req, tree, p.sel.NoNativeWhy, p.sel.AllNative)
	if err != nil {
		return refuse(exitUnavailable, err)
	}
	c.Required = required
	if !req.None() {
		p.log.Info(fmt.Sprintf("required capabilities present: %s (INFERA_REQUIRE_NATIVE=%s)", required, req.Raw))
	}
	// What the arguments imply but nobody required: the worker may still
	// serve (a test without PD), so a warning that says how to refuse.
	for _, i := range c.Implied {
		if req.Auto || (tree != nil && tree.Caps.Has(i.Capability)) {
			continue
		}
		where := "there is no native tree (" + p.sel.NoNativeWhy + ")"
		if tree != nil {
			where = fmt.Sprintf("native tree %s does not provide it (it provides: %s)", tree.Name, tree.Caps)
		}
		p.log.Warn(fmt.Sprintf("the worker's arguments imply %s (%s) but %s; set INFERA_REQUIRE_NATIVE=auto to refuse to start instead", i.Capability, i.Source, where))
	}
	return nil
}

func (p *pass) composeEnv(context.Context) error {
	if _, ok := p.env.Get("PATH"); !ok {
		p.env.Set("PATH", lookup.DefaultPath)
	}
	p.env.PrependPaths("PATH", p.sel.Path...)
	p.env.PrependPaths("PYTHONPATH", p.sel.PythonPath...)
	p.env.PrependPaths("LD_LIBRARY_PATH", p.sel.LibraryPath...)
	p.env.Set("INFERA_ENGINE_READY_TIMEOUT", strconv.Itoa(p.cfg.ReadyTimeout))
	var parts []string
	for _, v := range []struct {
		name string
		dirs []string
	}{{"PYTHONPATH", p.sel.PythonPath}, {"LD_LIBRARY_PATH", p.sel.LibraryPath}, {"PATH", p.sel.Path}} {
		if len(v.dirs) > 0 {
			parts = append(parts, v.name+" += "+strings.Join(v.dirs, ":"))
		}
	}
	p.log.Info("environment: " + strings.Join(parts, "; "))
	p.log.Info(fmt.Sprintf("engine ready timeout %ds (%s)", p.cfg.ReadyTimeout, p.cfg.ReadyTimeoutFrom))
	return nil
}

// resolveCommand finds the worker on the new PATH, relative to the
// directory it will run in. It runs before anything touches the disk, so
// a typo in the command changes nothing.
func (p *pass) resolveCommand(context.Context) error {
	p.rep.Exec = &report.Exec{Command: p.opt.Command, Cwd: p.cfg.Chdir}
	// The chdir before the exec would block on it: nothing to start.
	if _, err := p.probe.Answers(p.cfg.Chdir); err != nil {
		return refuse(exitConfig, fmt.Errorf("INFERA_EXEC_CHDIR %w", err))
	}
	if err := launch.CheckDir(p.cfg.Chdir); err != nil {
		return refuse(exitConfig, err)
	}
	if len(p.opt.Command) == 0 {
		return nil
	}
	path, err := lookup.Command(p.opt.Command[0], p.env.Value("PATH"), p.cfg.Chdir)
	if err != nil {
		var le *lookup.Error
		if errors.As(err, &le) {
			return refuse(le.Code, err)
		}
		return refuse(exitNotExec, err)
	}
	p.rep.Exec.Path = path
	p.rep.Exec.Argv = p.opt.Command
	return nil
}

func (p *pass) limits(context.Context) error {
	n, err := launch.RaiseNofile(p.dry)
	p.rep.Exec.Nofile = n
	if err != nil {
		p.log.Warn(fmt.Sprintf("open-file limit left at %d: %v", n.Soft, err))
		return nil
	}
	if !p.dry {
		p.log.Info(fmt.Sprintf("open files: soft limit %d (= hard)", n.Hard))
	}
	return nil
}

// exec is the irreversible end: chdir, report, execve.
func (p *pass) exec() int {
	e := p.rep.Exec
	e.Env = p.env.Slice()
	p.rep.EnvChanges = environ.Diff(p.env0, p.env)
	if err := os.Chdir(e.Cwd); err != nil {
		return p.finish(exitConfig, "refused", fmt.Errorf("chdir %s (INFERA_EXEC_CHDIR): %w", e.Cwd, err))
	}
	p.log.Info(fmt.Sprintf("exec %s (%s) in %s", report.QuoteArgs(e.Argv), e.Path, e.Cwd), "path", e.Path)
	p.rep.Outcome = report.Outcome{Result: "exec"}
	p.writeReport()
	code, err := launch.Exec(e.Path, e.Argv, e.Env)
	return p.finish(code, "exec-failed", err)
}

// finish ends a run that does not exec: it logs the reason, records the
// outcome and either prints the plan (explain) or writes the report.
func (p *pass) finish(code int, result string, err error) int {
	if p.rep.Exec != nil && p.rep.Exec.Env == nil && p.env != nil {
		p.rep.Exec.Env = p.env.Slice()
	}
	if p.env != nil && p.rep.EnvChanges == nil {
		p.rep.EnvChanges = environ.Diff(p.env0, p.env)
	}
	p.rep.Outcome = report.Outcome{Result: result, Code: code}
	if err != nil {
		p.rep.Outcome.Reason = err.Error()
		if !p.dry {
			p.log.Error(err.Error(), "exit", code)
		}
	}
	if p.dry {
		p.rep.Log = p.rec.Entries()
		if p.opt.JSON {
			b, merr := report.Marshal(p.rep)
			if merr != nil {
				fmt.Fprintf(p.stderr, "infera-exec: encode plan: %v\n", merr)
				return exitSoftware
			}
			p.stdout.Write(b)
		} else {
			report.WriteText(p.stdout, p.rep)
		}
		return code
	}
	p.writeReport()
	return code
}

func (p *pass) writeReport() {
	if p.cfg.ReportOff {
		return
	}
	p.rep.Log = p.rec.Entries()
	p.rep.Resources = report.ReadResources()
	where, err := report.Write(p.rep, p.cfg.ReportPath)
	if err != nil {
		p.log.Warn(fmt.Sprintf("report not written: %v", err))
		return
	}
	p.log.Debug("report written to " + where)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
