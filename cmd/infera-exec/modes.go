package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/rdma"
	"github.com/infera/infera-exec/internal/workerargs"
	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/preflight"
)

// doctorResult is --doctor's JSON: the preflight outcome, and the
// payload's trees against this image.
type doctorResult struct {
	*preflight.Outcome
	Audit *overlay.Audit `json:"payload_audit,omitempty"`
}

// runDoctor runs only the preflight checks, on the command that follows
// and this process's environment, and prints a report readable in 80
// columns (or JSON). Exit 0 when every check passed, 1 when only warnings
// failed, 78 when an error-level check failed.
func runDoctor(cfg config.Config, o config.Options, env *environ.Env, stdout, stderr io.Writer) int {
	probe := fsprobe.New(cfg.PreflightTimeoutDuration())
	// No swap has run: the container's own provider serves the devices,
	// read when sysfs answers in time.
	var inv *rdma.Inventory
	if probe.AllAnswer(cfg.Sysfs, rdma.DevDir) == nil {
		inv = rdma.Read(cfg.Sysfs, rdma.DevDir)
	}
	cfg.PreflightOff = false // --doctor asks for the checks
	out, _ := preflight.Run(context.Background(), preflight.Input{Config: cfg, Args: workerargs.Parse(o.Command), Env: env,
		Libionic: libionic.ContainerProvider("/", cfg.RDMAProvider, inv), Probe: probe, Log: slog.New(slog.DiscardHandler)})
	for _, w := range out.UnknownSkips() {
		fmt.Fprintf(stderr, "infera-exec: warning: %s\n", w)
	}
	res := doctorResult{Outcome: out}
	// The payload's trees against this image: version shadows and the
	// native trees' load check.
	if probe.AllAnswer(cfg.PayloadRoot) == nil {
		res.Audit, _ = overlay.AuditPayload(cfg.PayloadRoot, overlay.ImageAt("/", env.Value("LD_LIBRARY_PATH")))
	}
	if o.JSON {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		preflight.WriteText(stdout, out.Checks)
		if res.Audit != nil {
			res.Audit.WriteText(stdout, "payload trees against this image:")
		}
	}
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
func runInstall(cfg config.Config, dest string, stderr io.Writer) int {
	if abs, err := filepath.Abs(dest); err == nil {
		dest = abs
	}
	r, err := overlay.InstallAnswering(cfg.PayloadRoot, dest, fsprobe.New(cfg.PreflightTimeoutDuration()).AllAnswer)
	if r != nil {
		// What the install had to change in DEST (modes, entries of
		// another uid), said even when it then failed.
		for _, n := range r.Notes {
			fmt.Fprintf(stderr, "infera-exec: %s\n", n)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitCode(err)
	}
	fmt.Fprintf(stderr, "infera-exec: installed the payload %s into %s: %d entries, %d copied, %d already identical, %d removed\n",
		r.Source, r.Dest, r.Entries, len(r.Copied), r.Unchanged, len(r.Removed))
	for _, l := range overlay.InstalledAudit(dest) {
		fmt.Fprintf(stderr, "infera-exec: %s\n", l)
	}
	return exitOK
}

// checkResult is --check's JSON: the patches against ROOT, and the
// payload's trees against ROOT when it is an image root.
type checkResult struct {
	*patches.CheckReport
	Audit *overlay.Audit `json:"payload_audit,omitempty"`
}

// runCheck evaluates every patch definition against an unpacked image root
// or a site-packages directory, offline; exit 65 on drift.
func runCheck(cfg config.Config, root string, asJSON bool, stdout, stderr io.Writer) int {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	// An image root on a filesystem that does not answer would block the
	// walk: ask first, with the deadline.
	if err := fsprobe.New(cfg.PreflightTimeoutDuration()).AllAnswer(root, cfg.PayloadRoot); err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitConfig
	}
	rep, err := patches.Check(root, cfg.PayloadRoot)
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitCode(err)
	}
	res := checkResult{CheckReport: rep, Audit: overlay.AuditImageRoot(cfg.PayloadRoot, root)}
	if asJSON {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		rep.WriteText(stdout)
		if res.Audit != nil {
			res.Audit.WriteText(stdout, fmt.Sprintf("payload %s against %s:", cfg.PayloadRoot, root))
		}
	}
	if rep.Drift {
		return exitPatch
	}
	return exitOK
}

