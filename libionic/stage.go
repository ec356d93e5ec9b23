package libionic

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/rdma"
	"github.com/infera/infera-exec/internal/statedir"
	"github.com/infera/infera-exec/report"
)

// Input is what the host-provider step takes: the decided configuration,
// the state directory the run picked (the read-only route's first
// place), and the container's root ("/" except in tests).
type Input struct {
	Config   config.Config
	StateDir string
	Root     string
	// Answers says whether the filesystems of paths answer in time; nil:
	// do not ask.
	Answers func(paths ...string) error
	DryRun  bool
	Log     *slog.Logger
}

// Outcome is the host-provider step's section of the report: what the
// swap decided, and the RDMA devices the container can see.
type Outcome struct {
	Swap *Result         `json:"swap"`
	RDMA *rdma.Inventory `json:"rdma"`
	// Edits is the environment the worker needs for the route taken:
	// RDMAV_DRIVERS for the read-only route, nothing else.
	Edits []environ.Edit `json:"-"`

	root, name string
	container  func() abiRange
}

// Fields and WriteText render the outcome in the report and --explain.
func (o *Outcome) Fields() []report.Field { return []report.Field{{Key: "libionic", Value: o}} }

func (o *Outcome) WriteText(w io.Writer) {
	var lines []string
	for _, c := range o.Swap.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		lines = append(lines, fmt.Sprintf("%s %s: %s", mark, c.Name, c.Detail))
	}
	if o.Swap.HostABI != nil || o.Swap.ContainerABI != nil {
		lines = append(lines, fmt.Sprintf("provider kernel ABI range: host build %s, container's %s", o.Swap.HostABI, o.Swap.ContainerABI))
	}
	if o.RDMA != nil {
		lines = append(lines, o.RDMA.Lines()...)
	}
	report.WriteHeading(w, "host libionic", string(o.Swap.State), o.Swap.Summary, lines)
}

// Run swaps the host's RDMA provider in when the host mounts it, reads
// the container's RDMA devices either way, and logs what it did. It never
// refuses the start: a host build that would not load leaves the
// container's provider in place.
func Run(ctx context.Context, in Input) (*Outcome, error) {
	cfg, log := in.Config, in.Log
	opt := Options{
		Host: cfg.HostLibionic, Name: cfg.RDMAProvider, Root: in.Root, Sysfs: cfg.Sysfs, Answers: in.Answers,
		FallbackDirs: statedir.ProviderDirs(in.StateDir, cfg.StateDir),
		DryRun:       in.DryRun, Explicit: cfg.HostLibionicSet,
	}
	o := run(ctx, opt, log)
	o.bind(in.Root, cfg.RDMAProvider)
	return o, nil
}

// bind makes ProviderABI answer for provider name under root: the
// container's range is read once, and not at all when the swap read it.
func (o *Outcome) bind(root, name string) {
	o.root, o.name = root, name
	o.container = sync.OnceValue(func() abiRange {
		if o.Swap != nil && o.Swap.ContainerABI != nil {
			return abiRange{o.Swap.ContainerABI.Min, o.Swap.ContainerABI.Max, true}
		}
		lo, hi, ok := ProviderRange(o.root, o.name)
		return abiRange{lo, hi, ok}
	})
}

func run(ctx context.Context, opt Options, log *slog.Logger) *Outcome {
	// The host mount and sysfs are read without a deadline: a host path on
	// a filesystem that does not answer is not used.
	if opt.Answers != nil {
		if err := opt.Answers(opt.Host, opt.Sysfs, rdma.DevDir); err != nil {
			o := unanswered(err)
			log.Warn("host libionic: " + o.Swap.Summary)
			return o
		}
	}
	if opt.RDMA == nil && opt.Sysfs != "" {
		opt.RDMA = rdma.Read(opt.Sysfs, rdma.DevDir)
	}
	res := Swap(ctx, opt)
	o := &Outcome{Swap: res, RDMA: opt.RDMA, Edits: fallbackEdits(res)}
	switch res.State {
	case NotMounted:
		if opt.Explicit {
			// Set on purpose and absent: most often a typo in the
			// volume's mountPath or the variable.
			log.Warn(fmt.Sprintf("host libionic: INFERA_HOST_LIBIONIC=%s does not exist (a typo in the variable or the volume's mount path?); the container's provider is used", opt.Host))
		} else {
			log.Debug(res.Summary)
		}
	case Replaced:
		// The line operators grep for, one per file.
		for _, f := range res.Replaced {
			log.Info(fmt.Sprintf("replaced %s with the host libionic build", f), "event", "libionic", "file", f)
		}
		for _, f := range res.Created {
			log.Info(fmt.Sprintf("created %s for the host libionic build", f), "event", "libionic", "file", f)
		}
	case Unchanged, Planned, Fallback:
		log.Info("host libionic: "+res.Brief(), "detail", res.Summary)
	default: // refused, no-route
		log.Warn("host libionic: "+res.Brief(), "detail", res.Summary)
	}
	for _, w := range res.Warnings {
		log.Warn("host libionic: " + w)
	}
	for i, n := range res.Notes {
		if b, ok := res.noteBriefs[i]; ok {
			log.Info("host libionic: "+b, "detail", n)
			continue
		}
		log.Info("host libionic: " + n)
	}
	return o
}

// fallbackEdits is the environment a route needs: RDMAV_DRIVERS for the
// read-only route, nothing else (no LD_LIBRARY_PATH entry).
func fallbackEdits(res *Result) []environ.Edit {
	var edits []environ.Edit
	if drivers, ok := res.Env["RDMAV_DRIVERS"]; ok {
		// Ours first; an operator's own entries stay after it.
		edits = append(edits, environ.Prepend("RDMAV_DRIVERS", drivers))
	}
	return edits
}

type abiRange struct {
	min, max uint32
	ok       bool
}

// ProviderABI is the kernel ABI range of the provider build that will
// serve an RDMA device: the host build when this step put it in place,
// else the container's own (read once, for every device). Devices of
// other providers are not ours to judge (ok false).
func (o *Outcome) ProviderABI(ibdev string) (min, max uint32, ok bool) {
	if !strings.HasPrefix(ibdev, o.name) {
		return 0, 0, false
	}
	if o.Swap != nil && o.Swap.HostABI != nil {
		switch o.Swap.State {
		case Replaced, Fallback, Unchanged, Planned:
			return o.Swap.HostABI.Min, o.Swap.HostABI.Max, true
		}
	}
	r := o.container()
	return r.min, r.max, r.ok
}

// ContainerProvider is the outcome of a run that swapped nothing (--doctor):
// the container's own provider serves every device.
func ContainerProvider(root, name string, inv *rdma.Inventory) *Outcome {
	o := &Outcome{Swap: &Result{State: NotMounted}, RDMA: inv}
	o.bind(root, name)
	return o
}

// unanswered is the outcome when the host mount or sysfs did not answer
// within the deadline: the container's own provider is used and no RDMA
// device is read.
func unanswered(err error) *Outcome {
	return &Outcome{Swap: &Result{State: Unanswered,
		Summary: fmt.Sprintf("%v; the container's provider is used, RDMA devices not read", err)}}
}
