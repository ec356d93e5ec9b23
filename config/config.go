// Package config reads everything the pass takes from the environment into
// one value, so the rest of the pass never reads os.Getenv and --explain can
// show every input with where it came from.
package config

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/environ"
)

// Defaults.
const (
	DefaultReadyTimeout  = 1800 // seconds
	DefaultPythonTimeout = 10 * time.Second
	DefaultChdir         = "/"
	DefaultHostLibionic  = "/host-libionic/libionic.so"
	DefaultPython        = "python3"
	// DefaultPreflightTimeout bounds each access to a filesystem that may
	// not answer (NFS, FUSE, ...): long enough for a healthy server under
	// load to list a model directory, short enough not to matter next to
	// an engine start.
	DefaultPreflightTimeout = 5 * time.Second
)

var providerRE = regexp.MustCompile(`^[a-z0-9_]+$`)

// Config is the run's configuration.
type Config struct {
	PayloadRoot       string                 `json:"payload_root"`
	PayloadRootFrom   string                 `json:"payload_root_from"`
	Python            string                 `json:"python"`
	PythonTimeout     string                 `json:"python_timeout"`
	RequireNative     capability.Requirement `json:"require_native"`
	ReadyTimeout      int                    `json:"ready_timeout_seconds"`
	ReadyTimeoutFrom  string                 `json:"ready_timeout_from"`
	ReadyTimeoutSet   bool                   `json:"ready_timeout_set"` // given, and accepted
	Chdir             string                 `json:"chdir"`
	HostLibionic      string                 `json:"host_libionic"`
	RDMAProvider      string                 `json:"rdma_provider"` // provider name the host build replaces
	Sysfs             string                 `json:"sysfs"`         // SYSFS_PATH, as libibverbs reads it
	SkipEnginePatches bool                   `json:"skip_engine_patches"`
	RequirePatches    []string               `json:"require_patches,omitempty"`
	PreflightOff      bool                   `json:"preflight_off,omitempty"`  // INFERA_PREFLIGHT=off
	PreflightSkip     []string               `json:"preflight_skip,omitempty"` // INFERA_PREFLIGHT_SKIP
	PreflightTimeout  string                 `json:"preflight_timeout"`        // INFERA_PREFLIGHT_TIMEOUT
	// PreflightTimeoutError: a filesystem that does not answer within
	// the deadline refuses the start (INFERA_PREFLIGHT_ON_TIMEOUT=error)
	// instead of being a warning.
	PreflightTimeoutError bool        `json:"preflight_timeout_error,omitempty"`
	StateDir              string      `json:"state_dir,omitempty"`   // empty: /run/infera-exec, else /tmp/infera-exec
	ReportPath            string      `json:"report_path,omitempty"` // empty: default location
	ReportOff             bool        `json:"report_off,omitempty"`
	ROCmRoots             []string    `json:"rocm_roots"`
	ABIFamily             *abi.Family `json:"-"` // INFERA_ABI_FAMILY, when set
	LogJSON               bool        `json:"log_json"`

	pythonTimeout    time.Duration
	preflightTimeout time.Duration
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

// Load reads the configuration from env. exe is the resolved path of the
// running binary and cwd the directory it was started in. Malformed values
// with a safe default produce a warning; values without one are an error.
func Load(env *environ.Env, exe, cwd string) (Config, []string, error) {
	var warns []string
	c := Config{}

	// First, so that a refusal below still reaches the report.
	switch v := env.Value("INFERA_EXEC_REPORT"); strings.ToLower(v) {
	case "":
	case "off", "none", "0", "false":
		c.ReportOff = true
	default:
		c.ReportPath = abs(v, cwd)
	}

	if v := env.Value("PAYLOAD_ROOT"); v != "" {
		c.PayloadRoot, c.PayloadRootFrom = abs(v, cwd), "PAYLOAD_ROOT"
	} else {
		c.PayloadRoot = filepath.Dir(filepath.Dir(exe))
		c.PayloadRootFrom = "parent of the directory holding " + exe
	}

	c.Python = env.Value("INFERA_PYTHON")
	if c.Python == "" {
		c.Python = DefaultPython
	}

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

	req, err := capability.ParseRequirement(env.Value("INFERA_REQUIRE_NATIVE"))
	if err != nil {
		return c, warns, &Error{err.Error()}
	}
	c.RequireNative = req

	c.ReadyTimeout, c.ReadyTimeoutFrom = DefaultReadyTimeout, "default"
	if v, ok := env.Get("INFERA_ENGINE_READY_TIMEOUT"); ok && v != "" {
		secs, err := readySeconds(v)
		if err != nil {
			warns = append(warns, fmt.Sprintf("INFERA_ENGINE_READY_TIMEOUT=%q %v; using %d", v, err, DefaultReadyTimeout))
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
		c.HostLibionic = abs(v, cwd)
	}

	c.RDMAProvider = "ionic"
	if v := env.Value("INFERA_RDMA_PROVIDER"); v != "" {
		if !providerRE.MatchString(v) {
			return c, warns, &Error{fmt.Sprintf("INFERA_RDMA_PROVIDER=%q: a provider name is lower-case letters, digits and '_' (ionic, mana, mlx5)", v)}
		}
		c.RDMAProvider = v
	}
	c.Sysfs = "/sys"
	if v := env.Value("SYSFS_PATH"); v != "" {
		c.Sysfs = abs(v, cwd)
	}

	switch v := env.Value("INFERA_PREFLIGHT"); strings.ToLower(v) {
	case "", "on", "1", "true":
	case "off", "0", "false":
		c.PreflightOff = true
	default:
		warns = append(warns, fmt.Sprintf("INFERA_PREFLIGHT=%q is not on or off; running the preflight checks", v))
	}
	c.PreflightSkip = strings.FieldsFunc(env.Value("INFERA_PREFLIGHT_SKIP"), func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })

	var warn string
	if c.preflightTimeout, warn = PreflightTimeout(env); warn != "" {
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

	c.SkipEnginePatches = env.Value("INFERA_SKIP_ENGINE_PATCHES") != ""
	c.RequirePatches = strings.FieldsFunc(env.Value("INFERA_REQUIRE_PATCHES"), func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
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

// PreflightTimeout is INFERA_PREFLIGHT_TIMEOUT, with a warning when it is
// malformed; Load reads it, and so do the modes that need nothing else of
// the configuration (--check, --install).
func PreflightTimeout(env *environ.Env) (time.Duration, string) {
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
func ParseSeconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	// Whole seconds exactly: through float64, n*1e9 loses the last
	// nanoseconds once it needs more than 53 bits.
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
			return 0, fmt.Errorf("is out of range")
		}
		return time.Duration(n) * time.Second, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		// float64(math.MaxInt64) is 2^63: a product that rounds to it or
		// beyond does not fit a Duration (converting it wraps negative).
		ns := f * float64(time.Second)
		if math.IsNaN(f) || math.IsInf(f, 0) || ns >= float64(math.MaxInt64) || ns < float64(math.MinInt64) {
			return 0, fmt.Errorf("is out of range")
		}
		return time.Duration(ns), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("is neither seconds nor a duration such as 90m or 2h")
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
		return 0, fmt.Errorf("is not positive")
	}
	secs := int64(math.Ceil(d.Seconds()))
	if secs > math.MaxInt32 {
		return 0, fmt.Errorf("is out of range")
	}
	return int(secs), nil
}
