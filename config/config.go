// Package config reads everything the pass takes from the environment and
// the command line's mode options into one value, so the rest of the pass
// never reads os.Getenv and --explain can show every input with where it
// came from. It is a leaf: the stages import it, it imports none of them.
package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/userdb"
	"golang.org/x/sys/unix"
)

// Config is the run's configuration.
type Config struct {
	PayloadRoot        string      `json:"payload_root"`
	PayloadRootFrom    string      `json:"payload_root_from"`
	Python             string      `json:"python"`
	PythonNamed        bool        `json:"python_named,omitempty"` // INFERA_PYTHON given: the operator names the worker's interpreter
	PythonTimeout      string      `json:"python_timeout"`
	RequireNative      Requirement `json:"require_native"`
	ReadyTimeout       int         `json:"ready_timeout_seconds"`
	ReadyTimeoutFrom   string      `json:"ready_timeout_from"`
	ReadyTimeoutSet    bool        `json:"ready_timeout_set"` // given, and accepted
	Chdir              string      `json:"chdir"`
	HostLibionic       string      `json:"host_libionic"`
	HostLibionicSet    bool        `json:"host_libionic_set,omitempty"` // given: a missing file is a warning
	RDMAProvider       string      `json:"rdma_provider"`               // provider name the host build replaces
	Sysfs              string      `json:"sysfs"`                       // SYSFS_PATH, as libibverbs reads it
	SkipEnginePatches  bool        `json:"skip_engine_patches"`
	RequirePatches     []string    `json:"require_patches,omitempty"`
	SkipPatches        []string    `json:"skip_patches,omitempty"`   // INFERA_SKIP_PATCHES: patch ids not applied
	PatchLockTimeout   string      `json:"patch_lock_timeout"`       // INFERA_PATCH_LOCK_TIMEOUT
	PatchWrite         PatchWrite  `json:"patch_write"`              // INFERA_PATCH_WRITE
	PreflightOff       bool        `json:"preflight_off,omitempty"`  // INFERA_PREFLIGHT=off
	PreflightSkip      []string    `json:"preflight_skip,omitempty"` // INFERA_PREFLIGHT_SKIP
	PreflightShmMin    uint64      `json:"preflight_shm_min"`        // INFERA_PREFLIGHT_SHM_MIN, bytes
	PreflightNofileMin uint64      `json:"preflight_nofile_min"`     // INFERA_PREFLIGHT_NOFILE_MIN
	AllowTCPKV         bool        `json:"allow_tcp_kv,omitempty"`   // INFERA_ALLOW_TCP_KV=1
	StateDir           string      `json:"state_dir,omitempty"`      // INFERA_EXEC_STATE_DIR; empty: the default candidates
	ReportPath         string      `json:"report_path,omitempty"`    // empty: in the state directory
	ReportOff          bool        `json:"report_off,omitempty"`
	ROCmRoots          []string    `json:"rocm_roots"`
	ABIFamily          *Family     `json:"-"` // INFERA_ABI_FAMILY, when set
	LogJSON            bool        `json:"log_json"`
	StartDir           string      `json:"start_dir"`         // where infera-exec was started
	PreflightTimeout   string      `json:"preflight_timeout"` // INFERA_PREFLIGHT_TIMEOUT
	// Init says whether infera-exec stays as the worker's init, from
	// --init/--init-group and INFERA_EXEC_INIT/INFERA_EXEC_INIT_GROUP.
	Init InitMode `json:"init,omitempty"`
	// User is whom the worker runs as, from --user or INFERA_EXEC_USER
	// (UserFrom says which); nil: as infera-exec runs.
	User     *userdb.Spec `json:"user,omitempty"`
	UserFrom string       `json:"user_from,omitempty"`
	// InitOptions are the init's exit-code map, signal rewriting and
	// parent-death signal.
	InitOptions InitOptions `json:"init_options,omitzero"`
	// PreflightTimeoutError: a filesystem that does not answer within
	// the deadline refuses the start (INFERA_PREFLIGHT_ON_TIMEOUT=error)
	// instead of being a warning.
	PreflightTimeoutError bool `json:"preflight_timeout_error,omitempty"`
	// LogFormat and LogLevel are INFERA_EXEC_LOG (text, json or logfmt)
	// and INFERA_EXEC_LOG_LEVEL (debug, info, warn or error).
	LogFormat string `json:"log_format"`
	LogLevel  string `json:"log_level"`
	// TerminationLog is the file a refusal is written to for the kubelet
	// (INFERA_EXEC_TERMINATION_LOG); "" for none.
	TerminationLog string `json:"termination_log,omitempty"`

	pythonTimeout    time.Duration
	preflightTimeout time.Duration
	patchLockTimeout time.Duration
}

