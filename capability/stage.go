package capability

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/workerargs"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/report"
)

// Input is what the capability step takes: the requirement as configured
// (INFERA_REQUIRE_NATIVE), the worker command, and the payload step's
// outcome: the payload's native trees, with what each declares, and the
// one chosen for this container.
type Input struct {
	Requirement config.Requirement
	Args        workerargs.Args  // the worker command, read once
	Trees       *overlay.Outcome // the payload step's outcome
	Env         *environ.Env     // the container's environment as it started infera-exec: the engine's own switches
	Log         *slog.Logger
}

// trees is what the step decides on: the chosen tree with its
// capabilities as its evidence grants them, the load check to run on it,
// and every native tree of the payload (for messages).
type trees struct {
	Tree      *Tree      // nil: no native tree
	Evidence  []Evidence // per declared capability, what was found; nil for a v0.2.2 tree
	Load      *LoadInput // the load check of the tree's ELF files against the image; nil: none
	NoTreeWhy string     // why there is none
	Available []Tree     // every native tree of the payload
}

// treesOf checks each native tree's declaration: a manifest tree is
// granted the capabilities whose evidence globs all match files inside
// it; a v0.2.2 tree, what its CAPABILITIES file names.
func treesOf(o *overlay.Outcome) trees {
	var t trees
	if o == nil || o.Payload == nil || o.Selection == nil {
		return t
	}
	sel := o.Selection
	t.NoTreeWhy = sel.NoNativeWhy
	for i := range o.Payload.NativeTrees {
		n := &o.Payload.NativeTrees[i]
		tree := Tree{Name: n.Name, Dir: n.Dir, Caps: newSet(slices.Clone(n.Declared))}
		var ev []Evidence
		if n.Evidence != nil {
			tree.Caps, ev = Verify(n.Dir, n.Evidence)
		}
		t.Available = append(t.Available, tree)
		if sel.Native != nil && sel.Native.Dir == n.Dir {
			t.Tree, t.Evidence = &t.Available[len(t.Available)-1], ev
		}
	}
	if t.Tree != nil {
		chosen := *t.Tree
		t.Tree = &chosen // the load check may withdraw capabilities: the payload's list stays as declared
		img := sel.Image
		t.Load = &LoadInput{Dir: chosen.Dir, ImageRoot: img.Root, LibraryPath: append(slices.Clone(sel.LibraryPath), img.LibraryPath...), IndexFile: img.IndexFile, CacheDir: img.CacheDir}
	}
	return t
}

// Outcome is the step's section of the report.
type Outcome struct {
	Tree        string             `json:"tree,omitempty"`
	Provided    Set                `json:"provided"`
	Evidence    []Evidence         `json:"evidence,omitempty"`
	Implied     []Implication      `json:"implied,omitempty"`    // by the worker's arguments
	Loads       *LoadVerdict       `json:"load_check,omitempty"` // the tree's ELF files against the image
	Requirement config.Requirement `json:"requirement"`
	Required    Set                `json:"required"`
}

// Run checks the requirement, with what the worker's arguments imply,
// against the tree. It returns an *Unavailable error when a required
// capability is missing; the outcome is returned either way.
func Run(ctx context.Context, in Input) (*Outcome, error) {
	return decide(in, treesOf(in.Trees))
}

