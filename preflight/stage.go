package preflight

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/rdma"
	"github.com/infera/infera-exec/internal/workerargs"
	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/report"
)

// Input is what the preflight step takes: the decided configuration, the
// worker command, the worker's composed environment (and the one the
// container started infera-exec with), the host-provider
// step's outcome (the RDMA devices and the provider build each will use),
// and the prober that touches filesystems that may not answer.
type Input struct {
	Config   config.Config
	Args     workerargs.Args
	Env      *environ.Env
	Given    *environ.Env // as the container started infera-exec; nil: Env (--doctor, which composes nothing)
	Libionic *libionic.Outcome
	Probe    *fsprobe.Prober
	Log      *slog.Logger
	// Capabilities is the capability step's outcome: what the native
	// tree for this container was granted (nil: not known, as in
	// --doctor). Engine locates the engine package as the patch step does
	// (nil: the rules that read the engine's files cannot tell).
	Capabilities *capability.Outcome
	Engine       Engine
}

// State is how the preflight step ended.
type State string

const (
	Off    State = "off"    // INFERA_PREFLIGHT=off
	Passed State = "passed" // no error-level check failed
	Failed State = "failed" // an error-level check failed: the start is refused
)

// Outcome is the preflight step's section of the report (and --doctor's
// JSON).
type Outcome struct {
	State       State       `json:"state"`
	Summary     string      `json:"summary"`
	Command     report.Argv `json:"command,omitempty"`
	AdvertiseIP string      `json:"advertise_ip,omitempty"` // chosen for INFERA_ADVERTISE_IP
	Checks      []Result    `json:"checks,omitempty"`
	Unknown     []string    `json:"unknown_skips,omitempty"`
	// Edits sets INFERA_ADVERTISE_IP when the environment does not.
	Edits []environ.Edit `json:"-"`

	advertiseWhy string // set when the address is exported, for the log
}

// Fields and WriteText render the outcome in the report and --explain.
func (o *Outcome) Fields() []report.Field { return []report.Field{{Key: "preflight", Value: o}} }

func (o *Outcome) WriteText(w io.Writer) {
	var lines []string
	for _, r := range o.Checks {
		lines = append(lines, fmt.Sprintf("%-7s %-13s %s", label(r), r.Name, r.Seen))
	}
	report.WriteHeading(w, "preflight", string(o.State), o.Summary, lines)
}

// Refusal is the start refused because an error-level check failed:
// exit code 78.
type Refusal struct{ Result Result }

func (e *Refusal) Error() string {
	r := e.Result
	return fmt.Sprintf("preflight %s: %s; %s %s (to start anyway: INFERA_PREFLIGHT_SKIP=%s)", r.Name, r.Seen, r.Why, r.Do, r.Name)
}

// Brief is the refusal's text line (logging.Briefer), Result.Line;
// Error (the record's detail, the termination log and the report) says
// why, the whole fix and how to start anyway.
func (e *Refusal) Brief() string { return e.Result.Line() }

// ExitCode is EX_CONFIG.
func (e *Refusal) ExitCode() int { return 78 }

// Run runs every check not skipped (INFERA_PREFLIGHT_SKIP), unless
// INFERA_PREFLIGHT is off, logs the findings, and decides
// INFERA_ADVERTISE_IP by the rule the advertise-ip check reports on: the
// edit sets it when the environment does not. The error is a *Refusal
// naming the first error-level failure.
func Run(ctx context.Context, in Input) (*Outcome, error) {
	if in.Config.PreflightOff {
		in.Log.Warn("preflight checks off (INFERA_PREFLIGHT=off): nothing about this node, the model or the worker's arguments was checked", "event", "preflight-off")
		return &Outcome{State: Off, Summary: "INFERA_PREFLIGHT=off"}, nil
	}
	f := newFacts(in)
	var err error
	if f.Rules, err = LoadRules(in.Config.PayloadRoot); err == nil {
		err = checkSkips(in.Config.PreflightSkip, f.Rules)
	}
	if err != nil {
		return &Outcome{State: Failed, Summary: err.Error(), Command: in.Args.Argv,
			Checks: []Result{{Name: "rules", Status: Fail, Severity: Error, Seen: err.Error(), Do: "Fix the rule file or the name."}}}, err
	}
	o, err := evaluate(f, in.Config.PreflightSkip)
	o.log(in.Log)
	return o, err
}

// Doctor runs the checks for --doctor, on the command that follows and
// this process's environment, whatever INFERA_PREFLIGHT says: no swap has
// run, so the container's own provider serves the RDMA devices, read when
// sysfs answers in time. Nothing is logged; the caller prints.
func Doctor(ctx context.Context, cfg config.Config, args workerargs.Args, env *environ.Env, probe *fsprobe.Prober, engine Engine) *Outcome {
	var inv *rdma.Inventory
	if probe.AllAnswer(cfg.Sysfs, rdma.DevDir) == nil {
		inv = rdma.Read(cfg.Sysfs, rdma.DevDir)
	}
	cfg.PreflightOff = false
	out, _ := Run(ctx, Input{Config: cfg, Args: args, Env: env, Libionic: libionic.ContainerProvider("/", cfg.RDMAProvider, inv),
		Probe: probe, Log: slog.New(slog.DiscardHandler), Engine: engine})
	return out
}

