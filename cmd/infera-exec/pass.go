package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/cli"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/statedir"
	"github.com/infera/infera-exec/internal/workerargs"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/preflight"
	"github.com/infera/infera-exec/report"
)

// pass is one run: each step reads what earlier steps decided, applies
// the environment edits its package returns, and records its outcome in
// the report; none reaches back.
type pass struct {
	opt            cli.Options
	stdout, stderr io.Writer
	log            *slog.Logger
	rec            *logging.Recorder
	rep            *report.Report
	dry            bool

	env0        *environ.Env // as the container started us
	env         *environ.Env // what the worker gets
	cfg         config.Config
	cfgErr      error
	python      string // the interpreter, resolved once for every step
	pythonErr   error
	fam         abi.Family
	sel         *overlay.Selection
	ionic       *libionic.Outcome
	args        workerargs.Args // the worker command, read once for every step
	probe       *fsprobe.Prober // touches filesystems that may not answer, with the deadline
	state       string          // see stateDir
	statePicked bool
	early       *patches.Early // the engine probe, started once the worker's environment is composed
	// restoreGC puts the collector back as the process started (see
	// collectLater), before infera-exec stays on as the worker's init.
	restoreGC func()
}

func newPass(o cli.Options, env *environ.Env, cfg config.Config, warns []string, cfgErr error, stdout, stderr io.Writer) *pass {
	p := &pass{opt: o, stdout: stdout, stderr: stderr, dry: o.Explain, env0: env, env: env.Clone(), cfg: cfg, cfgErr: cfgErr,
		args: workerargs.Parse(o.Command), probe: fsprobe.New(cfg.PreflightTimeoutDuration())}
	p.rec = &logging.Recorder{}
	logTo := stderr
	if p.dry && !o.Verbose {
		// The plan lists every warning; the log lines would say it twice.
		logTo = io.Discard
	}
	p.log = logging.New(logTo, cfg.LogJSON, o.Verbose, p.rec)
	for _, w := range warns {
		p.log.Warn(w)
	}
	p.rep = report.New(report.Tool{Version: version, Commit: commit, Go: runtime.Version()}, p.dry, &p.cfg)
	return p
}

func (p *pass) run() int {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"config", func(context.Context) error { return p.cfgErr }},
		{"interpreter", p.interpreter},
		{"abi", p.detectABI},
		{"payload", p.selectTrees},
		{"capabilities", p.checkCapabilities},
		{"environment", p.composeEnv},
		{"command", p.resolveCommand},
		{"probe", p.startProbe},
		{"libionic", p.hostLibionic},
		{"preflight", p.preflight},
		{"patches", p.enginePatches},
		{"limits", p.limits},
	}
	ctx := context.Background()
	for _, s := range steps {
		t := time.Now()
		err := s.fn(ctx)
		p.rep.Timings = append(p.rep.Timings, report.Timing{Step: s.name, Micros: time.Since(t).Microseconds()})
		if err != nil {
			return p.finish(exitCode(err), "refused", err)
		}
	}
	if p.dry {
		if len(p.opt.Command) == 0 {
			return p.finish(exitUsage, "refused", errors.New("no command given"))
		}
		return p.finish(exitOK, "would-start", nil)
	}
	return p.exec()
}

// interpreter resolves INFERA_PYTHON once, on the PATH the worker gets
// (the payload's bin/ first) and relative to its working directory; the
// ABI step and the engine probe both use this answer. A failure here only
// matters to the steps that need Python, which say so.
func (p *pass) interpreter(context.Context) error {
	// Everything below and the chdir before the exec would block on a
	// working directory that does not answer: nothing to start.
	if err := p.probe.AllAnswer(p.cfg.Chdir); err != nil {
		return fmt.Errorf("INFERA_EXEC_CHDIR %w", err)
	}
	workerPath := p.env0.Clone()
	workerPath.Apply(environ.SetDefault("PATH", launch.DefaultPath), environ.Prepend("PATH", overlay.BinDir(p.cfg.PayloadRoot)))
	// Command resolution (the interpreter's here, the worker's later)
	// stats every PATH directory; so do the ROCm roots' listings.
	if err := p.probe.AllAnswer(launch.AbsDirs(workerPath.Value("PATH"))...); err != nil {
		return fmt.Errorf("a PATH directory %w", err)
	}
	if err := p.probe.AllAnswer(p.cfg.ROCmRoots...); err != nil {
		return fmt.Errorf("a ROCm root (ROCM_PATH, /opt/rocm) %w", err)
	}
	p.python, p.pythonErr = abi.Resolve(p.cfg.Python, workerPath.Value("PATH"), p.cfg.WorkDir(), p.probe.AllAnswer)
	return nil
}

