package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/workerargs"
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

// runDoctor runs only the preflight checks, and prints them in 80 columns
// (or JSON): exit 0, 1 (warnings only) or 78 (an error).
func runDoctor(cfg config.Config, o config.Options, env *environ.Env, stdout, stderr io.Writer) int {
	probe := fsprobe.New(cfg.PreflightTimeoutDuration())
	out := preflight.Doctor(context.Background(), cfg, workerargs.Parse(o.Command), env, probe)
	for _, w := range out.UnknownSkips() {
		fmt.Fprintf(stderr, "infera-exec: warning: %s\n", w)
	}
	res := doctorResult{Outcome: out} // and the payload's trees against this image
	if probe.AllAnswer(cfg.PayloadRoot) == nil {
		res.Audit, _ = overlay.AuditPayload(cfg.PayloadRoot, overlay.ImageAt("/", env.Value("LD_LIBRARY_PATH")))
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
	for _, l := range r.Lines() {
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
// or a site-packages directory, offline; exit 65 on drift, and on a patch
// whose module loads from another file than the one it edits.
func runCheck(cfg config.Config, root string, asJSON bool, stdout, stderr io.Writer) int {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	// An image root on a filesystem that does not answer would block the
	// walk: it is asked first, with the deadline.
	rep, err := patches.CheckAnswering(root, cfg.PayloadRoot, fsprobe.New(cfg.PreflightTimeoutDuration()).AllAnswer)
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitCode(err)
	}
	res := checkResult{CheckReport: rep, Audit: overlay.AuditImageRoot(cfg.PayloadRoot, root)}
	printResult(stdout, asJSON, res, func() {
		rep.WriteText(stdout)
		res.Audit.WriteText(stdout, fmt.Sprintf("payload %s against %s:", cfg.PayloadRoot, root))
	})
	if rep.Drift || rep.Shadowed {
		return exitPatch
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
