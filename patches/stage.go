// Package patches fixes vendor bugs in the installed engine source (vLLM,
// SGLang) at container start, from declarative definitions (package
// patchdef): each edit is an exact anchor, its replacement and an expected
// count, so the state of every edit can be decided from the file alone and
// a patch applies all of its edits or none of them. The engine is never
// imported. This package sequences the parts: package plan decides, package
// commit writes, package record keeps what a restart may believe.
package patches

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/distinfo"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/lookpath"
	"github.com/infera/infera-exec/internal/pyimport"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/plan"
	"github.com/infera/infera-exec/report"
)

// Input is what the engine-patch step takes from the decided configuration
// and the earlier steps.
type Input struct {
	// Config gives the payload root, INFERA_SKIP_ENGINE_PATCHES,
	// INFERA_REQUIRE_PATCHES, INFERA_SKIP_PATCHES and the probe's deadline.
	Config    config.Config
	Python    string // the interpreter, resolved once for the whole pass; "" when it cannot run
	PyMinor   int    // its CPython 3.minor, from the ABI family; 0 = unknown (the worker's, once located, decides: workerMinor)
	PythonErr error  // why there is no interpreter
	Env       *environ.Env
	Worker    *launch.Outcome // how the worker starts: the probe runs in its working directory
	StateDir  string          // infera-exec's trusted state directory: the probe cache and the patch record; "" = neither
	DryRun    bool
	Log       *slog.Logger
	Early     *Early // the probe started ahead (StartEarly), or nil
	// Answers says whether the filesystems of paths answer in time; the
	// PYTHONPATH directories are asked before the interpreter is started
	// on them. nil: not asked.
	Answers func(paths ...string) error
}

// StepState is how the patch step ended.
type StepState string

const (
	StepSkipped StepState = "skipped" // INFERA_SKIP_ENGINE_PATCHES, or the engine could not be located
	StepNone    StepState = "none"    // no patch definitions
	StepDone    StepState = "done"    // every definition evaluated, the pending ones applied
	StepPlanned StepState = "planned" // --explain: evaluated, nothing written
)

// Outcome is the step's decision: its section of the report.
type Outcome struct {
	State    StepState      `json:"state"`
	Summary  string         `json:"summary"`
	Location *Location      `json:"location,omitempty"`
	Results  []Result       `json:"results,omitempty"`
	Scripts  []legacyScript `json:"scripts,omitempty"`
	Notes    []string       `json:"notes,omitempty"`
	// Edits is what the worker's environment gains: the shadow trees it
	// imports the patched packages from, first on PYTHONPATH.
	Edits []environ.Edit `json:"-"`
}

// Fields and WriteText render the outcome in the report and --explain.
func (o *Outcome) Fields() []report.Field { return []report.Field{{Key: "patches", Value: o}} }

func (o *Outcome) WriteText(w io.Writer) {
	report.WriteHeading(w, "engine patches", string(o.State), o.Summary, nil)
}

// ConfigError is a definition set or requirement that cannot be used.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }

// ExitCode is EX_CONFIG.
func (e *ConfigError) ExitCode() int { return 78 }
func (e *ConfigError) Unwrap() error { return e.Err }

// RequiredError is a required patch that is not in force.
type RequiredError struct {
	Err   error
	brief string // the text line (Brief): the state and why in a few words
}

func (e *RequiredError) Error() string { return e.Err.Error() }

// Brief is the refusal's text line (logging.Briefer); Error has the whole why.
func (e *RequiredError) Brief() string { return e.brief }

// ExitCode is EX_DATAERR: a required patch is not in force.
func (e *RequiredError) ExitCode() int { return 65 }
func (e *RequiredError) Unwrap() error { return e.Err }

// loadSet reads the built-in definitions and the payload's.
func loadSet(payloadRoot string) (*patchdef.Set, error) {
	return patchdef.Load(filepath.Join(payloadRoot, "patches"))
}

