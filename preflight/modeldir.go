package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/weights"
	"github.com/infera/infera-exec/internal/workerargs"
	"golang.org/x/sys/unix"
)

// Load rates, from one measurement: a 1.5 TB checkpoint loads in about 8
// minutes from local NVMe and in about 95 minutes from NFS.
const (
	localLoadRate   = 1.5e12 / (8 * 60)  // bytes per second, ~3.1 GB/s
	networkLoadRate = 1.5e12 / (95 * 60) // bytes per second, ~0.26 GB/s

	// readyHeadroom: a loading estimate times this must fit the default
	// timeout, which also covers imports, compilation and warm-up; it is
	// also the margin of the suggested timeout.
	readyHeadroom = 1.5
)

// modelView is what the model-dir check reads from the model's
// filesystem: one operation, so that a filesystem that may not answer is
// asked once, by one helper, with one deadline.
type modelView struct {
	Missing  bool         `json:"missing,omitempty"`
	StatErr  string       `json:"stat_err,omitempty"`  // stat failed otherwise; the reason without the path
	NotModel bool         `json:"not_model,omitempty"` // neither a directory nor a GGUF file
	ListErr  string       `json:"list_err,omitempty"`
	Scan     weights.Scan `json:"scan"`
	OpenErr  string       `json:"open_err,omitempty"` // the first shard cannot be opened
	FS       FS           `json:"fs"`
	FSErr    string       `json:"fs_err,omitempty"`
	// Config is the directory's config.json, read in the same operation
	// (bounded: maxConfigBytes, a regular file opened without blocking);
	// ConfigErr says why it is not there.
	Config    []byte `json:"config,omitempty"`
	ConfigErr string `json:"config_err,omitempty"`
}

// maxConfigBytes caps config.json: a few KB for a text model, tens of KB
// for a multimodal one.
const maxConfigBytes = 512 << 10

// modelDirOp reads the model at an absolute path.
var modelDirOp = fsprobe.Define("model-dir", inspectModel)

func inspectModel(full string) (modelView, error) {
	var v modelView
	fi, err := os.Stat(full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		v.Missing = true
		return v, nil
	case err != nil:
		v.StatErr = boundedread.BareErr(err).Error()
		return v, nil
	}
	if fi.IsDir() {
		entries, err := os.ReadDir(full)
		if err != nil {
			v.ListErr = boundedread.BareErr(err).Error()
			return v, nil
		}
		v.Scan = weights.ScanDir(full, entries)
		if v.Config, err = boundedread.File(filepath.Join(full, "config.json"), maxConfigBytes); err != nil {
			v.Config, v.ConfigErr = nil, boundedread.BareErr(err).Error()
		}
	} else if fi.Mode().IsRegular() && weights.IsGGUF(full) {
		// A GGUF checkpoint may be given as the file itself.
		v.Scan = weights.Scan{Count: 1, Size: uint64(fi.Size()), Pattern: "a GGUF file", First: full}
	} else {
		v.NotModel = true
		return v, nil
	}
	if v.Scan.BadShard != "" {
		return v, nil
	}
	if v.FS, err = RealStatfs(full); err != nil {
		v.FSErr = err.Error()
	}
	if v.Scan.Count == 0 {
		return v, nil
	}
	// Without blocking: a FIFO named like a shard would hold the open.
	fd, err := unix.Open(v.Scan.First, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		v.OpenErr = boundedread.BareErr(&fs.PathError{Op: "open", Path: v.Scan.First, Err: err}).Error()
		return v, nil
	}
	unix.Close(fd)
	return v, nil
}

