package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/workerargs"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/preflight"
	"github.com/infera/infera-exec/report"
)

// doctorResult is --doctor's JSON: the checks, and the payload's trees against this image.
type doctorResult struct {
	*preflight.Outcome
	Audit *capability.Audit `json:"payload_audit,omitempty"`
}

// runDoctor runs only the preflight checks, and prints them in 80 columns
// (or JSON): exit 0, 1 (warnings only) or 78 (an error).
func runDoctor(cfg config.Config, o config.Options, env *environ.Env, probe *fsprobe.Prober, stdout io.Writer, log *slog.Logger) int {
	out := preflight.Doctor(context.Background(), cfg, workerargs.Parse(o.Command), env, probe, patches.EngineOffline)
	for _, w := range out.UnknownSkips() {
		log.Warn(w)
	}
	res := doctorResult{Outcome: out} // and the payload's trees against this image
	if probe.AllAnswer(cfg.PayloadRoot) == nil {
		res.Audit, _ = capability.AuditPayload(cfg.PayloadRoot, overlay.ImageAt("/", env.Value("LD_LIBRARY_PATH")))
	}
	printResult(stdout, o.JSON, res, func() {
		preflight.WriteText(stdout, out.Checks)
		res.Audit.WriteText(stdout, "payload trees against this image:")
	})
	switch {
	case out.Worst() == preflight.Error:
		return exitConfig
	case out.Worst() == preflight.Warn, res.Audit != nil && res.Audit.Problems():
		return exitWarnings
	}
	return exitOK
}

// runInstall copies the payload this binary belongs to into dest: what the
// overlay image's init container runs, so the image needs no shell.
func runInstall(cfg config.Config, dest string, quiet bool, log *slog.Logger) int {
	if abs, err := filepath.Abs(dest); err == nil {
		dest = abs
	}
	say, progress := func(l string) { log.Info(l) }, (func(string))(nil)
	if !quiet {
		progress = say
	}
	r, err := overlay.InstallAnswering(cfg.PayloadRoot, dest, fsprobe.New(cfg.PreflightTimeoutDuration()).AllAnswer, progress)
	for _, n := range r.NoteLines() { // what had to change in DEST, said even when it then failed
		say(n)
	}
	if err != nil {
		tellKubelet(cfg.TerminationLog, exitCode(err), err.Error(), log)
		return refuse(log, err)
	}
	for _, l := range append([]string{r.Summary()}, capability.InstalledAudit(r.Dest)...) {
		say(l)
	}
	return exitOK
}

// checkResult is --check's JSON: the patches, and the payload's trees against an image root.
type checkResult struct {
	*patches.CheckReport
	Audit *capability.Audit `json:"payload_audit,omitempty"`
}

// printOffline prints what --check and --apply found in root: the
// patches' report and the payload's trees audited against root, as text
// or JSON; the result is returned for the exit code.
func printOffline(cfg config.Config, root string, rep *patches.CheckReport, asJSON bool, stdout io.Writer) checkResult {
	res := checkResult{CheckReport: rep, Audit: capability.AuditImageRoot(cfg.PayloadRoot, root)}
	printResult(stdout, asJSON, res, func() {
		rep.WriteText(stdout)
		res.Audit.WriteText(stdout, fmt.Sprintf("payload %s against %s:", cfg.PayloadRoot, root))
	})
	return res
}

// runCheck evaluates every patch definition against an unpacked image root
// or a site-packages directory, offline; exit 65 on drift (and on a patch
// whose module loads from another file), 69 when the payload's trees do not
// fit the image (capability.Unfit).
func runCheck(cfg config.Config, root string, asJSON bool, stdout io.Writer, log *slog.Logger) int {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	log.Info(fmt.Sprintf("checking %s against the built-in patch definitions and those of the payload %s", root, cfg.PayloadRoot),
		"detail", "payload root from "+cfg.PayloadRootFrom)
	rep, err := patches.CheckAnswering(root, cfg.PayloadRoot, fsprobe.New(cfg.PreflightTimeoutDuration()).AllAnswer)
	if err != nil {
		return refuse(log, err)
	}
	res := printOffline(cfg, root, rep, asJSON, stdout)
	if rep.Drift || rep.Shadowed {
		return exitPatch
	}
	// The payload must fit the image: a file that does not load there, or a shadow, is 69.
	if err := res.Audit.Failure(); err != nil {
		return refuse(log, err)
	}
	return exitOK
}

// runApply writes every patch definition into an unpacked image root or a
// site-packages directory, offline, as a start writes them (the same
// plans, states and transactions), and then reports as runCheck does, with
// runCheck's exit codes; 65 also when a patch that is pending could not be
// written.
func runApply(cfg config.Config, root string, asJSON bool, stdout io.Writer, log *slog.Logger) int {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	log.Info(fmt.Sprintf("applying the built-in patch definitions and those of the payload %s to %s", cfg.PayloadRoot, root),
		"detail", "payload root from "+cfg.PayloadRootFrom)
	rep, err := patches.ApplyAnswering(root, cfg.PayloadRoot, fsprobe.New(cfg.PreflightTimeoutDuration()).AllAnswer, cfg.PatchLockTimeoutDuration())
	if err != nil {
		return refuse(log, err)
	}
	res := printOffline(cfg, root, rep, asJSON, stdout)
	for _, f := range rep.Failed {
		log.Error(fmt.Sprintf("patch %s not written: %s", f.ID, f.Why), "event", "patch", "patch", f.ID)
	}
	if rep.Drift || rep.Shadowed || len(rep.Failed) > 0 {
		return exitPatch
	}
	if err := res.Audit.Failure(); err != nil {
		return refuse(log, err)
	}
	return exitOK
}

// printResult prints a mode's result as indented JSON, or as text.
func printResult(w io.Writer, asJSON bool, v any, text func()) {
	if !asJSON {
		text()
		return
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintf(w, "%s\n", b)
}

// refuse logs a mode's refusal and returns its exit code: a short line,
// the whole reason in the record's detail (logging.ErrorRecord).
func refuse(log *slog.Logger, err error) int {
	code := exitCode(err)
	msg, detail := logging.ErrorRecord(err)
	log.With(detail...).Error(msg, "event", "refused", "exit_code", code)
	return code
}

// runReport prints the last report the starts wrote (report.Last), as
// text or as the JSON document it is: kubectl exec POD --
// /overlay/bin/infera-exec --report, in an image without a shell or cat.
// Exit 0, or 66 when there is none or it cannot be read.
func runReport(cfg config.Config, asJSON bool, stdout io.Writer, log *slog.Logger) int {
	path := cfg.ReportPath
	if cfg.ReportOff {
		path = ""
	}
	where, data, err := report.Last(path, cfg.StateDir)
	if err == nil && asJSON {
		_, err = stdout.Write(data)
	} else if err == nil {
		err = report.WriteStored(stdout, where, data)
	}
	if err != nil {
		return refuse(log, err)
	}
	return exitOK
}

// modeName is the step of a mode's records: doctor, install, check,
// apply or report.
func modeName(o config.Options) string {
	switch {
	case o.Doctor:
		return "doctor"
	case o.Install != "":
		return "install"
	case o.Check != "":
		return "check"
	case o.Apply != "":
		return "apply"
	}
	return "report"
}
