package libionic

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/rdma"
)

// Outcome is the host-provider step's section of the report: what the
// swap decided, and the RDMA devices the container can see.
type Outcome struct {
	Swap *Result         `json:"swap"`
	RDMA *rdma.Inventory `json:"rdma"`
}

// Heading and TextLines render the outcome in --explain.
func (o *Outcome) Heading() (name, state, summary string) {
	return "host libionic", o.Swap.State, o.Swap.Summary
}

func (o *Outcome) TextLines() []string {
	var out []string
	for _, c := range o.Swap.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		out = append(out, fmt.Sprintf("%s %s: %s", mark, c.Name, c.Detail))
	}
	if o.Swap.HostABI != nil || o.Swap.ContainerABI != nil {
		out = append(out, fmt.Sprintf("provider kernel ABI range: host build %s, container's %s", o.Swap.HostABI, o.Swap.ContainerABI))
	}
	if o.RDMA != nil {
		out = append(out, o.RDMA.Lines()...)
	}
	return out
}

// Run swaps the host's RDMA provider in when the host mounts it, reads
// the container's RDMA devices either way, logs what it did, and returns
// the environment the worker needs for the route taken.
func Run(ctx context.Context, opt Options, log *slog.Logger) (*Outcome, []environ.Edit) {
	// The host mount and sysfs are read without a deadline: a host path on
	// a filesystem that does not answer is not used.
	if opt.Answers != nil {
		if err := opt.Answers(opt.Host, opt.Sysfs, rdma.DevDir); err != nil {
			o := Unanswered(err)
			log.Warn("host libionic: " + o.Swap.Summary)
			return o, nil
		}
	}
	if opt.RDMA == nil && opt.Sysfs != "" {
		opt.RDMA = rdma.Read(opt.Sysfs, rdma.DevDir)
	}
	res := Swap(ctx, opt)
	o := &Outcome{Swap: res, RDMA: opt.RDMA}
	switch res.State {
	case "not-mounted":
		if opt.Explicit {
			// Set on purpose and absent: most often a typo in the
			// volume's mountPath or the variable.
			log.Warn(fmt.Sprintf("host libionic: INFERA_HOST_LIBIONIC=%s does not exist (a typo in the variable or the volume's mount path?); the container's provider is used", opt.Host))
		} else {
			log.Debug(res.Summary)
		}
	case "replaced":
		// The line operators grep for, one per file.
		for _, f := range res.Replaced {
			log.Info(fmt.Sprintf("replaced %s with the host libionic build", f))
		}
		for _, f := range res.Created {
			log.Info(fmt.Sprintf("created %s for the host libionic build", f))
		}
	case "unchanged", "planned", "fallback":
		log.Info("host libionic: " + res.Summary)
	default: // refused, no-route
		log.Warn("host libionic: " + res.Summary)
	}
	for _, w := range res.Warnings {
		log.Warn("host libionic: " + w)
	}
	for _, n := range res.Notes {
		log.Info("host libionic: " + n)
	}
	return o, fallbackEdits(res)
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

// ProviderABI is the kernel ABI range of the provider build that will
// serve an RDMA device: the host build when this step put it in place,
// else the container's own (read from root). Devices of other providers
// are not ours to judge (ok false).
func ProviderABI(o *Outcome, root, name string) func(ibdev string) (min, max uint32, ok bool) {
	// The container's provider is one file for every device: read it once,
	// not once per NIC.
	type abiRange struct {
		min, max uint32
		ok       bool
	}
	container := sync.OnceValue(func() abiRange {
		// The swap step read it already when the host build was mounted.
		if o != nil && o.Swap != nil && o.Swap.ContainerABI != nil {
			return abiRange{o.Swap.ContainerABI.Min, o.Swap.ContainerABI.Max, true}
		}
		lo, hi, ok := ProviderRange(root, name)
		return abiRange{lo, hi, ok}
	})
	return func(ibdev string) (uint32, uint32, bool) {
		if !strings.HasPrefix(ibdev, name) {
			return 0, 0, false
		}
		if o != nil && o.Swap.HostABI != nil {
			switch o.Swap.State {
			case "replaced", "fallback", "unchanged", "planned":
				return o.Swap.HostABI.Min, o.Swap.HostABI.Max, true
			}
		}
		r := container()
		return r.min, r.max, r.ok
	}
}

// Unanswered is the outcome when the host mount or sysfs did not answer
// within the deadline: the container's own provider is used and no RDMA
// device is read.
func Unanswered(err error) *Outcome {
	return &Outcome{Swap: &Result{State: "unanswered",
		Summary: fmt.Sprintf("%v; the container's provider is used, RDMA devices not read", err)}}
}