// Run brings the engine packages the worker will import to the patched
// state (or, dry, says what it would do). The outcome is returned even
// with an error, so the report shows what was found.
func Run(ctx context.Context, in Input) (*Outcome, error) {
	o := &Outcome{}
	log := in.Log
	if in.Config.SkipEnginePatches {
		o.State, o.Summary = StepSkipped, "INFERA_SKIP_ENGINE_PATCHES is set"
		log.Info("engine patches skipped: INFERA_SKIP_ENGINE_PATCHES is set")
		return o, nil
	}
	set, err := in.Early.loadSet(in.Config.PayloadRoot)
	if err != nil {
		return o, &ConfigError{err}
	}
	o.Notes = set.Notes
	for _, n := range set.Notes {
		log.Info(n)
	}
	sel, err := selectDefs(set, in.Config.RequirePatches, in.Config.SkipPatches)
	if err != nil {
		return o, &ConfigError{err}
	}
	require := sel.require
	scripts, names := in.Early.scriptsAndNames(set, in.Config.PayloadRoot)
	if len(names) == 0 {
		o.State, o.Summary = StepNone, "no patch definitions"
		return o, nil
	}

	loc, err := locate(ctx, in, names, set.Distributions(names))
	if err != nil {
		// Cannot know where the engine is: nothing is patched. A required
		// patch cannot be vouched for, so that refuses.
		o.State, o.Summary = StepSkipped, err.Error()
		log.Warn("engine patches skipped: " + err.Error())
		for _, d := range set.Defs {
			if d.Required || require[d.ID] {
				return o, &RequiredError{fmt.Errorf("required patch %s (%s) cannot be checked: %v", d.ID, d.Summary, err),
					fmt.Sprintf("required patch %s cannot be checked: the engine was not located (INFERA_PYTHON)", d.ID)}
			}
		}
		return o, nil
	}
	o.Location = loc
	log.Debug("engine located "+loc.LocatedBrief(), "detail", loc.Located)
	in.PyMinor = workerMinor(in, loc, log)
	for _, n := range names {
		pkg := loc.Packages[n]
		if !pkg.Found {
			log.Info(fmt.Sprintf("engine patches for %s skipped: %s", n, pkg.Why))
			continue
		}
		cached := ""
		if loc.Cached {
			cached = " (location cached)"
		}
		if pkg.Version == "" && set.Gated(n) {
			// Not a detail: the patches limited to a version range are
			// not applied.
			log.Warn(fmt.Sprintf("%s at %s: the version is unknown (%s); the patches limited to a version range are not applied%s", n, pkg.Dir, orUnknownWhy(pkg), cached))
			continue
		}
		log.Info(fmt.Sprintf("%s %s at %s%s", n, orUnknown(pkg.Version), pkg.Dir, cached))
	}

	// Where the files cannot be written in place, into a shadow tree
	// (shadow.go), which goes on PYTHONPATH once the worker imports it.
	sh := planShadows(in, sel.set, loc, log)
	o.Results = sel.withSkipped(set, applySet(sel.set, sh.loc, options{DryRun: in.DryRun, Require: require, StateDir: in.StateDir,
		LockTimeout: in.Config.PatchLockTimeoutDuration(), Stop: ctx.Done(), PyMinor: in.PyMinor, PycachePrefix: prefixOf(loc, in.Worker)}))
	if edits, worker := sh.confirm(ctx, in, names, set.Distributions(names), o.Results, log); worker != nil {
		o.Edits, o.Location = edits, worker
	}
	counts := map[patchdef.State]int{}
	unvouched := 0
	var refusal error
	for i := range o.Results {
		r := &o.Results[i]
		if loc.Unvouched != "" && (r.State == patchdef.Applied || r.State == patchdef.Upstream) {
			r.Unvouched, unvouched = unvouchedWhy(loc), unvouched+1
		}
		counts[r.State]++
		logResult(log, *r)
		// A dry run leaves pending what a start would write, and stale
		// bytecode a start would remove; a module that loads from
		// another file stays shadowed whatever a start does.
		if r.Refused() != nil && !errors.As(refusal, new(*ConfigError)) {
			refusal = &ConfigError{r.Refused()}
		}
		if r.Required && !r.Ok() && refusal == nil && !(in.DryRun && (r.State == patchdef.Pending || r.State == patchdef.Shadowed && !r.NotImported)) {
			if r.Unvouched != "" {
				refusal = &RequiredError{fmt.Errorf("required patch %s is %s for %s only, not vouched for the worker: %s", r.ID, r.State, loc.Interpreter, r.Unvouched),
					fmt.Sprintf("required patch %s is %s for %s only, not vouched for the worker", r.ID, r.State, loc.Interpreter)}
			} else {
				refusal = &RequiredError{fmt.Errorf("required patch %s is %s: %s", r.ID, r.State, r.Why),
					fmt.Sprintf("required patch %s is %s: %s", r.ID, r.State, shortWhy(*r))}
			}
		}
	}
	o.Scripts = runScripts(ctx, scripts, loc, loc.Interpreter, in.Env, 0, in.DryRun)
	for _, s := range o.Scripts {
		switch {
		case !s.Ran:
			log.Info(fmt.Sprintf("patch script %s: %s", s.Path, s.Why))
		case s.ExitCode != 0:
			log.Warn(fmt.Sprintf("patch script %s failed (exit %d, %s): %s", s.Path, s.ExitCode, s.Why, s.Output))
		default:
			log.Info(fmt.Sprintf("patch script %s ran (exit 0, %s)", s.Path, s.Took))
		}
	}
	var parts []string
	for _, s := range []patchdef.State{patchdef.Applied, patchdef.Pending, patchdef.Partial, patchdef.Shadowed, patchdef.Upstream, patchdef.NotApplicable, patchdef.Drift, patchdef.Skipped} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	o.State = StepDone
	if in.DryRun {
		o.State = StepPlanned
	}
	if unvouched > 0 {
		parts = append(parts, fmt.Sprintf("%d of them not vouched for the worker", unvouched))
	}
	o.Summary = strings.Join(parts, ", ")
	return o, refusal
}

