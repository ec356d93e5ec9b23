package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/lookup"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/report"
)

// patchesDetail is the report's record of the engine-patch step.
type patchesDetail struct {
	Location *patches.Location `json:"location,omitempty"`
	Results  []patches.Result  `json:"results,omitempty"`
	Scripts  []patches.Script  `json:"scripts,omitempty"`
	Notes    []string          `json:"notes,omitempty"`
}

// loadPatchSet reads the built-in definitions and the payload's.
func loadPatchSet(payloadRoot string) (*patches.Set, error) {
	builtin, err := patches.Builtin()
	if err != nil {
		return nil, fmt.Errorf("built-in patch definitions: %w", err)
	}
	own, err := patches.LoadDir(filepath.Join(payloadRoot, "patches"))
	if err != nil {
		return nil, err
	}
	return patches.Merge(builtin, own)
}

func (p *pass) enginePatches(ctx context.Context) error {
	st := report.Stage{Name: "engine patches"}
	detail := &patchesDetail{}
	defer func() {
		st.Detail = detail
		p.rep.Stages = append(p.rep.Stages, st)
	}()
	if p.cfg.SkipEnginePatches {
		st.State, st.Summary = "skipped", "INFERA_SKIP_ENGINE_PATCHES is set"
		p.log.Info("engine patches skipped: INFERA_SKIP_ENGINE_PATCHES is set")
		return nil
	}
	set, err := loadPatchSet(p.cfg.PayloadRoot)
	if err != nil {
		return refuse(exitConfig, err)
	}
	detail.Notes = set.Notes
	for _, n := range set.Notes {
		p.log.Info(n)
	}
	require := map[string]bool{}
	for _, id := range p.cfg.RequirePatches {
		if set.Lookup(id) == nil {
			var known []string
			for _, d := range set.Defs {
				known = append(known, d.ID)
			}
			return refuse(exitConfig, fmt.Errorf("INFERA_REQUIRE_PATCHES names %q, which no patch definition has (known: %s)", id, strings.Join(known, ", ")))
		}
		require[id] = true
	}
	scripts := patches.Superseded(patches.Scripts(filepath.Join(p.cfg.PayloadRoot, "patches")), set)
	names := set.Packages()
	for _, s := range scripts {
		if !slices.Contains(names, s.Package) {
			names = append(names, s.Package)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		st.State, st.Summary = "none", "no patch definitions"
		return nil
	}

	loc, err := p.locatePackages(ctx, names)
	if err != nil {
		// Cannot know where the engine is: nothing is patched. A required
		// patch cannot be vouched for, so that refuses.
		st.State, st.Summary = "skipped", err.Error()
		p.log.Warn("engine patches skipped: " + err.Error())
		for _, d := range set.Defs {
			if d.Required || require[d.ID] {
				return refuse(exitPatch, fmt.Errorf("required patch %s (%s) cannot be checked: %v", d.ID, d.Summary, err))
			}
		}
		return nil
	}
	detail.Location = loc
	for _, n := range names {
		pkg := loc.Packages[n]
		if !pkg.Found {
			p.log.Info(fmt.Sprintf("engine patches for %s skipped: %s", n, pkg.Why))
			continue
		}
		pkg.Version, pkg.VersionFrom = patches.DistVersion(distOf(set, n), versionDirs(pkg, loc, p.cfg.Chdir))
		loc.Packages[n] = pkg
		p.log.Info(fmt.Sprintf("%s %s at %s%s", n, orUnknown(pkg.Version), pkg.Dir, map[bool]string{true: " (location cached)", false: ""}[loc.Cached]))
	}

	detail.Results = patches.Apply(set, loc, patches.Options{DryRun: p.dry, Require: require})
	counts := map[string]int{}
	var refusal error
	for _, r := range detail.Results {
		counts[string(r.State)]++
		p.logPatch(r)
		if r.Required && !r.Ok() && refusal == nil && !(p.dry && r.State == patches.Pending) {
			refusal = fmt.Errorf("required patch %s is %s: %s", r.ID, r.State, r.Why)
		}
	}
	python := loc.Interpreter
	detail.Scripts = patches.RunScripts(ctx, scripts, loc, python, p.env, 0, p.dry)
	for _, s := range detail.Scripts {
		switch {
		case !s.Ran:
			p.log.Info(fmt.Sprintf("patch script %s: %s", s.Path, s.Why))
		case s.ExitCode != 0:
			p.log.Warn(fmt.Sprintf("patch script %s failed (exit %d, %s): %s", s.Path, s.ExitCode, s.Why, s.Output))
		default:
			p.log.Info(fmt.Sprintf("patch script %s ran (exit 0, %s)", s.Path, s.Took))
		}
	}
	var parts []string
	for _, s := range []patches.State{patches.Applied, patches.Pending, patches.Upstream, patches.NotApplicable, patches.Drift} {
		if counts[string(s)] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[string(s)], s))
		}
	}
	st.State = "done"
	if p.dry {
		st.State = "planned"
	}
	st.Summary = strings.Join(parts, ", ")
	if refusal != nil {
		return refuse(exitPatch, refusal)
	}
	return nil
}

