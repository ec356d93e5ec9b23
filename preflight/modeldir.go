package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/fsprobe"
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

// shardGroups are the weight formats in the order an engine prefers them:
// a repository shipping both safetensors and .bin loads only the former.
var shardGroups = [...]struct {
	pattern string
	exts    []string
}{
	{"*.safetensors", []string{".safetensors"}},
	{"*.bin", []string{".bin"}},
	{"*.pt, *.pth", []string{".pt", ".pth"}},
	{"*.gguf", []string{".gguf"}},
}

const ggufGroup = 3 // index of *.gguf in shardGroups

const shardPatterns = "*.safetensors, *.bin, *.pt, *.pth, *.gguf"

func shardGroup(name string) int {
	ext := strings.ToLower(filepath.Ext(name))
	for i, g := range shardGroups {
		for _, e := range g.exts {
			if ext == e {
				return i
			}
		}
	}
	return -1
}

// isModelPath: absolute, or explicitly relative. Anything else
// (meta-llama/Llama-3.1-8B) is a Hugging Face repository id.
func isModelPath(v string) bool {
	return strings.HasPrefix(v, "/") || v == "." || v == ".." ||
		strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../")
}

type shardScan struct {
	Count     int    `json:"count"`
	Size      uint64 `json:"size"`
	Pattern   string `json:"pattern,omitempty"`
	First     string `json:"first,omitempty"`      // a shard to try opening
	Subdirs   bool   `json:"subdirs,omitempty"`    // found one level down, not in the directory itself
	BadShard  string `json:"bad_shard,omitempty"`  // a shard that cannot be stat'ed (dangling link)
	BadReason string `json:"bad_reason,omitempty"` // why, without the path
}

// modelView is what the model-dir check reads from the model's
// filesystem: one operation, so that a filesystem that may not answer is
// asked once, by one helper, with one deadline.
type modelView struct {
	Missing  bool      `json:"missing,omitempty"`
	StatErr  string    `json:"stat_err,omitempty"`  // stat failed otherwise; the reason without the path
	NotModel bool      `json:"not_model,omitempty"` // neither a directory nor a GGUF file
	ListErr  string    `json:"list_err,omitempty"`
	Scan     shardScan `json:"scan"`
	OpenErr  string    `json:"open_err,omitempty"` // the first shard cannot be opened
	FS       FS        `json:"fs"`
	FSErr    string    `json:"fs_err,omitempty"`
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
		v.Scan = scanShards(full, entries)
		if v.Config, err = boundedread.File(filepath.Join(full, "config.json"), maxConfigBytes); err != nil {
			v.Config, v.ConfigErr = nil, boundedread.BareErr(err).Error()
		}
	} else if fi.Mode().IsRegular() && shardGroup(full) == ggufGroup {
		// A GGUF checkpoint may be given as the file itself.
		v.Scan = shardScan{Count: 1, Size: uint64(fi.Size()), Pattern: "a GGUF file", First: full}
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

// scanShards collects the weight files of dir: those in dir itself, else
// those one level down, of the format the engine prefers.
func scanShards(dir string, entries []os.DirEntry) shardScan {
	files, bad, why := shardFiles(dir, entries)
	if scan := pick(files, bad, why); scan.Count > 0 || scan.BadShard != "" {
		return scan
	}
	var all [len(shardGroups)][]shardFile
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") { // .cache/huggingface, .git
			continue
		}
		p := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			continue
		}
		sub, err := os.ReadDir(p)
		if err != nil {
			continue
		}
		files, b, w := shardFiles(p, sub)
		if bad == "" {
			bad, why = b, w
		}
		for g := range files {
			all[g] = append(all[g], files[g]...)
		}
	}
	scan := pick(all, bad, why)
	scan.Subdirs = true
	return scan
}

type shardFile struct {
	path string
	size int64
}

// shardFiles sorts the weight files among entries by format. Links are
// followed (a Hugging Face cache snapshot links every file to a blob).
func shardFiles(dir string, entries []os.DirEntry) (files [len(shardGroups)][]shardFile, bad string, why error) {
	for _, e := range entries {
		g := shardGroup(e.Name())
		if g < 0 || e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		if err != nil {
			if bad == "" {
				bad, why = p, err
			}
			continue
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		files[g] = append(files[g], shardFile{p, fi.Size()})
	}
	return files, bad, why
}

// pick counts the files of the preferred format present.
func pick(files [len(shardGroups)][]shardFile, bad string, why error) shardScan {
	scan := shardScan{BadShard: bad}
	if why != nil {
		scan.BadReason = boundedread.BareErr(why).Error()
	}
	for g, fs := range files {
		if len(fs) == 0 {
			continue
		}
		scan.Pattern = shardGroups[g].pattern
		scan.Count = len(fs)
		scan.First = fs[0].path
		for _, f := range fs {
			scan.Size += uint64(f.size)
		}
		return scan
	}
	return scan
}

func checkModelDir(in *Facts) Result {
	arg, source := in.Args.Model, in.Args.ModelFrom
	if source == "" {
		return skipped("no --model, --model-path or serve argument in the command")
	}
	if !isModelPath(arg) {
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
		return fail(Warn, fmt.Sprintf("%s on %s: no weight files (%s) in it or one level down", shown, where, shardPatterns),
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