// unvouchedWhy is what a result in force says when the answer it rests
// on is not the worker's own (Location.Unvouched), and how to make it so.
func unvouchedWhy(loc *Location) string {
	return fmt.Sprintf("the copy decided is the one %s imports, asked with -c in the worker's directory and environment; the worker's own interpreter was not asked: %s. To make it certain, set INFERA_PYTHON to the interpreter the worker runs (then its answer is taken as the worker's), or start the worker as that interpreter (python3 -m ..., or a script whose #! line names it)", loc.Interpreter, loc.Unvouched)
}

// locate asks the container's interpreter, with the worker's final
// environment and working directory, where the engine packages resolve,
// and reads each found package's version.
func locate(ctx context.Context, in Input, names []string, dists map[string]string) (*Location, error) {
	if in.Python == "" {
		return nil, fmt.Errorf("cannot run the interpreter to locate %s: %v", strings.Join(names, ", "), in.PythonErr)
	}
	if err := pythonPathAnswers(in); err != nil {
		return nil, err
	}
	l := locator(in, dists)
	if loc, err, ok := in.Early.answer(l.settings(names)); ok {
		return loc, err
	}
	return l.locate(ctx, names)
}

func locator(in Input, dists map[string]string) *engineLocator {
	l := &engineLocator{Python: in.Python, Env: in.Env, Dir: in.Worker.Cwd, Timeout: in.Config.PatchProbeTimeout(), CacheDir: in.StateDir, Dists: dists,
		Argv: in.Worker.Argv, Path: in.Worker.Path, PyMinor: in.PyMinor, Path0: "c"}
	// The probe asks the worker's question (pyimport.Ask): the worker's
	// interpreter, options, sys.path[0] rule and environment.
	q := pyimport.Ask(pyimport.Query{Argv: in.Worker.Argv, Path: in.Worker.Path, Env: in.Env.Get, Cwd: in.Worker.Cwd})
	switch {
	case q.Unfollowed == "":
		l.Python, l.Options, l.Path0, l.Env = q.Interpreter, q.Options, q.Path0, editedEnv(in.Env, q.Edits)
		if l.Python != in.Python {
			// Another interpreter than the ABI step's: its version is
			// its own, read from its layout (or asked), not that one's.
			l.PyMinor = 0
		}
	case !in.Config.PythonNamed:
		l.Unvouched = q.Unfollowed
	}
	return l
}

