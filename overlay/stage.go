package overlay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/lookpath"
	"github.com/infera/infera-exec/internal/statedir"
	"github.com/infera/infera-exec/report"
)

// Input is what the payload step takes: the decided configuration, the ABI
// step's family, the container's environment as it started infera-exec
// (its LD_LIBRARY_PATH is part of the image the native tree is checked
// against), and the state directory the run picked (the load check's
// verdict cache; "" for none).
type Input struct {
	Config   config.Config
	Family   abi.Family
	Env      *environ.Env
	StateDir string
	// Answers says whether the filesystems of paths answer in time.
	Answers func(paths ...string) error
	Log     *slog.Logger
}

// Outcome is the payload step's decision: the payload as read, the trees
// picked for the family, and what they add to the worker's environment.
type Outcome struct {
	Payload   *Payload
	Selection *Selection
	From      string         // where the payload root came from
	Edits     []environ.Edit `json:"-"`
}

// Refusal is a payload that cannot serve this container: exit code 78.
type Refusal struct{ Err error }

func (e *Refusal) Error() string { return e.Err.Error() }
func (e *Refusal) Unwrap() error { return e.Err }

// ExitCode is EX_CONFIG.
func (e *Refusal) ExitCode() int { return 78 }

// ExitCode is EX_CANTCREAT: --install cannot write its destination.
func (e *DestError) ExitCode() int { return 73 }

// Run opens the payload and picks the trees for the family, then checks
// them against the image: a payload distribution that shadows the image's
// at another version is a warning; a capability whose evidence does not
// load is not granted. The payload is in the outcome even when no tree
// fits, for the report.
func Run(ctx context.Context, in Input) (*Outcome, error) {
	cfg := in.Config
	o := &Outcome{From: cfg.PayloadRootFrom}
	if err := in.Answers(cfg.PayloadRoot); err != nil {
		return o, &Refusal{fmt.Errorf("payload root %w (payload root from %s)", err, cfg.PayloadRootFrom)}
	}
	if err := guarded(cfg, in.Log); err != nil {
		return o, err
	}
	img := ImageAt("/", in.Env.Value("LD_LIBRARY_PATH"))
	img.CacheDir = in.StateDir
	var err error
	o.Payload, o.Selection, err = choose(cfg.PayloadRoot, cfg.PayloadRootFrom, in.Family, img, in.Log)
	if err != nil {
		return o, &Refusal{err}
	}
	o.Edits = o.Selection.Env()
	line, all := o.Selection.EnvSummary(cfg.PayloadRoot)
	in.Log.Info(line, "detail", all)
	return o, nil
}

// guarded checks that nobody but root and infera-exec's uid can change
// the payload root (statedir.Guarded, the state directory's rules): its
// trees go first on the worker's PYTHONPATH, PATH and LD_LIBRARY_PATH,
// so another uid that can rename it, or write into it, chooses the code
// root runs. That is a warning; a refusal (78) when the deployment
// requires patches or native capabilities, whose promise such a payload
// cannot keep. A root that does not exist is left to Open to report.
func guarded(cfg config.Config, log *slog.Logger) error {
	var se *statedir.Error
	err := statedir.Guarded(cfg.PayloadRoot)
	if err == nil || !errors.As(err, &se) || !se.Unsafe {
		return nil
	}
	euid := os.Geteuid()
	msg := fmt.Sprintf("payload root %s (from %s) can be changed by another uid than root and %d: %s; that uid could replace what the worker imports and loads. Make the payload root and every directory above it owned by root (or uid %d) and not writable by group or others (chmod go-w), or install the payload with --install",
		cfg.PayloadRoot, cfg.PayloadRootFrom, euid, se.Reason(), euid)
	// The text line: what, where, and the fix in a few words.
	what := fmt.Sprintf("payload root %s can be changed by another uid: %s", cfg.PayloadRoot, se.Reason())
	var by []string
	if len(cfg.RequirePatches) > 0 {
		by = append(by, "INFERA_REQUIRE_PATCHES")
	}
	if !cfg.RequireNative.None() || cfg.RequireNative.Auto {
		by = append(by, "INFERA_REQUIRE_NATIVE")
	}
	if len(by) > 0 {
		return &Refusal{logging.WithBrief(fmt.Errorf("%s (refused: %s is set, and such a payload cannot keep its promise)", msg, strings.Join(by, " and ")),
			fmt.Sprintf("%s; refused: %s is set", what, strings.Join(by, " and ")))}
	}
	log.Warn(what+"; chmod go-w it and the directories above, or --install it", "detail", msg)
	return nil
}

// briefed is full, the error err wrapped with where the payload root
// came from, with the text line err's brief (the payload, what it
// lacks), and the fix in a few words when hint says one; full itself
// when err has no brief and there is no hint.
func briefed(full, err error, hint string) error {
	var b logging.Briefer
	if hint == "" && !errors.As(err, &b) {
		return full
	}
	msg, _ := logging.ErrorRecord(err)
	if hint != "" {
		msg += " (" + hint + ")"
	}
	return logging.WithBrief(full, msg)
}