// decide is Run on the trees as checked.
func decide(in Input, t trees) (*Outcome, error) {
	if in.Log == nil {
		in.Log = slog.New(slog.DiscardHandler)
	}
	o := &Outcome{Provided: Set{}}
	if t.Tree != nil {
		for _, e := range t.Evidence {
			if !e.Granted {
				in.Log.Warn(fmt.Sprintf("capability %s of tree %s not granted: %s has no file matching %s", e.Capability, t.Tree.Name, t.Tree.Dir, strings.Join(e.Missing, ", ")), "event", "capability", "capability", e.Capability)
			}
		}
		t.Evidence = checkLoads(in.Log, t, o)
		o.Tree, o.Provided, o.Evidence = t.Tree.Name, t.Tree.Caps, t.Evidence
		in.Log.Info(fmt.Sprintf("native tree %s (capabilities: %s)", t.Tree.Dir, t.Tree.Caps))
	}
	env := in.Env
	if env == nil {
		env = environ.New(nil)
	}
	o.Implied = Implied(in.Args, env)
	req := withImplied(in.Requirement, o.Implied)
	o.Requirement = req
	required, err := Check(req, t.Tree, t.NoTreeWhy, t.Available)
	var un *Unavailable
	if errors.As(err, &un) {
		un.SGLang = in.Args.Engine == workerargs.SGLang
		for _, e := range t.Evidence {
			if why := e.Refusal(); why != "" && slices.Contains(un.Missing, e.Capability) {
				if un.Withdrawn == nil {
					un.Withdrawn = map[string]string{}
				}
				un.Withdrawn[e.Capability] = why
			}
		}
	}
	if err != nil {
		return o, err
	}
	o.Required = required
	if !req.None() {
		in.Log.Info(fmt.Sprintf("required capabilities present: %s (INFERA_REQUIRE_NATIVE=%s)", required, req.Raw))
	}
	// What the arguments imply but nobody required: the worker may still
	// serve (a test without PD), so a warning that says how to refuse.
	for _, i := range o.Implied {
		if t.Tree != nil && t.Tree.Caps.Has(i.Capability) {
			continue
		}
		// The text line says where in a few words; the record's detail why.
		where, short := "there is no native tree ("+t.NoTreeWhy+")", "there is no native tree"
		if t.Tree != nil {
			where = fmt.Sprintf("native tree %s does not provide it (it provides: %s)", t.Tree.Name, t.Tree.Caps)
			short = t.Tree.Name + " lacks it"
		}
		if i.Optional {
			in.Log.Info(fmt.Sprintf("note: %s: GPU-direct L3 stays off without %s (%s)", i.Source, i.Capability, short),
				"event", "capability", "capability", i.Capability,
				"detail", fmt.Sprintf("the engine falls back to POSIX I/O without %s, and %s; set %s=1 with a tree that has it to require it", i.Capability, where, KvdAISVar))
			continue
		}
		if req.Auto {
			continue
		}
		in.Log.Warn(fmt.Sprintf("%s implied by %s but %s; INFERA_REQUIRE_NATIVE=auto refuses", i.Capability, i.Source, short),
			"event", "capability", "capability", i.Capability, "detail", where+"; set INFERA_REQUIRE_NATIVE=auto to refuse to start instead")
	}
	return o, nil
}

// Fields and WriteText render the outcome in the report and --explain.
func (o *Outcome) Fields() []report.Field { return []report.Field{{Key: "capabilities", Value: o}} }

func (o *Outcome) WriteText(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("Capabilities: provided %s; required %s (INFERA_REQUIRE_NATIVE=%q)", o.Provided, o.Required, o.Requirement.Raw)
	for _, e := range o.Evidence {
		state := "granted"
		if !e.Granted {
			state = "NOT granted, missing " + strings.Join(e.Missing, ", ")
		}
		var found []string
		for _, g := range e.Globs {
			if f, ok := e.Found[g]; ok {
				found = append(found, g+" -> "+strings.Join(f, " "))
			}
		}
		if len(found) > 0 {
			state += "; found " + strings.Join(found, ", ")
		}
		p("  %s: %s", e.Capability, state)
	}
	for _, i := range o.Implied {
		p("  implied by the worker's arguments: %s (%s)", i.Capability, i.Source)
	}
}

// checkLoads runs the load check on the tree and withdraws the
// capabilities whose evidence does not load; it returns the evidence as
// it then stands. Trees of the v0.2.2 layout name no evidence: a file
// that does not load is a warning.
func checkLoads(log *slog.Logger, t trees, o *Outcome) []Evidence {
	if t.Load == nil {
		return t.Evidence
	}
	v := CheckLoads(*t.Load)
	o.Loads = v
	if v.Cached {
		log.Debug("native tree load check: cached verdict (payload and libraries unchanged)")
	}
	ev := t.Evidence
	if ev != nil {
		before := t.Tree.Caps
		t.Tree.Caps, ev = ApplyLoads(t.Tree.Dir, ev, v)
		for _, e := range ev {
			if r := e.Refusal(); r != "" && before.Has(e.Capability) {
				log.Warn(fmt.Sprintf("capability %s of tree %s not granted: %s", e.Capability, t.Tree.Name, e.RefusalBrief()), "event", "capability", "capability", e.Capability, "detail", r)
			}
		}
	}
	switch {
	case v.Error != "":
		log.Warn(fmt.Sprintf("native tree %s: load check failed: %s", t.Tree.Name, v.Error))
	case len(v.Failed) > 0 && ev == nil:
		log.Warn(fmt.Sprintf("native tree %s: %d of %d ELF files do not load against the image: %s", t.Tree.Name, len(v.Failed), v.Checked, v.FirstFailure()))
	}
	return ev
}