func (p *pass) detectABI(ctx context.Context) error {
	if p.pythonErr != nil && p.cfg.ABIFamily == nil {
		return p.pythonErr
	}
	var err error
	p.fam, err = abi.Detect(ctx, abi.Input{
		Override: p.cfg.ABIFamily, ROCmRoots: p.cfg.ROCmRoots,
		Python: p.cfg.Python, PythonPath: p.python, Env: p.env0,
		Dir: p.cfg.WorkDir(), Timeout: p.cfg.PythonTimeoutDuration(), Log: p.log,
	})
	p.rep.ABI = &p.fam
	if err == nil {
		p.rep.Family = p.fam.Name()
	}
	return err
}

func (p *pass) selectTrees(context.Context) error {
	if err := p.probe.AllAnswer(p.cfg.PayloadRoot); err != nil {
		return fmt.Errorf("payload root %w (payload root from %s)", err, p.cfg.PayloadRootFrom)
	}
	img := overlay.ImageAt("/", p.env0.Value("LD_LIBRARY_PATH"))
	img.CacheDir = p.stateDir()
	pl, sel, err := overlay.Choose(p.cfg.PayloadRoot, p.cfg.PayloadRootFrom, p.fam, img, p.log)
	p.rep.Payload, p.rep.Trees, p.sel = pl, sel, sel
	return err
}

func (p *pass) checkCapabilities(context.Context) error {
	in := capability.Input{Requirement: p.cfg.RequireNative, Args: p.args, Env: p.env0,
		Tree: p.sel.NativeCapTree(), NoTreeWhy: p.sel.NoNativeWhy, Available: p.sel.AllNative, Log: p.log}
	if p.sel.Native != nil {
		in.Evidence = p.sel.Native.Evidence
	}
	out, err := capability.Decide(in)
	p.rep.Capabilities = out
	return err
}

func (p *pass) composeEnv(context.Context) error {
	p.env.Apply(p.sel.Env()...)
	p.env.Apply(environ.Set("INFERA_ENGINE_READY_TIMEOUT", strconv.Itoa(p.cfg.ReadyTimeout)))
	p.log.Info(p.sel.EnvSummary())
	p.log.Info(fmt.Sprintf("engine ready timeout %ds (%s)", p.cfg.ReadyTimeout, p.cfg.ReadyTimeoutFrom))
	return nil
}

// resolveCommand finds the worker on the new PATH, relative to the
// directory it will run in. It runs before anything touches the disk, so
// a typo in the command changes nothing.
func (p *pass) resolveCommand(context.Context) error {
	p.rep.Exec = &report.Exec{Command: p.opt.Command, Cwd: p.cfg.Chdir}
	switch {
	case p.opt.InitGroup || p.cfg.InitGroup:
		p.rep.Exec.Init = "init-group"
	case p.opt.Init || p.cfg.Init:
		p.rep.Exec.Init = "init"
	}
	if err := launch.CheckDir(p.cfg.Chdir); err != nil {
		return err
	}
	if len(p.opt.Command) == 0 {
		return nil
	}
	path, err := launch.Command(p.opt.Command[0], p.env.Value("PATH"), p.cfg.Chdir)
	if err != nil {
		return launch.HintRelative(err, p.opt.Command[0], p.cfg.Chdir, p.cfg.StartDir)
	}
	p.rep.Exec.Path, p.rep.Exec.Argv = path, p.opt.Command
	return nil
}

func (p *pass) hostLibionic(ctx context.Context) error {
	out, edits := libionic.Run(ctx, libionic.Options{
		Host: p.cfg.HostLibionic, Name: p.cfg.RDMAProvider, Root: "/", Sysfs: p.cfg.Sysfs, Answers: p.probe.AllAnswer,
		FallbackDirs: statedir.ProviderDirs(p.cfg.StateDir),
		DryRun:       p.dry, Explicit: p.cfg.HostLibionicSet,
	}, p.log)
	p.ionic, p.rep.Libionic = out, out
	p.env.Apply(edits...)
	return nil
}

// preflight runs the checks on the composed environment; INFERA_PREFLIGHT
// off skips the step.
func (p *pass) preflight(context.Context) error {
	if p.cfg.PreflightOff {
		p.rep.Preflight = &preflight.Outcome{State: "off", Summary: "INFERA_PREFLIGHT=off"}
		p.log.Info("preflight checks off (INFERA_PREFLIGHT=off)")
		return nil
	}
	in := preflight.NewInput(p.cfg, p.args, p.env, p.ionic.RDMA, libionic.ProviderABI(p.ionic, "/", p.cfg.RDMAProvider), p.probe)
	out, edits, err := preflight.Evaluate(in, p.cfg.PreflightSkip)
	p.rep.Preflight = out
	out.Log(p.log)
	p.env.Apply(edits...)
	return err
}