// workerMinor is the CPython 3.minor the rules that depend on the version
// follow from here on: the one of the interpreter that answered where the
// engine is (the worker's), else the ABI step's. Where the two differ the
// log says so, naming both: the payload's trees were chosen for the ABI
// step's.
func workerMinor(in Input, loc *Location, log *slog.Logger) int {
	if loc.PyMinor == 0 {
		return in.PyMinor
	}
	if in.PyMinor != 0 && in.PyMinor != loc.PyMinor {
		log.Warn(fmt.Sprintf("the worker's interpreter %s runs CPython 3.%d, the interpreter the ABI step asked (%s, INFERA_PYTHON) CPython 3.%d: the engine patches follow 3.%d, the payload's trees were chosen for 3.%d; set INFERA_PYTHON to %s",
			loc.Interpreter, loc.PyMinor, in.Python, in.PyMinor, loc.PyMinor, in.PyMinor, loc.Interpreter))
	}
	return loc.PyMinor
}

// prefixOf is where the worker's interpreter keeps bytecode instead of
// __pycache__ (the probe's sys.pycache_prefix; a relative one is taken
// from the worker's working directory, as its imports take it), and the
// uid the worker runs as.
func prefixOf(loc *Location, w *launch.Outcome) pycachePrefix {
	pp := pycachePrefix{Root: loc.PycachePrefix, Owner: -1}
	if pp.Root != "" && !filepath.IsAbs(pp.Root) {
		pp.Root = filepath.Join(w.Cwd, pp.Root)
	}
	if w.User != nil {
		pp.Owner = w.User.UID
	}
	return pp
}

// editedEnv is env with env(1)'s edits applied, for the probe.
func editedEnv(env *environ.Env, edits []pyimport.EnvEdit) *environ.Env {
	if len(edits) == 0 {
		return env
	}
	kv := env.Slice()
	for _, e := range edits {
		switch {
		case e.Clear:
			kv = nil
		default:
			kv = slices.DeleteFunc(kv, func(x string) bool { return strings.HasPrefix(x, e.Key+"=") })
			if !e.Unset {
				kv = append(kv, e.Key+"="+e.Value)
			}
		}
	}
	return environ.New(kv)
}

// pythonPathAnswers asks, with the deadline, whether every PYTHONPATH
// directory's filesystem answers: an interpreter started on a dead mount
// would hang in its first import until the probe's own deadline (3 x
// INFERA_PYTHON_TIMEOUT), a dead mount costs the deadline of one access
// instead.
func pythonPathAnswers(in Input) error {
	if in.Answers == nil {
		return nil
	}
	if err := in.Answers(lookpath.AbsDirs(in.Env.Value("PYTHONPATH"))...); err != nil {
		return fmt.Errorf("a PYTHONPATH directory %w; the engine was not located", err)
	}
	return nil
}

// fillDistVersions reads each found package's version from the dist-info of
// the distribution the set's definitions name for it.
func (loc *Location) fillDistVersions(set *patchdef.Set, cwd string) {
	loc.fillVersions(set.Distributions(set.Packages()), cwd)
}

// fillVersions reads each found package's version from the dist-info of
// dists[name]. The dist-info may be beside the package (a regular
// install) or in any sys.path entry (an editable install keeps its
// dist-info in site-packages, far from the source); an empty entry is cwd.
func (loc *Location) fillVersions(dists map[string]string, cwd string) {
	for n, pkg := range loc.Packages {
		if !pkg.Found {
			continue
		}
		dist := dists[n]
		if dist == "" {
			dist = n
		}
		dirs := []string{filepath.Dir(pkg.Dir)}
		for _, s := range loc.SysPath {
			if s == "" {
				s = cwd
			}
			if !slices.Contains(dirs, s) {
				dirs = append(dirs, s)
			}
		}
		f := distinfo.Find(dist, dirs)
		pkg.Version, pkg.VersionFrom, pkg.VersionWhy = f.Version, f.From, f.Why
		loc.Packages[n] = pkg
	}
}

