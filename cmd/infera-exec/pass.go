package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/interrupt"
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

// pass is one start: each step runs its stage with the configuration and
// earlier outcomes, applies the edits its outcome carries, and reports it.
type pass struct {
	opt            config.Options
	stdout, stderr io.Writer
	log            *slog.Logger
	rec            *logging.Recorder
	rep            *report.Report
	dry            bool

	env0    *environ.Env // as the container started us
	env     *environ.Env // what the worker gets
	cfg     config.Config
	cfgErr  error
	args    workerargs.Args // the worker command, read once for every step
	probe   *fsprobe.Prober // touches filesystems that may not answer, with the deadline
	state   string          // the state directory, picked once; "" for --explain or when none is safe (noState says why)
	noState string

	abi    *abi.Outcome
	trees  *overlay.Outcome
	caps   *capability.Outcome
	launch *launch.Outcome
	ionic  *libionic.Outcome
	early  *patches.Early // the engine probe, started once the worker's environment is composed

	restoreGC func() // the collector back as the process started, before the init stays on (collectLater)
}

func newPass(o config.Options, env *environ.Env, cfg config.Config, warns []string, cfgErr error, probe *fsprobe.Prober, stdout, stderr io.Writer) *pass {
	p := &pass{opt: o, stdout: stdout, stderr: stderr, dry: o.Explain, env0: env, env: env.Clone(), cfg: cfg, cfgErr: cfgErr,
		args: workerargs.Parse(o.Command), probe: probe, rec: &logging.Recorder{}}
	logTo := stderr
	if p.dry && !o.Verbose {
		logTo = io.Discard // the plan lists every warning; the log lines would say it twice
	}
	p.log = logging.WithStep(startLog(logTo, cfg, o.Verbose, p.rec), "config")
	if quietInit(cfg, o, stderr) {
		// The init shares the terminal with the worker: its start line,
		// warnings and errors only (--verbose: all of it).
		p.log = logging.WithStep(logging.NewQuiet(logTo, p.rec), "config")
	}
	p.probe.Log = p.log // --verbose says why a deadline helper runs
	for _, w := range warns {
		p.log.Warn(w)
	}
	p.rep = report.New(report.Tool{Version: version, Commit: commit, Go: runtime.Version()}, p.dry, &p.cfg)
	return p
}