// locatePackages asks the container's interpreter, with the worker's final
// environment and working directory, where the engine packages resolve.
func (p *pass) locatePackages(ctx context.Context, names []string) (*patches.Location, error) {
	python, err := lookup.Command(p.cfg.Python, p.env.Value("PATH"), p.cfg.Chdir)
	if err != nil {
		return nil, fmt.Errorf("cannot run the interpreter to locate %s: %v", strings.Join(names, ", "), err)
	}
	l := &patches.Locator{Python: python, Env: p.env, Dir: p.cfg.Chdir, Timeout: p.cfg.PatchProbeTimeout(), CacheDir: p.stateDir()}
	return l.Locate(ctx, names)
}

// stateDir is where the probe's answer is cached: INFERA_EXEC_STATE_DIR, or
// the first writable of /run/infera-exec and /tmp/infera-exec. It lives in
// the container's own filesystem, so it is as old as the patched files.
func (p *pass) stateDir() string {
	if p.dry {
		return "" // explain writes nothing; it reads no stale cache either
	}
	cands := []string{p.cfg.StateDir}
	if p.cfg.StateDir == "" {
		cands = nil
		for _, r := range report.DefaultPaths {
			cands = append(cands, filepath.Dir(r))
		}
	}
	for _, d := range cands {
		if os.MkdirAll(d, 0o755) == nil && writable(d) {
			return d
		}
	}
	return ""
}

func (p *pass) logPatch(r patches.Result) {
	switch {
	case r.Action == "applied":
		var files []string
		for _, e := range r.Edits {
			if e.SHA256Before != e.SHA256After && !slices.Contains(files, e.Path) {
				files = append(files, e.Path)
			}
		}
		p.log.Info(fmt.Sprintf("patch %s applied to %s (%s)", r.ID, strings.Join(files, ", "), r.Summary))
	case r.Action == "would-apply":
		p.log.Info(fmt.Sprintf("patch %s would be applied (%s)", r.ID, r.Summary))
	case r.Action == "failed":
		p.log.Warn(fmt.Sprintf("patch %s not applied: %s", r.ID, r.Why))
	case r.State == patches.Applied:
		p.log.Info(fmt.Sprintf("patch %s already applied", r.ID))
	case r.State == patches.Upstream:
		p.log.Info(fmt.Sprintf("patch %s not needed: fixed upstream (%s)", r.ID, r.Why))
	case r.Missing:
		// The package is not there; its own line already said so.
		p.log.Debug(fmt.Sprintf("patch %s not applicable: %s", r.ID, r.Why))
	case r.State == patches.NotApplicable:
		p.log.Info(fmt.Sprintf("patch %s not applicable: %s", r.ID, r.Why))
	case r.State == patches.Drift:
		p.log.Warn(fmt.Sprintf("patch %s not applied: drift in %s", r.ID, r.Why))
	default:
		p.log.Info(fmt.Sprintf("patch %s is %s", r.ID, r.State))
	}
}

// distOf is the distribution whose version gates name's patches.
func distOf(set *patches.Set, name string) string {
	for _, d := range set.Defs {
		if d.Package == name {
			return d.Distribution
		}
	}
	return name
}

// versionDirs are where a package's dist-info may be: beside the package
// (a regular install) or in any sys.path entry (an editable install keeps
// its dist-info in site-packages, far from the source).
func versionDirs(pkg patches.Package, loc *patches.Location, cwd string) []string {
	dirs := []string{filepath.Dir(pkg.Dir)}
	for _, s := range loc.SysPath {
		if s == "" {
			s = cwd
		}
		if !slices.Contains(dirs, s) {
			dirs = append(dirs, s)
		}
	}
	return dirs
}

func orUnknown(v string) string {
	if v == "" {
		return "(version unknown)"
	}
	return v
}

func writable(dir string) bool { return unix.Access(dir, unix.W_OK|unix.X_OK) == nil }