// logResult writes a patch's result: one short line per action, its
// files named from the package's root (the line before names where that
// is: "vllm 0.11.1 at DIR", or the shadow tree), every path, the summary
// and the whole why in the record's fields (file, detail).
func logResult(log *slog.Logger, r Result) {
	log = log.With("event", "patch", "patch", r.ID, "state", string(r.State), "file", resultFiles(r)) // the fields of docs/logging.md
	if r.Variant != "" {
		r.Summary += "; variant " + r.Variant
	}
	why := log.With("detail", r.Why)
	switch {
	case r.Unvouched != "":
		log.With("detail", r.Unvouched).Warn(fmt.Sprintf("patch %s %s, not vouched for the worker (INFERA_PYTHON: its interpreter)", r.ID, map[bool]string{true: "written", false: string(r.State)}[r.Action == "applied"]))
	case r.Action == "applied" && r.State == patchdef.Shadowed:
		why.Warn(fmt.Sprintf("patch %s written but not in force: %s", r.ID, shortWhy(r)))
	case r.Action == "applied":
		var files []string
		for _, e := range r.Edits {
			if e.SHA256Before != e.SHA256After && !slices.Contains(files, e.File) {
				files = append(files, e.File)
			}
		}
		from := ""
		if r.Replayed {
			from = " (as recorded)"
		}
		log.With("detail", r.Summary).Info(fmt.Sprintf("patch %s applied to %s%s", r.ID, strings.Join(files, ", "), from))
		for _, lines := range perFile(r.Edits, func(e *EditResult) []patchdef.LineRange { return e.Wrote }) {
			log.Info(fmt.Sprintf("patch %s wrote %s", r.ID, lines))
		}
	case r.Action == "would-apply":
		log.Info(fmt.Sprintf("patch %s would be applied (%s)", r.ID, r.Summary))
	case r.Action == "failed":
		why.Warn(fmt.Sprintf("patch %s not applied: %s", r.ID, shortWhy(r)))
	case r.State == patchdef.Applied && r.Shadow != "":
		log.Info(fmt.Sprintf("patch %s already applied (in the shadow tree %s)", r.ID, r.Shadow))
	case r.State == patchdef.Applied:
		log.Info(fmt.Sprintf("patch %s already applied", r.ID))
		for _, lines := range perFile(r.Edits, func(e *EditResult) []patchdef.LineRange { return plan.Found(e.At, "replacement", "legacy") }) {
			log.Info(fmt.Sprintf("patch %s found fixed at %s", r.ID, lines))
		}
	case r.State == patchdef.Upstream:
		why.Info(fmt.Sprintf("patch %s not needed: fixed upstream in %s", r.ID, editFiles(r, patchdef.Upstream)))
	case r.Missing:
		// The package is not there; its own line already said so.
		log.Debug(fmt.Sprintf("patch %s not applicable: %s", r.ID, r.Why))
	case r.State == patchdef.NotApplicable:
		why.Info(fmt.Sprintf("patch %s not applicable: %s", r.ID, plan.Brief(r.Why)))
	case r.State == patchdef.Drift:
		why.Warn(fmt.Sprintf("patch %s not applied: %s", r.ID, shortWhy(r)))
	case r.State == patchdef.Shadowed:
		why.Warn(fmt.Sprintf("patch %s not in force: %s", r.ID, shortWhy(r)))
	case r.State == patchdef.Partial:
		why.Warn(fmt.Sprintf("patch %s partial: %s", r.ID, shortWhy(r)))
	case r.State == patchdef.Skipped:
		log.Info(fmt.Sprintf("patch %s skipped: INFERA_SKIP_PATCHES names it", r.ID))
	default:
		log.Info(fmt.Sprintf("patch %s is %s", r.ID, r.State))
	}
}

