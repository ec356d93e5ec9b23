// Package config reads everything the pass takes from the environment into
// one value, so the rest of the pass never reads os.Getenv and --explain can
// show every input with where it came from.
package config

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/internal/environ"
)

// Defaults.
const (
	DefaultReadyTimeout  = 1800 // seconds
	DefaultPythonTimeout = 10 * time.Second
	DefaultChdir         = "/"
	DefaultHostLibionic  = "/host-libionic/libionic.so"
	DefaultPython        = "python3"
	DefaultRDMAProvider  = "ionic"
	DefaultSysfs         = "/sys"
	DefaultShmMin        = 1 << 30 // bytes of /dev/shm below which the shm check warns
	DefaultNofileMin     = 65536   // open-file hard limit below which the nofile check warns
	// DefaultPreflightTimeout bounds each access to a filesystem that may
	// not answer (NFS, FUSE, ...): long enough for a healthy server under
	// load to list a model directory, short enough not to matter next to
	// an engine start.
	DefaultPreflightTimeout = 5 * time.Second
)

var providerRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9_]+$`) })

// Config is the run's configuration.
type Config struct {
	PayloadRoot        string                 `json:"payload_root"`
	PayloadRootFrom    string                 `json:"payload_root_from"`
	Python             string                 `json:"python"`
	PythonTimeout      string                 `json:"python_timeout"`
	RequireNative      capability.Requirement `json:"require_native"`
	ReadyTimeout       int                    `json:"ready_timeout_seconds"`
	ReadyTimeoutFrom   string                 `json:"ready_timeout_from"`
	ReadyTimeoutSet    bool                   `json:"ready_timeout_set"` // given, and accepted
	Chdir              string                 `json:"chdir"`
	HostLibionic       string                 `json:"host_libionic"`
	HostLibionicSet    bool                   `json:"host_libionic_set,omitempty"` // given: a missing file is a warning
	RDMAProvider       string                 `json:"rdma_provider"`               // provider name the host build replaces
	Sysfs              string                 `json:"sysfs"`                       // SYSFS_PATH, as libibverbs reads it
	SkipEnginePatches  bool                   `json:"skip_engine_patches"`
	RequirePatches     []string               `json:"require_patches,omitempty"`
	PreflightOff       bool                   `json:"preflight_off,omitempty"`  // INFERA_PREFLIGHT=off
	PreflightSkip      []string               `json:"preflight_skip,omitempty"` // INFERA_PREFLIGHT_SKIP
	PreflightShmMin    uint64                 `json:"preflight_shm_min"`        // INFERA_PREFLIGHT_SHM_MIN, bytes
	PreflightNofileMin uint64                 `json:"preflight_nofile_min"`     // INFERA_PREFLIGHT_NOFILE_MIN
	AllowTCPKV         bool                   `json:"allow_tcp_kv,omitempty"`   // INFERA_ALLOW_TCP_KV=1
	StateDir           string                 `json:"state_dir,omitempty"`      // empty: /run/infera-exec, else /tmp/infera-exec
	ReportPath         string                 `json:"report_path,omitempty"`    // empty: default location
	ReportOff          bool                   `json:"report_off,omitempty"`
	ROCmRoots          []string               `json:"rocm_roots"`
	ABIFamily          *abi.Family            `json:"-"` // INFERA_ABI_FAMILY, when set
	LogJSON            bool                   `json:"log_json"`
	StartDir           string                 `json:"start_dir"`         // where infera-exec was started
	PreflightTimeout   string                 `json:"preflight_timeout"` // INFERA_PREFLIGHT_TIMEOUT
	// Init: stay as the worker's init (INFERA_EXEC_INIT or --init)
	// instead of exec'ing it.
	Init      bool `json:"init,omitempty"`
	InitGroup bool `json:"init_group,omitempty"` // INFERA_EXEC_INIT_GROUP: signals to the worker's process group
	// PreflightTimeoutError: a filesystem that does not answer within
	// the deadline refuses the start (INFERA_PREFLIGHT_ON_TIMEOUT=error)
	// instead of being a warning.
	PreflightTimeoutError bool `json:"preflight_timeout_error,omitempty"`

	pythonTimeout    time.Duration
	preflightTimeout time.Duration
}

// WorkDir is where a process that stands in for the worker runs (the
// interpreter asked for its version): the worker's working directory when
// it exists, else the directory infera-exec was started in.
func (c Config) WorkDir() string {
	if fi, err := os.Stat(c.Chdir); err == nil && fi.IsDir() {
		return c.Chdir
	}
	return c.StartDir
}

// PreflightTimeoutDuration is the deadline of each access to a filesystem
// that may not answer.
func (c Config) PreflightTimeoutDuration() time.Duration { return c.preflightTimeout }

// PythonTimeoutDuration is how long the interpreter may take to answer.
func (c Config) PythonTimeoutDuration() time.Duration { return c.pythonTimeout }

// PatchProbeTimeout is how long the interpreter may take to say where the
// engine packages are: a site start with many .pth files is slower than a
// bare version question, so it gets three times as long.
func (c Config) PatchProbeTimeout() time.Duration { return 3 * c.pythonTimeout }

// Error is a configuration value that cannot be used.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

// FromProcess loads the configuration of this process: its environment,
// the resolved path of its binary and the directory it was started in.
func FromProcess(env *environ.Env) (Config, []string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		cwd = "/"
	}
	exe, exeErr := Executable(os.Args[0], env.Value("PATH"), cwd)
	cfg, warns, err := Load(env, exe, cwd)
	if err == nil && exeErr != nil && env.Value("PAYLOAD_ROOT") == "" {
		err = exeErr
	}
	return cfg, warns, err
}

// Executable is the absolute, link-resolved path of the running binary:
// /proc/self/exe when /proc is mounted; without it, argv[0] made absolute
// against the start directory, looked up on PATH when it has no slash
// (as the shell or execvp found it). A relative payload root would reach
// the worker's PYTHONPATH relative to a directory it no longer runs in,
// so when neither works the answer is an error asking for PAYLOAD_ROOT.
func Executable(argv0, path, cwd string) (string, error) {
	exe, err := os.Executable()
	if err != nil || !filepath.IsAbs(exe) {
		exe = ""
		switch {
		case strings.Contains(argv0, "/"):
			exe = abs(argv0, cwd)
		case argv0 != "":
			for _, dir := range filepath.SplitList(path) {
				if dir == "" {
					dir = "."
				}
				p := abs(filepath.Join(dir, argv0), cwd)
				if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
					exe = p
					break
				}
			}
		}
		if exe == "" {
			return "", &Error{fmt.Sprintf("cannot tell where the infera-exec binary is (/proc is not mounted and %q was not found on PATH), so neither where its payload is; set PAYLOAD_ROOT", argv0)}
		}
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return exe, nil
}

// Load reads the configuration from env. exe is the resolved path of the
// running binary and cwd the directory it was started in. Malformed values
// with a safe default produce a warning; values without one are an error.
func Load(env *environ.Env, exe, cwd string) (Config, []string, error) {
	warns := unknownNames(env)
	c := Config{StartDir: cwd}

	// First, so that a refusal below still reaches the report.
	if v := env.Value("INFERA_EXEC_REPORT"); strings.TrimSpace(v) != "" {
		if on, ok := ParseSwitch(v); (ok && !on) || strings.EqualFold(v, "none") {
			c.ReportOff = true
		} else {
			c.ReportPath = abs(v, cwd)
		}
	}

	if v := env.Value("PAYLOAD_ROOT"); v != "" {
		c.PayloadRoot, c.PayloadRootFrom = abs(v, cwd), "PAYLOAD_ROOT"
	} else {
		c.PayloadRoot = filepath.Dir(filepath.Dir(abs(exe, cwd)))
		c.PayloadRootFrom = "parent of the directory holding " + abs(exe, cwd)
	}

	c.Python = env.Value("INFERA_PYTHON")
	if c.Python == "" {
		c.Python = DefaultPython
	}

	var err error
	c.pythonTimeout = DefaultPythonTimeout
	if v := env.Value("INFERA_PYTHON_TIMEOUT"); v != "" {
		d, err := ParseSeconds(v)
		if err != nil || d <= 0 {
			warns = append(warns, fmt.Sprintf("INFERA_PYTHON_TIMEOUT=%q is not a positive duration; using %s", v, DefaultPythonTimeout))
		} else {
			c.pythonTimeout = d
		}
	}
	c.PythonTimeout = c.pythonTimeout.String()

	// The switch words first (on: the native tree and all it declares),
	// then names.
	if v := env.Value("INFERA_REQUIRE_NATIVE"); v != "" {
		if on, ok := ParseSwitch(v); ok {
			c.RequireNative = capability.Requirement{Raw: v, All: on}
		} else if c.RequireNative, err = capability.ParseRequirement(v); err != nil {
			return c, warns, &Error{err.Error()}
		}
	} else {
		c.RequireNative = capability.Requirement{}
	}

	c.ReadyTimeout, c.ReadyTimeoutFrom = DefaultReadyTimeout, "default"
	if v, ok := env.Get("INFERA_ENGINE_READY_TIMEOUT"); ok && v != "" {
		secs, err := readySeconds(v)
		if err != nil {
			warns = append(warns, fmt.Sprintf("INFERA_ENGINE_READY_TIMEOUT=%v; using %d", err, DefaultReadyTimeout))
			c.ReadyTimeoutFrom = fmt.Sprintf("default (INFERA_ENGINE_READY_TIMEOUT=%q rejected)", v)
		} else {
			c.ReadyTimeout, c.ReadyTimeoutFrom, c.ReadyTimeoutSet = secs, fmt.Sprintf("INFERA_ENGINE_READY_TIMEOUT=%s", v), true
		}
	}

	c.Chdir = DefaultChdir
	if v := env.Value("INFERA_EXEC_CHDIR"); v != "" {
		c.Chdir = abs(v, cwd)
	}

	c.HostLibionic = DefaultHostLibionic
	if v := env.Value("INFERA_HOST_LIBIONIC"); v != "" {
		c.HostLibionic, c.HostLibionicSet = abs(v, cwd), true
	}

	c.RDMAProvider = DefaultRDMAProvider
	if v := env.Value("INFERA_RDMA_PROVIDER"); v != "" {
		if !providerRE().MatchString(v) {
			return c, warns, &Error{fmt.Sprintf("INFERA_RDMA_PROVIDER=%q: a provider name is lower-case letters, digits and '_' (ionic, mana, mlx5)", v)}
		}
		c.RDMAProvider = v
	}
	c.Sysfs = DefaultSysfs
	if v := env.Value("SYSFS_PATH"); v != "" {
		c.Sysfs = abs(v, cwd)
	}

	if v := env.Value("INFERA_PREFLIGHT"); strings.TrimSpace(v) != "" {
		// Unset or empty: on. Set, it is a switch.
		on, err := readSwitch(env, "INFERA_PREFLIGHT")
		if err != nil {
			return c, warns, err
		}
		c.PreflightOff = !on
	}
	c.PreflightSkip = splitList(env.Value("INFERA_PREFLIGHT_SKIP"))
	c.PreflightShmMin = DefaultShmMin
	if v := strings.TrimSpace(env.Value("INFERA_PREFLIGHT_SHM_MIN")); v != "" {
		if n, err := ParseByteSize(v); err != nil {
			warns = append(warns, fmt.Sprintf("INFERA_PREFLIGHT_SHM_MIN=%q is not a size such as 8Gi (%v); using %d bytes", v, err, c.PreflightShmMin))
		} else {
			c.PreflightShmMin = n
		}
	}
	c.PreflightNofileMin = DefaultNofileMin
	if v := strings.TrimSpace(env.Value("INFERA_PREFLIGHT_NOFILE_MIN")); v != "" {
		if n, err := strconv.ParseUint(v, 10, 64); err != nil {
			warns = append(warns, fmt.Sprintf("INFERA_PREFLIGHT_NOFILE_MIN=%q is not a number; using %d", v, c.PreflightNofileMin))
		} else {
			c.PreflightNofileMin = n
		}
	}
	if c.AllowTCPKV, err = readSwitch(env, "INFERA_ALLOW_TCP_KV"); err != nil {
		return c, warns, err
	}
	if c.Init, err = readSwitch(env, "INFERA_EXEC_INIT"); err != nil {
		return c, warns, err
	}
	if c.InitGroup, err = readSwitch(env, "INFERA_EXEC_INIT_GROUP"); err != nil {
		return c, warns, err
	}
	c.Init = c.Init || c.InitGroup

	var warn string
	if c.preflightTimeout, warn = preflightTimeout(env); warn != "" {
		warns = append(warns, warn)
	}
	c.PreflightTimeout = c.preflightTimeout.String()
	switch v := env.Value("INFERA_PREFLIGHT_ON_TIMEOUT"); strings.ToLower(v) {
	case "", "warn", "warning":
	case "error":
		c.PreflightTimeoutError = true
	default:
		warns = append(warns, fmt.Sprintf("INFERA_PREFLIGHT_ON_TIMEOUT=%q is not warn or error; a filesystem that does not answer is a warning", v))
	}

	if c.SkipEnginePatches, warn = readLegacySwitch(env, "INFERA_SKIP_ENGINE_PATCHES"); warn != "" {
		warns = append(warns, warn)
	}
	c.RequirePatches = splitList(env.Value("INFERA_REQUIRE_PATCHES"))
	if v := env.Value("INFERA_EXEC_STATE_DIR"); v != "" {
		c.StateDir = abs(v, cwd)
	}

	if v := env.Value("ROCM_PATH"); v != "" {
		c.ROCmRoots = append(c.ROCmRoots, abs(v, cwd))
	}
	if len(c.ROCmRoots) == 0 || c.ROCmRoots[0] != abi.DefaultROCmRoot {
		c.ROCmRoots = append(c.ROCmRoots, abi.DefaultROCmRoot)
	}

	if v := env.Value("INFERA_ABI_FAMILY"); v != "" {
		f, err := abi.ParseFamily(v)
		if err != nil {
			return c, warns, &Error{err.Error()}
		}
		c.ABIFamily = &f
	}

	switch v := env.Value("INFERA_EXEC_LOG"); strings.ToLower(v) {
	case "", "text":
	case "json":
		c.LogJSON = true
	default:
		warns = append(warns, fmt.Sprintf("INFERA_EXEC_LOG=%q is not text or json; logging text", v))
	}
	return c, warns, nil
}

// splitList reads a list given with commas or blanks.
func splitList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}

// preflightTimeout is INFERA_PREFLIGHT_TIMEOUT, with a warning when it is
// malformed.
func preflightTimeout(env *environ.Env) (time.Duration, string) {
	v := env.Value("INFERA_PREFLIGHT_TIMEOUT")
	if v == "" {
		return DefaultPreflightTimeout, ""
	}
	d, err := ParseSeconds(v)
	if err != nil || d <= 0 {
		return DefaultPreflightTimeout, fmt.Sprintf("INFERA_PREFLIGHT_TIMEOUT=%q is not a positive duration; using %s", v, DefaultPreflightTimeout)
	}
	return d, ""
}

func abs(p, cwd string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(cwd, p)
}

// ParseSeconds reads a duration given as seconds ("90", "90.5") or as a Go
// duration ("90m", "2h", "1h30m").
func ParseSeconds(raw string) (time.Duration, error) {
	s := strings.TrimSpace(raw)
	// Whole seconds exactly: through float64, n*1e9 loses the last
	// nanoseconds once it needs more than 53 bits.
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
			return 0, fmt.Errorf("%q is out of range", raw)
		}
		return time.Duration(n) * time.Second, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		// float64(math.MaxInt64) is 2^63: a product that rounds to it or
		// beyond does not fit a Duration (converting it wraps negative).
		ns := f * float64(time.Second)
		if math.IsNaN(f) || math.IsInf(f, 0) || ns >= float64(math.MaxInt64) || ns < float64(math.MinInt64) {
			return 0, fmt.Errorf("%q is out of range", raw)
		}
		return time.Duration(ns), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither seconds nor a duration such as 90m or 2h", raw)
	}
	return d, nil
}

// readySeconds is the readiness timeout as the whole seconds the worker
// takes, rounded up so 0.5 never becomes 0.
func readySeconds(v string) (int, error) {
	d, err := ParseSeconds(v)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not positive", v)
	}
	secs := int64(math.Ceil(d.Seconds()))
	if secs > math.MaxInt32 {
		return 0, fmt.Errorf("%q is out of range (at most %d seconds)", v, math.MaxInt32)
	}
	return int(secs), nil
}

// ParseByteSize reads a size as Kubernetes quantities write it: bytes
// (1073741824), binary suffixes (512Mi, 8Gi) or decimal ones (2G, 500M),
// with an optional B (8GiB, 2GB) and fractions (1.5Gi).
func ParseByteSize(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	num := strings.TrimRightFunc(s, func(r rune) bool {
		return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
	})
	unit := strings.ToLower(s[len(num):])
	num = strings.TrimSpace(num)
	unit = strings.TrimSuffix(unit, "b")
	mult := 1.0
	if unit != "" {
		i := strings.IndexByte("kmgtp", unit[0])
		if i < 0 || len(unit) > 2 || (len(unit) == 2 && unit[1] != 'i') {
			return 0, fmt.Errorf("unknown unit in %q", s)
		}
		base := 1000.0
		if len(unit) == 2 {
			base = 1024
		}
		mult = math.Pow(base, float64(i+1))
	}
	if n, err := strconv.ParseUint(num, 10, 64); err == nil && mult == 1 {
		return n, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || f < 0 {
		return 0, fmt.Errorf("not a size: %q", s)
	}
	v := f * mult
	if v >= math.MaxUint64 {
		return 0, fmt.Errorf("too large: %q", s)
	}
	return uint64(v), nil
}
