package preflight

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/rdma"
	"github.com/infera/infera-exec/internal/workerargs"
	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/overlay"
)

// NewInput is what the checks look at in a real run: the worker command,
// the worker's environment, the configured thresholds, the run's RDMA
// devices, and providerABI, the provider build that will serve each of
// them (nil: unknown).
func NewInput(cfg config.Config, args workerargs.Args, env *environ.Env, inv *rdma.Inventory, providerABI func(ibdev string) (min, max uint32, ok bool), probe *fsprobe.Prober) *Input {
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	m := map[string]string{}
	for _, kv := range env.Slice() {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return &Input{
		Args:         args,
		Env:          m,
		Sysfs:        cfg.Sysfs,
		RDMA:         inv,
		ShmDir:       "/dev/shm",
		NofileHard:   lim.Max,
		ReadyTimeout: cfg.ReadyTimeout,
		ReadyDefault: !cfg.ReadyTimeoutSet,
		Chdir:        cfg.Chdir,
		ShmMin:       cfg.PreflightShmMin,
		NofileMin:    cfg.PreflightNofileMin,
		AllowTCP:     cfg.AllowTCPKV,
		ProviderABI:  providerABI,
		Probe:        probe,
		TimeoutError: cfg.PreflightTimeoutError,
	}
}

// Outcome is the preflight step's section of the report (and --doctor's
// JSON).
type Outcome struct {
	State       string   `json:"state"` // off, passed, failed
	Summary     string   `json:"summary"`
	Command     []string `json:"command,omitempty"`
	AdvertiseIP string   `json:"advertise_ip,omitempty"` // chosen for INFERA_ADVERTISE_IP
	Checks      []Result `json:"checks,omitempty"`
	Unknown     []string `json:"unknown_skips,omitempty"`
	// --doctor: the payload's trees against this image (version shadows,
	// the native trees' load check), set by the caller; the pass reports
	// them in its own sections.
	Audit *overlay.Audit `json:"payload_audit,omitempty"`

	advertiseWhy string // set when the address is exported, for the log
}

// Heading and TextLines render the outcome in --explain.
func (o *Outcome) Heading() (name, state, summary string) { return "preflight", o.State, o.Summary }

func (o *Outcome) TextLines() []string {
	var out []string
	for _, r := range o.Checks {
		out = append(out, fmt.Sprintf("%-7s %-13s %s", label(r), r.Name, r.Seen))
	}
	return out
}

// Failed is the refusal when an error-level check failed.
type Failed struct{ Result Result }

func (e *Failed) Error() string {
	r := e.Result
	return fmt.Sprintf("preflight %s: %s; %s %s (to start anyway: INFERA_PREFLIGHT_SKIP=%s)", r.Name, r.Seen, r.Why, r.Do, r.Name)
}

// Evaluate runs every check not skipped and decides INFERA_ADVERTISE_IP
// by the rule the advertise-ip check reports on: the edit sets it when the
// environment does not. The error is a *Failed naming the first
// error-level failure.
func Evaluate(in *Input, skip []string) (*Outcome, []environ.Edit, error) {
	o := &Outcome{Command: in.Args.Argv}
	o.Checks, o.Unknown = Run(in, skip)
	var edits []environ.Edit
	if !slices.Contains(skip, "advertise-ip") {
		var why string
		o.AdvertiseIP, why = AdvertiseIP(in)
		if _, set := in.Env[AdvertiseVar]; !set && o.AdvertiseIP != "" {
			edits = append(edits, environ.Set(AdvertiseVar, o.AdvertiseIP))
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
	o.State = "passed"
	o.Summary = fmt.Sprintf("%d passed, %d errors, %d warnings, %d skipped", counts["ok"], counts["ERROR"], counts["WARN"], counts["skip"])
	if len(failed) == 0 {
		return o, edits, nil
	}
	o.State = "failed"
	return o, edits, &Failed{failed[0]}
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

// Log writes one line per finding: the address chosen, warnings,
// notes, and every error-level failure after the first (which is the
// refusal itself).
func (o *Outcome) Log(log *slog.Logger) {
	if o.advertiseWhy != "" {
		log.Info(fmt.Sprintf("%s=%s (%s)", AdvertiseVar, o.AdvertiseIP, o.advertiseWhy))
	}
	for _, w := range o.UnknownSkips() {
		log.Warn(w)
	}
	first := true
	for _, r := range o.Checks {
		switch {
		case r.Failed(Error):
			if !first {
				log.Error(fmt.Sprintf("preflight %s: %s; %s %s", r.Name, r.Seen, r.Why, r.Do))
			}
			first = false
		case r.Failed(Warn):
			log.Warn(fmt.Sprintf("preflight %s: %s; %s %s (INFERA_PREFLIGHT_SKIP=%s silences it)", r.Name, r.Seen, r.Why, r.Do, r.Name))
		case r.Failed(Info):
			log.Info(fmt.Sprintf("preflight %s: %s", r.Name, r.Seen))
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

// ForDoctor is the input of --doctor: the command that follows and this
// process's environment, the RDMA devices when sysfs answers in time, and
// the container's own provider (no swap has run).
func ForDoctor(cfg config.Config, argv []string, env *environ.Env, probe *fsprobe.Prober) *Input {
	var inv *rdma.Inventory
	if probe.AllAnswer(cfg.Sysfs, rdma.DevDir) == nil {
		inv = rdma.Read(cfg.Sysfs, rdma.DevDir)
	}
	return NewInput(cfg, workerargs.Parse(argv), env, inv, libionic.ProviderABI(nil, "/", cfg.RDMAProvider), probe)
}