func checkModelDir(in *Facts) Result {
	arg, source := in.Args.Model, in.Args.ModelFrom
	if source == "" {
		return skipped("no --model, --model-path or serve argument in the command")
	}
	if !workerargs.IsModelPath(arg) {
		return skipped(fmt.Sprintf("%s (%s) is not a path (absolute, ./ or ../): a Hugging Face repository id, nothing to check", arg, source))
	}
	full, shown := arg, arg
	if !filepath.IsAbs(arg) {
		// Relative to the directory the worker runs in.
		full = filepath.Join(in.Chdir, arg)
		shown = fmt.Sprintf("%s (%s)", arg, full)
	}
	// Everything that touches the model's filesystem is one operation,
	// run in a helper with the deadline when that filesystem may not
	// answer (model weights often live on NFS or FUSE).
	v, acc, err := in.modelView(full)
	var dl *fsprobe.DeadlineError
	switch {
	case errors.As(err, &dl):
		return unanswered(in, "the model directory", dl)
	case err != nil:
		return fail(Warn, fmt.Sprintf("%s (%s) could not be checked: %v", shown, source, err),
			"The check could not look at the model directory.",
			"Look at the model volume by hand; to silence this, INFERA_PREFLIGHT_SKIP=model-dir.")
	case v.Missing:
		return fail(Error, fmt.Sprintf("%s (%s) does not exist", shown, source),
			"The worker would spend its slow start importing the engine, then "+
				"fail to load the model with an error that does not name the "+
				"mount, and restart in a loop.",
			"Check the model volume (mountPath, subPath, claim) and the path in "+
				"the command: the directory must exist inside the container.")
	case v.StatErr != "":
		return unreadableModel(fmt.Sprintf("%s (%s) cannot be read: %s", shown, source, v.StatErr))
	case v.NotModel:
		return fail(Error, fmt.Sprintf("%s (%s) is not a directory", shown, source),
			"The engine loads a model from a directory holding config.json and "+
				"the weight files; only a GGUF checkpoint may be a single file.",
			fmt.Sprintf("Point %s at the model's directory.", source))
	case v.ListErr != "":
		return unreadableModel(fmt.Sprintf("%s (%s) cannot be listed: %s", shown, source, v.ListErr))
	}
	scan := v.Scan
	if scan.BadShard != "" {
		return unreadableModel(fmt.Sprintf("%s: weight file %s cannot be read: %s", shown, scan.BadShard, scan.BadReason))
	}

	fsys, fsErr := v.FS, v.FSErr
	if in.Statfs != nil {
		var err error
		if fsys, err = in.Statfs(full); err != nil {
			fsErr = err.Error()
		}
	}
	where := fsys.Type
	switch {
	case acc.Helper && acc.Mount.FSType != "":
		// The mount table names a remote filesystem better than its
		// magic does: nfs4 from srv:/export, fuse.s3fs.
		where = acc.Mount.Describe()
	case fsErr != "":
		where = "an unknown filesystem"
	}
	if scan.Count == 0 {
		return fail(Warn, fmt.Sprintf("%s on %s: no weight files (%s) in it or one level down", shown, where, weights.Patterns),
			"The engine would find nothing to load and fail after its slow "+
				"start. A directory without weights is usually an unfinished "+
				"download, or the volume's parent or sibling of the model.",
			fmt.Sprintf("Point %s at the directory holding config.json and the "+
				"weight files, and check that the download finished.", source))
	}
	if v.OpenErr != "" {
		return unreadableModel(fmt.Sprintf("%s: weight file %s cannot be read: %s", shown, scan.First, v.OpenErr))
	}

	shards := fmt.Sprintf("%d shards (%s)", scan.Count, scan.Pattern)
	if scan.Count == 1 {
		shards = fmt.Sprintf("1 shard (%s)", scan.Pattern)
	}
	if scan.Subdirs {
		shards += " in subdirectories"
	}
	seen := fmt.Sprintf("%s on %s, %s, %s", shown, where, shards, formatGB(scan.Size))

	rate, medium := localLoadRate, "from local disk"
	if fsys.Network {
		rate, medium = networkLoadRate, "over the network"
	}
	est := time.Duration(float64(scan.Size) / rate * float64(time.Second))
	timeout := in.ReadyTimeout
	limit := float64(timeout)
	if in.ReadyDefault {
		limit /= readyHeadroom
	}
	estimate := fmt.Sprintf("estimated load %s at ~%.2g GB/s %s", formatDuration(est), rate/1e9, medium)
	if est.Seconds() <= limit {
		if fsys.Network {
			seen += "; " + estimate
		}
		return pass(seen)
	}

	setting := fmt.Sprintf("INFERA_ENGINE_READY_TIMEOUT is %s", formatDuration(time.Duration(timeout)*time.Second))
	if in.ReadyDefault {
		setting += " (the default)"
	}
	var why string
	if fsys.Network {
		why = "Weights load slowly over the network: a 1.5 TB checkpoint takes " +
			"about 95 minutes from NFS against 8 from local NVMe. "
	} else {
		why = fmt.Sprintf("Even from local disk %s take a while to load. ", formatGB(scan.Size))
	}
	if est.Seconds() > float64(timeout) {
		why += "The worker would time out mid-load and restart forever, loading again each time."
	} else {
		why += "The estimate leaves little of the timeout for the engine's " +
			"imports, compilation and warm-up: a slower day times the worker " +
			"out mid-load, and it restarts forever."
	}
	suggest := time.Duration(math.Ceil(est.Seconds()*readyHeadroom/300)*300) * time.Second
	do := fmt.Sprintf("Set INFERA_ENGINE_READY_TIMEOUT=%s (the estimate plus half)", formatDuration(suggest))
	if fsys.Network {
		do += fmt.Sprintf(", or copy the model to a local disk (a local volume on NVMe) and point %s there.", source)
	} else {
		do += "."
	}
	return fail(Warn, seen+"; "+estimate+"; "+setting, why, do)
}

func unreadableModel(seen string) Result {
	return fail(Error, seen,
		"The worker runs as this same user and could not read the weights "+
			"either; it would fail at load, after its slow start.",
		"Make the model volume readable by the container's user: fsGroup or "+
			"runAsUser in the pod's securityContext, or the files' owner and "+
			"modes.")
}

// pathErr is the reason of a path error without the path, which the
// message already names.

// formatGB is a byte count in decimal gigabytes, as checkpoint sizes are
// quoted.
func formatGB(n uint64) string {
	gb := float64(n) / 1e9
	switch {
	case gb < 10:
		return fmt.Sprintf("%.2f GB", gb)
	case gb < 100:
		return fmt.Sprintf("%.1f GB", gb)
	}
	return fmt.Sprintf("%.0f GB", gb)
}

// formatDuration is d the way INFERA_ENGINE_READY_TIMEOUT accepts it and a
// person reads it: 40s, 8m, 1h35m, 2h.
func formatDuration(d time.Duration) string {
	if s := int(math.Ceil(d.Seconds())); s < 60 {
		return fmt.Sprintf("%ds", s)
	}
	m := int(d.Round(time.Minute) / time.Minute)
	switch {
	case m < 60:
		return fmt.Sprintf("%dm", m)
	case m%60 == 0:
		return fmt.Sprintf("%dh", m/60)
	}
	return fmt.Sprintf("%dh%dm", m/60, m%60)
}
