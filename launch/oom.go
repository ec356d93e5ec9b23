package launch

import (
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/memcg"
	"github.com/infera/infera-exec/internal/weights"
	"github.com/infera/infera-exec/internal/workerargs"
)

// OOMWatch is what the init reads to say why a worker died of SIGKILL:
// the container's memory cgroup counts the processes its OOM killer
// ended, so a count that rose while the worker ran names the killer. A
// bare SIGKILL is otherwise all a pod's log shows ("-9"), whether the
// kernel ran out of the pod's memory or something else sent it.
type OOMWatch struct {
	// Cgroup is the cgroup filesystem's root (SYSFS_PATH/fs/cgroup); ""
	// watches nothing.
	Cgroup string
	// Probe touches the model directory, with the deadline when its
	// filesystem may not answer (nil: directly, for tests).
	Probe *fsprobe.Prober
}

// modelWeightsOp sizes the model's weight files, once the worker is
// gone: the model may sit on NFS, and a dead server must not keep the
// init from exiting.
var modelWeightsOp = fsprobe.Define("model-weights", weights.Read)

// oomCount is the OOM-kill count read before the worker started.
type oomCount struct {
	group memcg.Group
	n     uint64
	ok    bool
}

func (w OOMWatch) count() oomCount {
	if w.Cgroup == "" {
		return oomCount{}
	}
	g := memcg.Find(w.Cgroup)
	n, _, ok := g.OOMKills()
	return oomCount{group: g, n: n, ok: ok}
}

// explain is the line that says the OOM killer ended the worker, with
// the container's limit and the model's size on disk; "" when the worker
// did not die of SIGKILL or the count did not rise.
func (w OOMWatch) explain(before oomCount, s InitSpec, out InitOutcome) string {
	if out.Signal != syscall.SIGKILL || !before.ok {
		return ""
	}
	after, _, ok := before.group.OOMKills()
	if !ok || after <= before.n {
		return ""
	}
	limit := "memory limit is unknown"
	if lim, from, ok := before.group.Limit(); !ok {
		limit += " (" + from + ")"
	} else if lim == 0 {
		limit = fmt.Sprintf("memory is not limited (%s)", filepath.Base(from))
	} else {
		limit = fmt.Sprintf("memory limit is %s (%s)", size(lim), filepath.Base(from))
	}
	return fmt.Sprintf("init: the worker (pid %d) was killed by the kernel's OOM killer (SIGKILL; its memory cgroup %s counted %d OOM kill(s) while it ran): the container's %s; %s; exit %d",
		out.PID, before.group.Dir, after-before.n, limit, w.modelSize(s), out.Code)
}

// modelSize says how large the worker's model is on disk, as the engine
// would load it, or why that is not known.
func (w OOMWatch) modelSize(s InitSpec) string {
	a := workerargs.Parse(s.Argv)
	switch {
	case a.ModelFrom == "":
		return "the command names no model"
	case !workerargs.IsModelPath(a.Model):
		return fmt.Sprintf("the model %s is a hub id, its size on disk is not known here", a.Model)
	}
	full := a.Model
	if !filepath.IsAbs(full) {
		full = filepath.Join(s.Dir, full)
	}
	scan, _, err := fsprobe.Call(w.Probe, modelWeightsOp, full, full)
	switch {
	case err != nil:
		return fmt.Sprintf("the model directory %s could not be read: %v", full, err)
	case scan.Count == 0:
		return fmt.Sprintf("the model directory %s holds no weight files (%s)", full, weights.Patterns)
	}
	return fmt.Sprintf("the model %s holds %s in %d %s file(s)", full, size(scan.Size), scan.Count, scan.Pattern)
}

// size is a byte count as an operator compares it with a pod's limit:
// Gi or Mi when it is a whole number of them (how limits are written),
// else GB.
func size(n uint64) string {
	switch {
	case n > 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGi", n>>30)
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMi", n>>20)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
}