// PatchWrite is where a start writes the engine patches
// (INFERA_PATCH_WRITE).
type PatchWrite string

const (
	PatchWriteAuto    PatchWrite = "auto"     // in place; in a shadow tree where in place is impossible
	PatchWriteInPlace PatchWrite = "in-place" // only in place
	PatchWriteShadow  PatchWrite = "shadow"   // always in a shadow tree
)

// InitMode is how infera-exec starts the worker: exec'ing it, or staying
// as its init.
type InitMode int

const (
	InitOff   InitMode = iota // exec the worker; infera-exec is gone
	InitChild                 // stay as init, signals to the worker
	InitGroup                 // stay as init, signals to the worker's process group
)

func (m InitMode) String() string {
	switch m {
	case InitChild:
		return "init"
	case InitGroup:
		return "init-group"
	}
	return ""
}

// MarshalText writes the mode as its name ("" when off).
func (m InitMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// Flags are the command line's options that configure the start; the
// mode options (--explain, --doctor, ...) are the main package's.
type Flags struct {
	Init, InitGroup bool
	User            string // --user, checked by ParseArgs
	// The init's options as given on the command line (checked by
	// ParseArgs); each replaces its variable.
	InitExitMap, InitRewrite, InitPdeathsig string
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

// PythonTimeoutDuration is how long the interpreter may take to answer a
// version question.
func (c Config) PythonTimeoutDuration() time.Duration { return c.pythonTimeout }

// PatchProbeTimeout is how long the interpreter may take to say where the
// engine packages are, for the whole probe: a site start with many .pth
// files is slower than a bare version question, so it gets three times as
// long.
func (c Config) PatchProbeTimeout() time.Duration { return 3 * c.pythonTimeout }

// PatchLockTimeoutDuration is how long a start waits, in all, for the
// locks of the engine's package directories (0: it tries once).
func (c Config) PatchLockTimeoutDuration() time.Duration { return c.patchLockTimeout }

// Error is a configuration value that cannot be used: the start is
// refused with exit code 78.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

// ExitCode is EX_CONFIG.
func (e *Error) ExitCode() int { return 78 }

// FromProcess loads the configuration of this process: its environment,
// the resolved path of its binary and the directory it was started in.
func FromProcess(env *environ.Env, flags Flags) (Config, []string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		cwd = "/"
	}
	exe, exeErr := Executable(os.Args[0], env.Value("PATH"), cwd)
	cfg, warns, err := Load(env, exe, cwd, flags)
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

// Load reads the configuration from env and flags: one pass over Vars,
// each entry with its own parser and default. exe is the resolved path of
// the running binary and cwd the directory it was started in. Malformed
// values with a safe default produce a warning; values without one are an
// error (the first is returned, and every other variable is still read, so
// that the refusal can be reported where the operator asked).
func Load(env *environ.Env, exe, cwd string, flags Flags) (Config, []string, error) {
	l := &loader{c: Config{StartDir: cwd}, env: env, exe: exe, cwd: cwd}
	var first error
	for _, v := range Vars {
		if err := v.load(l, env.Value(v.Name)); err != nil && first == nil {
			first = err
		}
	}
	switch {
	case flags.InitGroup:
		l.c.Init = InitGroup
	case flags.Init && l.c.Init == InitOff:
		l.c.Init = InitChild
	}
	if flags.User != "" { // before INFERA_EXEC_USER, as the command line is
		if s, err := userdb.ParseSpec(flags.User); err == nil {
			l.c.User, l.c.UserFrom = &s, "--user"
		}
	}
	for _, f := range []struct{ name, v string }{{"INFERA_EXEC_INIT_EXIT_MAP", flags.InitExitMap}, {"INFERA_EXEC_INIT_REWRITE", flags.InitRewrite}, {"INFERA_EXEC_INIT_PDEATHSIG", flags.InitPdeathsig}} {
		if f.v == "" {
			continue
		}
		for _, v := range Vars {
			if v.Name == f.name {
				if err := v.load(l, f.v); err != nil && first == nil {
					first = err
				}
			}
		}
	}
	return l.c, l.warns, first
}

// loader is the state of one Load: the configuration being filled and the
// warnings said so far.
type loader struct {
	c        Config
	env      *environ.Env
	exe, cwd string
	warns    []string
}

func (l *loader) warn(format string, a ...any) { l.warns = append(l.warns, fmt.Sprintf(format, a...)) }

// abs is p made absolute against the start directory.
func (l *loader) abs(p string) string { return abs(p, l.cwd) }

func abs(p, cwd string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(cwd, p)
}

// splitList reads a list given with commas or blanks.
func splitList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}

// InitOptions are the init's options beyond its mode: the exit-code map
// (INFERA_EXEC_INIT_EXIT_MAP, --init-exit-map), signal rewriting
// (INFERA_EXEC_INIT_REWRITE, --init-rewrite) and the parent-death signal
// (INFERA_EXEC_INIT_PDEATHSIG, --init-pdeathsig).
type InitOptions struct {
	ExitMap     map[int]int                       `json:"exit_map,omitempty"`
	Rewrite     map[syscall.Signal]syscall.Signal `json:"rewrite,omitempty"`
	ParentDeath syscall.Signal                    `json:"parent_death_signal,omitempty"`
}

// ParseExitMap reads an exit-code map: a list of FROM:TO pairs, or FROM
// alone for FROM:0 (tini's -e), each code 0-255: "143,130:0,2:1".
func ParseExitMap(v string) (map[int]int, error) {
	m := map[int]int{}
	for _, item := range splitList(v) {
		from, to, pair := strings.Cut(item, ":")
		if !pair {
			to = "0"
		}
		f, err1 := strconv.Atoi(from)
		t, err2 := strconv.Atoi(to)
		if err1 != nil || err2 != nil || f < 0 || f > 255 || t < 0 || t > 255 {
			return nil, fmt.Errorf("%q is not an exit code 0-255 or a pair FROM:TO of them (e.g. 143 or 143:0)", item)
		}
		m[f] = t
	}
	return m, nil
}

// ParseRewrite reads signal rewriting: a list of FROM:TO pairs, each a
// signal number or name (15, TERM, SIGTERM); TO 0 drops FROM (dumb-init's
// --rewrite).
func ParseRewrite(v string) (map[syscall.Signal]syscall.Signal, error) {
	m := map[syscall.Signal]syscall.Signal{}
	for _, item := range splitList(v) {
		from, to, pair := strings.Cut(item, ":")
		f, err1 := ParseSignal(from, false)
		t, err2 := ParseSignal(to, true)
		if !pair || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%q is not a pair FROM:TO of signals (e.g. TERM:QUIT or 15:3; TO 0 drops FROM)", item)
		}
		m[f] = t
	}
	return m, nil
}

// ParseSignal reads a signal number 1-64 or a name with or without SIG
// (KILL, SIGKILL); zeroOK also takes 0.
func ParseSignal(v string, zeroOK bool) (syscall.Signal, error) {
	v = strings.TrimSpace(v)
	if n, err := strconv.Atoi(v); err == nil {
		if (n == 0 && zeroOK) || (n >= 1 && n <= 64) {
			return syscall.Signal(n), nil
		}
		return 0, fmt.Errorf("signal %d is not 1-64", n)
	}
	name := strings.ToUpper(v)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if s := unix.SignalNum(name); s != 0 {
		return s, nil
	}
	return 0, fmt.Errorf("%q is not a signal name or number", v)
}