// quietInit reports whether the start logs quietly: an init (--init) whose
// standard error is a terminal, text lines, not --verbose.
func quietInit(cfg config.Config, o config.Options, stderr io.Writer) bool {
	f, ok := stderr.(*os.File)
	if cfg.Init == config.InitOff || o.Verbose || o.Explain || cfg.LogJSON || !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// step is one stage: its outcome to report (nil: none) and its refusal.
type step struct {
	name string
	run  func(context.Context) (report.Section, error)
}

func (p *pass) steps() []step {
	return []step{
		{"config", func(context.Context) (report.Section, error) { return nil, p.cfgErr }},
		{"state", func(context.Context) (report.Section, error) {
			if !p.dry { // once, for every writer; --explain writes nothing and reads no stale cache
				p.state, p.noState = statedir.Choose(p.cfg.StateDir, p.log)
			}
			return nil, nil
		}},
		{"abi", p.detectABI},
		{"payload", p.selectTrees},
		{"capabilities", p.checkCapabilities},
		{"launch", p.planLaunch},
		{"probe", func(ctx context.Context) (report.Section, error) {
			// Beside the next steps; the patch step takes its answer only if nothing that decides it changed.
			p.early = patches.StartEarly(ctx, p.patchInput(nil))
			return nil, nil
		}},
		{"libionic", p.hostLibionic},
		{"preflight", p.preflight},
		{"patches", p.enginePatches},
	}
}

func (p *pass) run() int {
	ctx, stop := interrupt.Start(context.Background()) // TERM, INT, HUP: the step ends, nothing more is done
	defer stop.Stop()
	report.Prepare(&abi.Outcome{}, &overlay.Outcome{}, &capability.Outcome{}, &launch.Outcome{}, &libionic.Outcome{}, &preflight.Outcome{}, &patches.Outcome{}) // encoders built beside the steps
	base := p.log
	for _, s := range p.steps() {
		p.log = logging.WithStep(base, s.name) // every record says which step logged it
		t := time.Now()
		sec, err := s.run(ctx)
		p.rep.Timings = append(p.rep.Timings, report.Timing{Step: s.name, Micros: time.Since(t).Microseconds()})
		if sec != nil {
			p.rep.Add(sec)
		}
		if sig := stop.Signal(); sig != nil {
			return p.finish(interrupt.Code(sig), report.ResultInterrupted, fmt.Errorf("stopped by %v during the %s step; nothing more was done", sig, s.name))
		}
		if err != nil {
			return p.finish(exitCode(err), report.ResultRefused, err)
		}
	}
	if p.dry {
		if len(p.opt.Command) == 0 {
			return p.finish(exitUsage, report.ResultRefused, &config.UsageError{Msg: "no command given"})
		}
		return p.finish(exitOK, report.ResultWouldStart, nil)
	}
	stop.Stop()
	p.log = logging.WithStep(base, "exec")
	return p.exec()
}

func (p *pass) detectABI(ctx context.Context) (report.Section, error) {
	var err error
	p.abi, err = abi.Run(ctx, abi.Input{Config: p.cfg, Env: p.env0, WorkerPath: overlay.WorkerPath(p.env0, p.cfg.PayloadRoot),
		Answers: p.probe.AllAnswer, Log: p.log})
	return p.abi, err
}

func (p *pass) selectTrees(ctx context.Context) (report.Section, error) {
	var err error
	p.trees, err = overlay.Run(ctx, overlay.Input{Config: p.cfg, Family: p.abi.Family, Env: p.env0, StateDir: p.state,
		Answers: p.probe.AllAnswer, Log: p.log})
	p.env.Apply(p.trees.Edits...) // none when it refused
	return p.trees, err
}

func (p *pass) checkCapabilities(ctx context.Context) (report.Section, error) {
	var err error
	p.caps, err = capability.Run(ctx, capability.Input{Requirement: p.cfg.RequireNative, Args: p.args, Trees: p.trees, Env: p.env0, Log: p.log})
	return p.caps, err
}

// planLaunch decides the start before anything is written; its outcome is the report's last section.
func (p *pass) planLaunch(ctx context.Context) (report.Section, error) {
	var err error
	p.launch, err = launch.Run(ctx, launch.Input{Config: p.cfg, Command: p.opt.Command, Env: p.env, DryRun: p.dry, Log: p.log, Probe: p.probe})
	p.env.Apply(p.launch.Edits...)
	return nil, err
}

func (p *pass) hostLibionic(ctx context.Context) (report.Section, error) {
	var err error
	p.ionic, err = libionic.Run(ctx, libionic.Input{Config: p.cfg, StateDir: p.state, Root: "/", Answers: p.probe.AllAnswer, DryRun: p.dry, Log: p.log})
	p.env.Apply(p.ionic.Edits...)
	return p.ionic, err
}

func (p *pass) preflight(ctx context.Context) (report.Section, error) {
	out, err := preflight.Run(ctx, preflight.Input{Config: p.cfg, Args: p.args, Env: p.env, Given: p.env0, Libionic: p.ionic, Probe: p.probe, Log: p.log,
		Capabilities: p.caps, Engine: p.early.Engine})
	p.env.Apply(out.Edits...)
	return out, err
}

func (p *pass) enginePatches(ctx context.Context) (report.Section, error) {
	out, err := patches.Run(ctx, p.patchInput(p.early))
	p.early.Stop()
	p.env.Apply(out.Edits...) // the shadow trees the worker imports from
	return out, err
}

func (p *pass) patchInput(early *patches.Early) patches.Input {
	return patches.Input{Config: p.cfg, Python: p.abi.Interpreter, PythonErr: p.abi.InterpreterErr, PyMinor: p.abi.Python.Minor,
		Env: p.env, Worker: p.launch, StateDir: p.state, DryRun: p.dry, Log: p.log, Early: early, Answers: p.probe.AllAnswer}
}

// exec is the irreversible end: report, chdir, execve (or the init).
func (p *pass) exec() int {
	p.early.Stop()
	l := p.launch
	p.rep.Add(l)
	p.rep.EnvChanges = environ.Diff(p.env0, p.env)
	p.rep.Outcome = report.Outcome{Result: l.Announce(p.log)}
	p.writeReport()
	clearKubelet(p.cfg.TerminationLog, p.log)
	if l.Init != config.InitOff && p.restoreGC != nil {
		p.restoreGC() // from here on a long-lived process
	}
	code, err := l.Start(p.env.Slice(), p.log)
	if err != nil {
		return p.finish(code, report.ResultExecFailed, err)
	}
	if code != exitOK && l.Ended != "" { // the init's worker ended badly
		tellKubelet(p.cfg.TerminationLog, code, l.Ended, p.log)
	}
	return code
}

// finish ends a run that does not exec: the reason logged, the plan printed or the report written.
func (p *pass) finish(code int, result report.Result, err error) int {
	p.early.Stop()                               // a refusal before the patch step: its interpreter is killed and reaped
	if p.launch != nil && !p.rep.Has(p.launch) { // exec adds it before starting
		if p.dry && (p.opt.JSON || p.opt.Verbose) {
			p.launch.Env = p.env.Slice()
		}
		p.rep.Add(p.launch)
	}
	if p.rep.EnvChanges == nil {
		p.rep.EnvChanges = environ.Diff(p.env0, p.env)
	}
	p.rep.Outcome = report.Outcome{Result: result, Code: code}
	if err != nil {
		p.rep.Outcome.Reason = err.Error()
		if !p.dry {
			msg, detail := logging.ErrorRecord(err) // a short line; the whole reason in detail, the report and the termination log
			p.log.With(detail...).Error(msg, "event", "refused", "exit_code", code)
		}
	}
	if !p.dry {
		p.writeReport()
		if err != nil && code != exitOK {
			tellKubelet(p.cfg.TerminationLog, code, err.Error(), p.log)
		}
		return code
	}
	p.rep.Log = p.rec.Entries()
	if err := report.Print(p.stdout, p.rep, p.opt.JSON); err != nil {
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
	where, err := report.Write(p.rep, p.cfg.ReportPath, p.state, p.noState)
	if err != nil {
		msg, detail := logging.ErrorRecord(err)
		p.log.With(detail...).Warn("report not written: " + msg)
		return
	}
	p.log.Debug("report written to " + where)
}