// choose opens the payload at root (from says where that root came from)
// and picks the trees for the family, then checks them against the image.
func choose(root, from string, f abi.Family, img Image, log *slog.Logger) (*Payload, *Selection, error) {
	// An error of the payload's own with a brief (Briefer) is said by
	// that brief; where the payload root came from is then in the
	// record's detail, as the rest of the reason.
	pl, err := Open(root)
	if err != nil {
		return nil, nil, briefed(fmt.Errorf("%w (payload root from %s)", err, from), err, "")
	}
	sel, err := pl.Select(f)
	if err != nil {
		hint, brief := rootHint(root, pl)
		return pl, nil, briefed(fmt.Errorf("%w (payload root from %s%s)", err, from, hint), err, brief)
	}
	if img.IndexFile == "" {
		if _, err := os.Stat(filepath.Join(root, IndexName)); err == nil {
			img.IndexFile = filepath.Join(root, IndexName)
		}
	}
	sel.Image = img
	sel.Shadows = Shadows(sel.PythonPath, img.Root, f.Python.Version())
	for _, sh := range sel.Shadows {
		sel.Warnings = append(sel.Warnings, sh.String())
	}
	log.Info("python tree " + sel.PyTree)
	if sel.Native == nil && !f.ROCm.Found {
		log.Info("no native tree: " + sel.NoNativeWhy)
	}
	for _, w := range sel.Warnings {
		log.Warn(w)
	}
	return pl, sel, nil
}

// Env is what the selection adds to the worker's environment: its
// directories first on PATH, PYTHONPATH and LD_LIBRARY_PATH.
func (s *Selection) Env() []environ.Edit {
	return []environ.Edit{
		pathDefault(),
		environ.Prepend("PATH", s.Path...),
		environ.Prepend("PYTHONPATH", s.PythonPath...),
		environ.Prepend("LD_LIBRARY_PATH", s.LibraryPath...),
	}
}

// WorkerPath is the PATH the worker will get before any tree is picked:
// the payload's bin/ first. The ABI step resolves the interpreter on it;
// Env adds the same directory, so both agree.
func WorkerPath(env *environ.Env, root string) string {
	e := env.Clone()
	e.Apply(pathDefault(), environ.Prepend("PATH", BinDir(root)))
	return e.Value("PATH")
}

// pathDefault gives PATH execvp's default when it is unset, so that the
// payload's directories are added to it rather than replacing it.
func pathDefault() environ.Edit { return environ.SetDefault("PATH", lookpath.DefaultPath) }

// EnvSummary is the log line for Env, the directories under root named
// from it (root said once at the end), and the same with every
// directory whole for the record's detail.
func (s *Selection) EnvSummary(root string) (line, detail string) {
	var short, whole []string
	under := false
	for _, v := range []struct {
		name string
		dirs []string
	}{{"PYTHONPATH", s.PythonPath}, {"LD_LIBRARY_PATH", s.LibraryPath}, {"PATH", s.Path}} {
		if len(v.dirs) == 0 {
			continue
		}
		var rel []string
		for _, d := range v.dirs {
			if r, err := filepath.Rel(root, d); err == nil && root != "" && filepath.IsLocal(r) {
				d, under = r, true
			}
			rel = append(rel, d)
		}
		short = append(short, v.name+" += "+strings.Join(rel, ":"))
		whole = append(whole, v.name+" += "+strings.Join(v.dirs, ":"))
	}
	line, detail = "environment: "+strings.Join(short, "; "), "environment: "+strings.Join(whole, "; ")
	if under {
		line += " (in " + root + ")"
	}
	return line, detail
}

// BinDir is the payload's bin/, which goes first on the worker's PATH.
func BinDir(root string) string { return filepath.Join(root, "bin") }

// rootHint says how to point infera-exec at its payload when the root it
// used holds no payload at all: the binary copied out of its payload, or
// PAYLOAD_ROOT naming the payload's bin/ directory.
// brief is the same in a few words, for the text line.
func rootHint(root string, pl *Payload) (hint, brief string) {
	if len(pl.PyTrees) > 0 || len(pl.NativeTrees) > 0 {
		return "", ""
	}
	hint = "; it holds no payload trees"
	if filepath.Base(root) == "bin" {
		hint += "; it is a bin/ directory: the payload root is its parent, " + filepath.Dir(root)
		brief = "a bin/ directory: set PAYLOAD_ROOT to its parent"
	} else {
		brief = "set PAYLOAD_ROOT, or run the payload's bin/ copy"
	}
	return hint + "; run infera-exec from its payload's bin/ (the root is then found from the binary), or set PAYLOAD_ROOT to the directory that holds bin/ and the py3XX/ trees", brief
}

// Fields and WriteText render the outcome in the report and --explain.
func (o *Outcome) Fields() []report.Field {
	return []report.Field{{Key: "payload", Value: o.Payload}, {Key: "trees", Value: o.Selection}}
}

func (o *Outcome) WriteText(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	if pl := o.Payload; pl != nil {
		p("Payload: %s (%s)", pl.Root, o.From)
		p("  python trees present: %s", orNone(pl.PyTrees))
		var natives []string
		for _, t := range pl.NativeTrees {
			declared := "none"
			if len(t.Declared) > 0 {
				declared = strings.Join(t.Declared, " ")
			}
			natives = append(natives, fmt.Sprintf("%s [%s]", t.Name, declared))
		}
		p("  native trees present: %s", orNone(natives))
	}
	t := o.Selection
	if t == nil {
		return
	}
	p("  python tree: %s", t.PyTree)
	if t.Native != nil {
		p("  native tree: %s", t.Native.Dir)
	} else {
		p("  native tree: none: %s", t.NoNativeWhy)
	}
	for _, w := range t.Warnings {
		p("  warning: %s", w)
	}
	if len(t.Considered) > 0 {
		p("  trees considered:")
	}
	for _, c := range t.Considered {
		mark := "  "
		switch {
		case c.Chosen:
			mark = "=>"
		case c.Matched:
			mark = " ~"
		}
		p("   %s %s (%s, %s): %s", mark, c.Name, c.Kind, c.Dir, c.Why)
	}
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}