// envMap is e as a map, a name's last value winning.
func envMap(e *environ.Env) map[string]string {
	m := map[string]string{}
	for _, kv := range e.Slice() {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// newFacts is what the checks look at in a real run.
func newFacts(in Input) *Facts {
	cfg := in.Config
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	given := in.Given
	if given == nil {
		given = in.Env
	}
	f := &Facts{
		Args:         in.Args,
		Env:          envMap(in.Env),
		Given:        envMap(given),
		Sysfs:        cfg.Sysfs,
		ShmDir:       "/dev/shm",
		NofileHard:   lim.Max,
		ReadyTimeout: cfg.ReadyTimeout,
		ReadyDefault: !cfg.ReadyTimeoutSet,
		Chdir:        cfg.Chdir,
		HostLibionic: cfg.HostLibionic,
		ShmMin:       cfg.PreflightShmMin,
		NofileMin:    cfg.PreflightNofileMin,
		AllowTCP:     cfg.AllowTCPKV,
		Probe:        in.Probe,
		TimeoutError: cfg.PreflightTimeoutError,
		Engine:       in.Engine,
		CgroupRoot:   filepath.Join(cfg.Sysfs, "fs", "cgroup"),
	}
	if c := in.Capabilities; c != nil && c.Tree != "" {
		f.Capabilities, f.NativeKnown = c.Provided, true
	}
	if in.Libionic != nil {
		f.RDMA, f.ProviderABI = in.Libionic.RDMA, in.Libionic.ProviderABI
	}
	return f
}

// evaluate runs the checks and decides the advertise address.
func evaluate(in *Facts, skip []string) (*Outcome, error) {
	o := &Outcome{Command: in.Args.Argv}
	o.Checks, _ = runChecks(in, skip) // an unknown name was refused before (checkSkips)
	o.Checks = append(o.Checks, runRules(in, skip)...)
	if !slices.Contains(skip, "advertise-ip") {
		var why string
		o.AdvertiseIP, why = AdvertiseIP(in)
		if _, set := in.Env[AdvertiseVar]; !set && o.AdvertiseIP != "" {
			o.Edits = append(o.Edits, environ.Set(AdvertiseVar, o.AdvertiseIP))
			o.advertiseWhy = why
		}
	}
	var failed []Result
	counts := map[string]int{}
	for _, r := range o.Checks {
		counts[label(r)]++
		if r.Failed(Error) {
			failed = append(failed, r)
		}
	}
	o.State = Passed
	o.Summary = fmt.Sprintf("%d passed, %d errors, %d warnings, %d skipped", counts["ok"], counts["ERROR"], counts["WARN"], counts["skip"])
	if len(failed) == 0 {
		return o, nil
	}
	o.State = Failed
	return o, &Refusal{failed[0]}
}

// UnknownSkips are the warnings about INFERA_PREFLIGHT_SKIP names that are
// no check.
func (o *Outcome) UnknownSkips() []string {
	var out []string
	for _, u := range o.Unknown {
		out = append(out, fmt.Sprintf("INFERA_PREFLIGHT_SKIP names %q, which is no check (checks: %s)", u, strings.Join(Names(), ", ")))
	}
	return out
}

// log writes one line per finding: the address chosen, warnings,
// notes, and every error-level failure after the first (which is the
// refusal itself).
func (o *Outcome) log(log *slog.Logger) {
	if o.advertiseWhy != "" {
		log.Info(fmt.Sprintf("%s=%s (%s)", AdvertiseVar, o.AdvertiseIP, o.advertiseWhy))
	}
	for _, w := range o.UnknownSkips() {
		log.Warn(w)
	}
	first := true
	for _, r := range o.Checks {
		log := log.With("event", "check", "status", string(r.Status)) // the fields of docs/logging.md
		if r.Rule != "" {
			log = log.With("rule", r.Name, "file", r.Rule) // a rule: its id, and the file it came from
		} else {
			log = log.With("check", r.Name)
		}
		if r.Status == Fail {
			detail := r.Detail() // why, and the whole fix: the text line has the fix in a few words
			if r.Failed(Warn) {
				detail += fmt.Sprintf(" (INFERA_PREFLIGHT_SKIP=%s silences it)", r.Name)
			}
			log = log.With("detail", detail)
		}
		switch {
		case r.Failed(Error):
			if !first {
				log.Error(r.Line())
			}
			first = false
		case r.Failed(Warn):
			log.Warn(r.Line())
		case r.Failed(Info):
			log.Info(r.Line())
		default:
			log.Debug(fmt.Sprintf("preflight %s: %s: %s", r.Name, r.Status, r.Seen))
		}
	}
}

// Worst is the most severe failure among the checks: Error, Warn, or ""
// when none failed above Info. --doctor's exit code comes from it.
func (o *Outcome) Worst() Severity {
	var worst Severity
	for _, r := range o.Checks {
		switch {
		case r.Failed(Error):
			return Error
		case r.Failed(Warn):
			worst = Warn
		}
	}
	return worst
}

func label(r Result) string {
	switch {
	case r.Status == Fail:
		return strings.ToUpper(string(r.Severity))
	case r.Status == Skipped:
		return "skip"
	}
	return "ok"
}