// perFile is fileLines for each file of edits on its own, named from the
// package's root: "a.py (lines 3-9)", one line each.
func perFile(edits []EditResult, lines func(*EditResult) []patchdef.LineRange) []string {
	var out []string
	var files []string
	for _, e := range edits {
		if !slices.Contains(files, e.File) {
			files = append(files, e.File)
		}
	}
	for _, f := range files {
		var of []EditResult
		for _, e := range edits {
			if e.File == f {
				e.Path = "" // fileLines names it by File
				of = append(of, e)
			}
		}
		if l := fileLines(of, lines); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// editFiles is the files, from the package's root, of r's edits in
// state (""; every state but applied), comma-separated; all of them when
// none is.
func editFiles(r Result, state patchdef.State) string {
	var files, all []string
	for _, e := range r.Edits {
		if !slices.Contains(all, e.File) {
			all = append(all, e.File)
		}
		in := e.State == state || (state == "" && e.State != patchdef.Applied)
		if in && !slices.Contains(files, e.File) {
			files = append(files, e.File)
		}
	}
	if len(files) == 0 {
		files = all
	}
	return strings.Join(files, ", ")
}

// shortWhy is Why in a few words, for the text lines of a patch not in
// force (logResult, RequiredError.Brief): the files from the package's
// root, what stands in the way, the fix; Why (the record's detail, the
// report) has every path and count.
func shortWhy(r Result) string {
	switch {
	case r.Action == "failed":
		return failedBrief(r)
	case r.State == patchdef.Drift:
		return "drift in " + editFiles(r, patchdef.Drift) + " (its anchors do not match: --check shows where)"
	case r.State == patchdef.Shadowed:
		return loadsInstead(r)
	case r.State == patchdef.Partial:
		n, all := 0, 0
		for _, e := range r.Edits {
			all++
			if e.State == patchdef.Applied {
				n++
			}
		}
		return fmt.Sprintf("left unpatched %s (%d of %d edits applied)", editFiles(r, ""), n, all)
	}
	return r.Why
}

// loadsInstead says in a few words what the worker imports instead of a
// patched file (Why has the module and both paths).
func loadsInstead(r Result) string {
	if r.LoadsInstead == "" {
		return "the worker imports another copy"
	}
	instead := r.LoadsInstead
	for _, e := range r.Edits {
		if root := strings.TrimSuffix(e.Path, e.File); root != e.Path && strings.HasPrefix(instead, root) {
			instead = strings.TrimPrefix(instead, root)
			break
		}
	}
	return "the worker loads " + instead + ", not the patched file"
}

// failedBrief says in a few words why a pending patch was not written:
// the files and the system's reason, and what to do for the causes that
// are the deployment's (commit.Fix has the whole of it); else Why.
func failedBrief(r Result) string {
	var errno syscall.Errno
	if err := r.WriteErr(); err == nil || !errors.As(err, &errno) {
		return r.Why
	}
	var files []string
	for _, f := range strings.Split(editFiles(r, patchdef.Pending), ", ") {
		files = append(files, filepath.Base(f))
	}
	out := strings.Join(files, ", ") + " not written: " + errno.Error()
	switch {
	case errors.Is(errno, syscall.EROFS):
		out += "; apply it at image build (--apply)"
	case errors.Is(errno, syscall.EACCES), errors.Is(errno, syscall.EPERM):
		out += "; run as the engine's owner"
	}
	return out
}

// resultFiles is the files a patch's edits are on, comma-separated.
func resultFiles(r Result) string {
	var files []string
	for _, e := range r.Edits {
		if !slices.Contains(files, e.Path) {
			files = append(files, e.Path)
		}
	}
	return strings.Join(files, ",")
}

func orUnknownWhy(p Package) string {
	if p.VersionWhy == "" {
		return "no dist-info found"
	}
	return p.VersionWhy
}

func orUnknown(v string) string {
	if v == "" {
		return "(version unknown)"
	}
	return v
}

// fileLines names each file of edits with the lines lines(e) gives it, in
// the edits' order: "a.py (lines 3-9), b.py (lines 4, 10-12)".
func fileLines(edits []EditResult, lines func(*EditResult) []patchdef.LineRange) string {
	var order []string
	by := map[string][]string{}
	for i := range edits {
		e := &edits[i]
		p := e.Path
		if p == "" {
			p = e.File
		}
		for _, r := range lines(e) {
			if _, ok := by[p]; !ok {
				order = append(order, p)
			}
			l := fmt.Sprintf("%d-%d", r.From, r.To)
			if r.From == r.To {
				l = fmt.Sprint(r.From)
			}
			by[p] = append(by[p], l)
		}
	}
	out := make([]string, len(order))
	for i, p := range order {
		word := "lines "
		if len(by[p]) == 1 && !strings.Contains(by[p][0], "-") {
			word = "line "
		}
		out[i] = p + " (" + word + strings.Join(by[p], ", ") + ")"
	}
	return strings.Join(out, ", ")
}
