package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/environ"
	"github.com/infera/infera-exec/fsprobe"
	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/preflight"
	"github.com/infera/infera-exec/report"
)

// preflightInput is what the checks look at: the worker command, the
// worker's environment, and the provider build that will serve each RDMA
// device (the host's, when the swap step put it in place).
func preflightInput(cfg config.Config, argv []string, env *environ.Env, swap *libionic.Result, probe *fsprobe.Prober) *preflight.Input {
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	m := map[string]string{}
	for _, kv := range env.Slice() {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return &preflight.Input{
		Argv:         argv,
		Env:          m,
		Sysfs:        cfg.Sysfs,
		DevDir:       "/dev/infiniband",
		ShmDir:       "/dev/shm",
		NofileHard:   lim.Max,
		ReadyTimeout: cfg.ReadyTimeout,
		ReadyDefault: !cfg.ReadyTimeoutSet,
		Probe:        probe,
		TimeoutError: cfg.PreflightTimeoutError,
		ProviderABI: func(ibdev string) (uint32, uint32, bool) {
			if !strings.HasPrefix(ibdev, cfg.RDMAProvider) {
				return 0, 0, false // another NIC's provider: not ours to judge
			}
			if swap != nil && swap.HostABI != nil {
				switch swap.State {
				case "replaced", "fallback", "unchanged", "planned":
					return swap.HostABI.Min, swap.HostABI.Max, true
				}
			}
			return libionic.ProviderRange("/", cfg.RDMAProvider)
		},
	}
}

// preflight runs the checks on the composed environment. An error-level
// failure refuses the start; INFERA_PREFLIGHT=off skips the step and
// INFERA_PREFLIGHT_SKIP single checks.
func (p *pass) preflight(context.Context) error {
	st := report.Stage{Name: "preflight"}
	defer func() { p.rep.Stages = append(p.rep.Stages, st) }()
	if p.cfg.PreflightOff {
		st.State, st.Summary = "off", "INFERA_PREFLIGHT=off"
		p.log.Info("preflight checks off (INFERA_PREFLIGHT=off)")
		return nil
	}
	in := preflightInput(p.cfg, p.opt.Command, p.env, p.ionic, p.probe)
	skip := preflight.ParseSkip(strings.Join(p.cfg.PreflightSkip, ","))
	results, unknown := preflight.Run(in, skip)
	// The routable rail address for the worker, chosen by the same rule
	// the advertise-ip check reports on.
	if _, set := p.env.Get(preflight.AdvertiseVar); !set && !skip["advertise-ip"] {
		if ip, why := preflight.AdvertiseIP(in); ip != "" {
			p.env.Set(preflight.AdvertiseVar, ip)
			p.log.Info(fmt.Sprintf("%s=%s (%s)", preflight.AdvertiseVar, ip, why))
		}
	}
	st.Detail = results
	for _, u := range unknown {
		p.log.Warn(fmt.Sprintf("INFERA_PREFLIGHT_SKIP names %q, which is no check (checks: %s)", u, strings.Join(preflight.Names(), ", ")))
	}
	var failed []preflight.Result
	counts := map[string]int{}
	for _, r := range results {
		st.Lines = append(st.Lines, fmt.Sprintf("%-7s %-13s %s", label(r), r.Name, r.Seen))
		counts[label(r)]++
		switch {
		case r.Failed(preflight.Error):
			failed = append(failed, r)
		case r.Failed(preflight.Warn):
			p.log.Warn(fmt.Sprintf("preflight %s: %s; %s %s (INFERA_PREFLIGHT_SKIP=%s silences it)", r.Name, r.Seen, r.Why, r.Do, r.Name))
		case r.Failed(preflight.Info):
			p.log.Info(fmt.Sprintf("preflight %s: %s", r.Name, r.Seen))
		default:
			p.log.Debug(fmt.Sprintf("preflight %s: %s: %s", r.Name, r.Status, r.Seen))
		}
	}
	st.State = "passed"
	st.Summary = fmt.Sprintf("%d passed, %d errors, %d warnings, %d skipped", counts["ok"], counts["ERROR"], counts["WARN"], counts["skip"])
	if len(failed) == 0 {
		return nil
	}
	st.State = "failed"
	for _, r := range failed[1:] {
		p.log.Error(fmt.Sprintf("preflight %s: %s; %s %s", r.Name, r.Seen, r.Why, r.Do))
	}
	r := failed[0]
	return refuse(exitConfig, fmt.Errorf("preflight %s: %s; %s %s (to start anyway: INFERA_PREFLIGHT_SKIP=%s)", r.Name, r.Seen, r.Why, r.Do, r.Name))
}

func label(r preflight.Result) string {
	switch {
	case r.Status == preflight.Fail:
		return strings.ToUpper(string(r.Severity))
	case r.Status == preflight.Skipped:
		return "skip"
	}
	return "ok"
}

// doctorReport is --doctor --json.
type doctorReport struct {
	Command     []string           `json:"command"`
	AdvertiseIP string             `json:"advertise_ip,omitempty"`
	Checks      []preflight.Result `json:"checks"`
	Unknown     []string           `json:"unknown_skips,omitempty"`
}

// runDoctor runs only the preflight checks, on the command that follows
// and this process's environment, and prints a report readable in 80
// columns (or JSON). Exit 0 when every check passed, 1 when only warnings
// failed, 78 when an error-level check failed.
func runDoctor(args []string, asJSON bool, env []string, stdout, stderr io.Writer) int {
	e := environ.New(env)
	exe, _ := os.Executable()
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	cwd, _ := os.Getwd()
	cfg, warns, err := config.Load(e, exe, cwd)
	for _, w := range warns {
		fmt.Fprintf(stderr, "infera-exec: warning: %s\n", w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitConfig
	}
	in := preflightInput(cfg, args, e, nil, fsprobe.New(cfg.PreflightTimeoutDuration()))
	rep := doctorReport{Command: args}
	skip := preflight.ParseSkip(strings.Join(cfg.PreflightSkip, ","))
	rep.Checks, rep.Unknown = preflight.Run(in, skip)
	if !skip["advertise-ip"] {
		rep.AdvertiseIP, _ = preflight.AdvertiseIP(in)
	}
	for _, u := range rep.Unknown {
		fmt.Fprintf(stderr, "infera-exec: warning: INFERA_PREFLIGHT_SKIP names %q, which is no check (checks: %s)\n", u, strings.Join(preflight.Names(), ", "))
	}
	if asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		preflight.WriteText(stdout, rep.Checks)
	}
	code := exitOK
	for _, r := range rep.Checks {
		switch {
		case r.Failed(preflight.Error):
			return exitConfig
		case r.Failed(preflight.Warn):
			code = 1
		}
	}
	return code
}