// startProbe starts the engine probe of the patch step now, beside the
// steps in between; the patch step takes its answer only if nothing that
// decides it changed meanwhile.
func (p *pass) startProbe(ctx context.Context) error {
	p.early = patches.StartEarly(ctx, p.patchInput())
	return nil
}

func (p *pass) enginePatches(ctx context.Context) error {
	in := p.patchInput()
	in.Early = p.early
	out, err := patches.Run(ctx, in)
	p.early.Stop()
	p.rep.Patches = out
	return err
}

func (p *pass) patchInput() patches.Input {
	return patches.Input{
		PayloadRoot: p.cfg.PayloadRoot, Skip: p.cfg.SkipEnginePatches, Require: p.cfg.RequirePatches,
		Python: p.python, PythonErr: p.pythonErr, Env: p.env, Dir: p.cfg.Chdir,
		ProbeTimeout: p.cfg.PatchProbeTimeout(), StateDir: p.stateDir(), DryRun: p.dry, Log: p.log,
	}
}

// stateDir is where this run keeps its caches, picked once: "" for
// --explain (it writes nothing and reads no stale cache) and when no
// candidate is safe (then the steps do their full checks).
func (p *pass) stateDir() string {
	if p.dry || p.statePicked {
		return p.state
	}
	p.state, p.statePicked = statedir.PickLogged(p.cfg.StateDir, p.log), true
	return p.state
}

func (p *pass) limits(context.Context) error {
	n, err := launch.RaiseNofile(p.dry)
	p.rep.Exec.Nofile = n
	if err != nil {
		p.log.Warn(fmt.Sprintf("open-file limit left at %d: %v", n.Soft, err))
	} else if !p.dry {
		p.log.Info(fmt.Sprintf("open files: soft limit %d (= hard)", n.Hard))
	}
	return nil
}

// exec is the irreversible end: chdir, report, execve.
func (p *pass) exec() int {
	p.early.Stop()
	e := p.rep.Exec
	e.Env = p.env.Slice()
	p.rep.EnvChanges = environ.Diff(p.env0, p.env)
	if err := os.Chdir(e.Cwd); err != nil {
		return p.finish(exitConfig, "refused", fmt.Errorf("chdir %s (INFERA_EXEC_CHDIR): %w", e.Cwd, err))
	}
	if e.Init != "" {
		return p.init()
	}
	p.log.Info(fmt.Sprintf("exec %s (%s) in %s", report.QuoteArgs(report.RedactArgs(e.Argv)), e.Path, e.Cwd), "path", e.Path)
	p.rep.Outcome = report.Outcome{Result: "exec"}
	p.writeReport()
	code, err := launch.Exec(e.Path, e.Argv, e.Env)
	return p.finish(code, "exec-failed", err)
}

// init starts the worker as a child and stays its init until it ends
// (--init, INFERA_EXEC_INIT): the report says so before the start, since
// nothing is written after it.
func (p *pass) init() int {
	e := p.rep.Exec
	p.log.Info(fmt.Sprintf("init: starting %s (%s) in %s; infera-exec stays as its %s, forwarding signals and reaping zombies",
		report.QuoteArgs(report.RedactArgs(e.Argv)), e.Path, e.Cwd, launch.InitRole()), "path", e.Path)
	p.rep.Outcome = report.Outcome{Result: "init"}
	p.writeReport()
	if p.restoreGC != nil {
		p.restoreGC() // from here on a long-lived process
	}
	return launch.Become(launch.InitSpec{Path: e.Path, Argv: e.Argv, Env: e.Env, Dir: e.Cwd, Group: e.Init == "init-group"}, p.log)
}

// finish ends a run that does not exec: it logs the reason, records the
// outcome and either prints the plan (explain) or writes the report.
func (p *pass) finish(code int, result string, err error) int {
	p.early.Stop() // a refusal before the patch step: its interpreter is killed and reaped
	if p.rep.Exec != nil && p.rep.Exec.Env == nil {
		p.rep.Exec.Env = p.env.Slice()
	}
	if p.rep.EnvChanges == nil {
		p.rep.EnvChanges = environ.Diff(p.env0, p.env)
	}
	p.rep.Outcome = report.Outcome{Result: result, Code: code}
	if err != nil {
		p.rep.Outcome.Reason = err.Error()
		if !p.dry {
			p.log.Error(err.Error(), "exit", code)
		}
	}
	if !p.dry {
		p.writeReport()
		return code
	}
	p.rep.Log = p.rec.Entries()
	if err := report.Print(p.stdout, p.rep, p.opt.JSON, p.opt.Verbose); err != nil {
		fmt.Fprintf(p.stderr, "infera-exec: encode plan: %v\n", err)
		return exitSoftware
	}
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
		p.log.Warn("report not written: " + err.Error())
		return
	}
	p.log.Debug("report written to " + where)
}
