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
	"github.com/infera/infera-exec/report"
)

// Input is what the capability step takes: the requirement as configured
// (INFERA_REQUIRE_NATIVE), the worker command, and the native tree the
// payload step chose for this container.
type Input struct {
	Requirement config.Requirement
	Args        workerargs.Args // the worker command, read once
	Tree        *Tree           // nil: no native tree
	Evidence    []Evidence      // why the tree's capabilities are declared
	// Load is the load check of the tree's ELF files against the image;
	// nil: none (no tree, or no check asked for).
	Load      *LoadInput
	NoTreeWhy string       // why there is none
	Available []Tree       // every native tree of the payload
	Env       *environ.Env // the container's environment as it started infera-exec: the engine's own switches
	Log       *slog.Logger
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
	if in.Log == nil {
		in.Log = slog.New(slog.DiscardHandler)
	}
	o := &Outcome{Provided: Set{}}
	if in.Tree != nil {
		tree := *in.Tree
		in.Tree = &tree // the load check may withdraw capabilities: the caller's tree stays as read
		in.Evidence = checkLoads(in, o)
		o.Tree, o.Provided, o.Evidence = in.Tree.Name, in.Tree.Caps, in.Evidence
		in.Log.Info(fmt.Sprintf("native tree %s (capabilities: %s)", in.Tree.Dir, in.Tree.Caps))
	}
	env := in.Env
	if env == nil {
		env = environ.New(nil)
	}
	o.Implied = Implied(in.Args, env)
	req := withImplied(in.Requirement, o.Implied)
	o.Requirement = req
	required, err := Check(req, in.Tree, in.NoTreeWhy, in.Available)
	var un *Unavailable
	if errors.As(err, &un) {
		un.SGLang = in.Args.Engine == workerargs.SGLang
		for _, e := range in.Evidence {
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
		if in.Tree != nil && in.Tree.Caps.Has(i.Capability) {
			continue
		}
		where := "there is no native tree (" + in.NoTreeWhy + ")"
		if in.Tree != nil {
			where = fmt.Sprintf("native tree %s does not provide it (it provides: %s)", in.Tree.Name, in.Tree.Caps)
		}
		if i.Optional {
			in.Log.Info(fmt.Sprintf("note: %s: GPU-direct L3 will stay off (the engine falls back to POSIX I/O) without %s, and %s; set %s=1 with a tree that has it to require it", i.Source, i.Capability, where, KvdAISVar))
			continue
		}
		if req.Auto {
			continue
		}
		in.Log.Warn(fmt.Sprintf("the worker's arguments imply %s (%s) but %s; set INFERA_REQUIRE_NATIVE=auto to refuse to start instead", i.Capability, i.Source, where))
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
func checkLoads(in Input, o *Outcome) []Evidence {
	if in.Load == nil {
		return in.Evidence
	}
	v := CheckLoads(*in.Load)
	o.Loads = v
	if v.Cached {
		in.Log.Debug("native tree load check: cached verdict (payload and libraries unchanged)")
	}
	ev := in.Evidence
	if ev != nil {
		before := in.Tree.Caps
		in.Tree.Caps, ev = ApplyLoads(in.Tree.Dir, ev, v)
		for _, e := range ev {
			if r := e.Refusal(); r != "" && before.Has(e.Capability) {
				in.Log.Warn(fmt.Sprintf("capability %s of tree %s not granted: %s", e.Capability, in.Tree.Name, r))
			}
		}
	}
	switch {
	case v.Error != "":
		in.Log.Warn(fmt.Sprintf("native tree %s: load check failed: %s", in.Tree.Name, v.Error))
	case len(v.Failed) > 0 && ev == nil:
		in.Log.Warn(fmt.Sprintf("native tree %s: %d of %d ELF files do not load against the image: %s", in.Tree.Name, len(v.Failed), v.Checked, v.FirstFailure()))
	}
	return ev
}
