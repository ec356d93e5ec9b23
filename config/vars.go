package config

import (
	"cmp"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/infera/infera-exec/internal/closest"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/userdb"
)

// Defaults, each used by the one entry of Vars that reads its variable.
const (
	DefaultReadyTimeout     = 1800 // seconds
	DefaultPythonTimeout    = 10 * time.Second
	DefaultChdir            = "/"
	DefaultHostLibionic     = "/host-libionic/libionic.so"
	DefaultPython           = "python3"
	DefaultRDMAProvider     = "ionic"
	DefaultSysfs            = "/sys"
	DefaultROCmRoot         = "/opt/rocm"
	DefaultShmMin           = 1 << 30 // bytes of /dev/shm below which the shm check warns
	DefaultNofileMin        = 65536   // open-file hard limit below which the nofile check warns
	DefaultPreflightTimeout = 5 * time.Second
	DefaultPatchLockTimeout = 5 * time.Second
	DefaultTerminationLog   = "/dev/termination-log" // the kubelet's terminationMessagePath
	// MaxPatchLockTimeout bounds INFERA_PATCH_LOCK_TIMEOUT: a lock held
	// longer than an hour is no patcher at work but a stuck process, and a
	// start that waits for it is a pod that never becomes ready.
	MaxPatchLockTimeout = time.Hour
)

// Var is one environment variable infera-exec reads: its name, its line in
// --help, its default as shown, and the parser that sets the
// configuration from its value ("" when unset). Vars is the one list of
// them: Load runs it, --help prints it, the unknown-name check suggests
// from it, and a test holds the README's table to it.
type Var struct {
	Name    string
	Meaning string // one line for --help
	Default string // "" when unset means nothing
	load    func(l *loader, v string) error
}

// Vars are the variables Load reads, in the order --help lists them. The
// report's location comes first, so a refusal below still reaches it.
var Vars = []Var{
	{"INFERA_EXEC_REPORT", "report file; off = none", "report.json in the state directory", func(l *loader, v string) error {
		if strings.TrimSpace(v) == "" {
			return nil
		}
		if on, ok := ParseSwitch(v); (ok && !on) || strings.EqualFold(v, "none") {
			l.c.ReportOff = true
		} else {
			l.c.ReportPath = l.abs(v)
		}
		return nil
	}},
	{"PAYLOAD_ROOT", "payload directory", "the parent of the directory holding this binary", func(l *loader, v string) error {
		if v != "" {
			l.c.PayloadRoot, l.c.PayloadRootFrom = l.abs(v), "PAYLOAD_ROOT"
			return nil
		}
		exe := l.abs(l.exe)
		l.c.PayloadRoot, l.c.PayloadRootFrom = parentOfBin(exe), "parent of the directory holding "+exe
		return nil
	}},
	{"INFERA_PYTHON", "interpreter to detect and probe", DefaultPython, func(l *loader, v string) error {
		l.c.Python, l.c.PythonNamed = cmp.Or(v, DefaultPython), v != ""
		return nil
	}},
	{"INFERA_PYTHON_TIMEOUT", "how long it may take to answer a version question; the engine probe gets three times as long, in all", DefaultPythonTimeout.String(), func(l *loader, v string) error {
		l.c.pythonTimeout = l.duration("INFERA_PYTHON_TIMEOUT", v, DefaultPythonTimeout)
		l.c.PythonTimeout = l.c.pythonTimeout.String()
		return nil
	}},
	{"INFERA_REQUIRE_NATIVE", `capabilities the deployment needs: a list such as "mooncake,hipfile"; on (see switches) or all = the native tree and all it declares; auto = what the worker's arguments imply; off or none = none`, "none", func(l *loader, v string) error {
		r, err := ParseRequirement(v)
		l.c.RequireNative = r
		if err != nil {
			return &Error{err.Error()}
		}
		return nil
	}},
	{"INFERA_ENGINE_READY_TIMEOUT", `seconds the worker waits for engine /health: "2400", "90.5", "90m" or "2h"; passed to the worker as whole seconds`, fmt.Sprint(DefaultReadyTimeout), func(l *loader, v string) error {
		l.c.ReadyTimeout, l.c.ReadyTimeoutFrom = DefaultReadyTimeout, "default"
		if v == "" {
			return nil
		}
		secs, err := readySeconds(v)
		if err != nil {
			l.warn("INFERA_ENGINE_READY_TIMEOUT=%v; using %d", err, DefaultReadyTimeout)
			l.c.ReadyTimeoutFrom = fmt.Sprintf("default (INFERA_ENGINE_READY_TIMEOUT=%q rejected)", v)
			return nil
		}
		l.c.ReadyTimeout, l.c.ReadyTimeoutFrom, l.c.ReadyTimeoutSet = secs, "INFERA_ENGINE_READY_TIMEOUT="+v, true
		return nil
	}},
	{"INFERA_EXEC_CHDIR", "working directory of the worker", DefaultChdir, func(l *loader, v string) error {
		l.c.Chdir = DefaultChdir
		if v != "" {
			l.c.Chdir = l.abs(v)
		}
		return nil
	}},
	{"INFERA_EXEC_INIT", "switch: stay as a minimal init (PID 1 or subreaper) that forwards signals to the worker and reaps zombies, like --init", "off", func(l *loader, v string) error {
		on, err := readSwitch("INFERA_EXEC_INIT", v)
		if on && l.c.Init == InitOff {
			l.c.Init = InitChild
		}
		return err
	}},
	{"INFERA_EXEC_INIT_GROUP", "switch: as INFERA_EXEC_INIT, forwarding signals to the worker's process group, like --init-group", "off", func(l *loader, v string) error {
		on, err := readSwitch("INFERA_EXEC_INIT_GROUP", v)
		if on {
			l.c.Init = InitGroup
		}
		return err
	}},
	{"INFERA_EXEC_USER", "run the worker as UID[:GID] or NAME[:GROUP] after the steps that need root, like --user (which wins)", "", func(l *loader, v string) error {
		if v == "" {
			return nil
		}
		s, err := userdb.ParseSpec(v)
		if err != nil {
			return &Error{fmt.Sprintf("INFERA_EXEC_USER=%v", err)}
		}
		l.c.User, l.c.UserFrom = &s, "INFERA_EXEC_USER"
		return nil
	}},
	{"INFERA_EXEC_INIT_EXIT_MAP", "init: exit codes of the worker to exit with instead, FROM:TO or FROM for FROM:0 (tini -e), e.g. 143 (SIGTERM counted as success), like --init-exit-map", "", func(l *loader, v string) error {
		if strings.TrimSpace(v) == "" {
			return nil
		}
		m, err := ParseExitMap(v)
		if err != nil {
			return &Error{"INFERA_EXEC_INIT_EXIT_MAP: " + err.Error()}
		}
		l.c.InitOptions.ExitMap = m
		return nil
	}},
	{"INFERA_EXEC_INIT_REWRITE", "init: signals rewritten before they are forwarded, FROM:TO by name or number, TO 0 drops FROM (dumb-init --rewrite), e.g. TERM:QUIT, like --init-rewrite", "", func(l *loader, v string) error {
		if strings.TrimSpace(v) == "" {
			return nil
		}
		m, err := ParseRewrite(v)
		if err != nil {
			return &Error{"INFERA_EXEC_INIT_REWRITE: " + err.Error()}
		}
		l.c.InitOptions.Rewrite = m
		return nil
	}},
	{"INFERA_EXEC_INIT_PDEATHSIG", "init: signal the init gets when its parent ends (tini -p), forwarded like any other, e.g. KILL, like --init-pdeathsig", "", func(l *loader, v string) error {
		if strings.TrimSpace(v) == "" {
			return nil
		}
		s, err := ParseSignal(v, false)
		if err != nil {
			return &Error{"INFERA_EXEC_INIT_PDEATHSIG: " + err.Error()}
		}
		l.c.InitOptions.ParentDeath = s
		return nil
	}},
	{"INFERA_ABI_FAMILY", "force the family, e.g. rocm7-py312 (debugging)", "", func(l *loader, v string) error {
		if v == "" {
			return nil
		}
		f, err := ParseFamily(v)
		if err != nil {
			return &Error{err.Error()}
		}
		l.c.ABIFamily = &f
		return nil
	}},
	{"INFERA_HOST_LIBIONIC", "host RDMA provider; set but missing is a warning", DefaultHostLibionic, func(l *loader, v string) error {
		l.c.HostLibionic = DefaultHostLibionic
		if v != "" {
			l.c.HostLibionic, l.c.HostLibionicSet = l.abs(v), true
		}
		return nil
	}},
	{"INFERA_RDMA_PROVIDER", "provider the host build replaces", DefaultRDMAProvider, func(l *loader, v string) error {
		l.c.RDMAProvider = DefaultRDMAProvider
		if v == "" {
			return nil
		}
		if !providerName(v) {
			return &Error{fmt.Sprintf("INFERA_RDMA_PROVIDER=%q: a provider name is lower-case letters, digits and '_' (ionic, mana, mlx5)", v)}
		}
		l.c.RDMAProvider = v
		return nil
	}},
	{"SYSFS_PATH", "sysfs root, as libibverbs reads it", DefaultSysfs, func(l *loader, v string) error {
		l.c.Sysfs = DefaultSysfs
		if v != "" {
			l.c.Sysfs = l.abs(v)
		}
		return nil
	}},
	{"INFERA_SKIP_ENGINE_PATCHES", "switch: apply no engine patches (v0.2.2: any non-empty value; still on, with a warning)", "off", func(l *loader, v string) error {
		var warn string
		if l.c.SkipEnginePatches, warn = readLegacySwitch("INFERA_SKIP_ENGINE_PATCHES", v); warn != "" {
			l.warn("%s", warn)
		}
		return nil
	}},
	{"INFERA_REQUIRE_PATCHES", "patch ids that must be in force, else exit 65 (not vouched for a worker it cannot follow: also 65, unless INFERA_PYTHON names the worker's interpreter)", "", func(l *loader, v string) error {
		l.c.RequirePatches = splitList(v)
		return nil
	}},
	{"INFERA_SKIP_PATCHES", "patch ids not to apply or check (unknown id: 78)", "", func(l *loader, v string) error {
		l.c.SkipPatches = splitList(v)
		return nil
	}},
	{"INFERA_PATCH_WRITE", "where a start writes the engine patches: auto = in place, and in a shadow tree in the state directory where the engine's files cannot be written (read-only, another owner); in-place = only in place; shadow = always in a shadow tree", string(PatchWriteAuto), func(l *loader, v string) error {
		switch w := PatchWrite(strings.ToLower(strings.TrimSpace(v))); w {
		case "":
			l.c.PatchWrite = PatchWriteAuto
		case PatchWriteAuto, PatchWriteInPlace, PatchWriteShadow:
			l.c.PatchWrite = w
		default:
			l.c.PatchWrite = PatchWriteAuto
			return &Error{fmt.Sprintf("INFERA_PATCH_WRITE=%q: want auto, in-place or shadow", v)}
		}
		return nil
	}},
	{"INFERA_PATCH_LOCK_TIMEOUT", "how long a start waits, in all, for the engine's package directories that another process holds locked; then it starts unpatched (a warning; 65 when a patch is required). 0 = do not wait; at most 1h (beyond: 78)", DefaultPatchLockTimeout.String(), func(l *loader, v string) error {
		l.c.patchLockTimeout = DefaultPatchLockTimeout
		if v = strings.TrimSpace(v); v != "" {
			if d, err := ParseSeconds(v); err != nil || d < 0 {
				l.warn("INFERA_PATCH_LOCK_TIMEOUT=%q is not a duration of zero or more; using %s", v, DefaultPatchLockTimeout)
			} else if d > MaxPatchLockTimeout {
				return &Error{fmt.Sprintf("INFERA_PATCH_LOCK_TIMEOUT=%q is beyond its bound of %s: a start waits at most that long for the engine's package locks; give %d (seconds) or less", v, MaxPatchLockTimeout, int(MaxPatchLockTimeout/time.Second))}
			} else {
				l.c.patchLockTimeout = d
			}
		}
		l.c.PatchLockTimeout = l.c.patchLockTimeout.String()
		return nil
	}},
	{"INFERA_EXEC_STATE_DIR", "state directory: the caches, the patch record, the RDMA fallback directory and the default report", "/run/infera-exec, else /tmp/infera-exec", func(l *loader, v string) error {
		if v != "" {
			l.c.StateDir = l.abs(v)
		}
		return nil
	}},
	{"INFERA_PREFLIGHT", "switch: run the preflight checks", "on", func(l *loader, v string) error {
		if strings.TrimSpace(v) == "" {
			return nil // unset or empty: on
		}
		on, err := readSwitch("INFERA_PREFLIGHT", v)
		l.c.PreflightOff = err == nil && !on
		return err
	}},
	{"INFERA_PREFLIGHT_SKIP", "preflight checks and rules to skip, by name or id, e.g. rdma,kimi-k3-fp8-kv-cache (unknown: 78)", "", func(l *loader, v string) error {
		l.c.PreflightSkip = splitList(v)
		return nil
	}},
	{"INFERA_PREFLIGHT_TIMEOUT", "how long a filesystem that may not answer (NFS, FUSE, ...) may take", DefaultPreflightTimeout.String(), func(l *loader, v string) error {
		l.c.preflightTimeout = l.duration("INFERA_PREFLIGHT_TIMEOUT", v, DefaultPreflightTimeout)
		l.c.PreflightTimeout = l.c.preflightTimeout.String()
		return nil
	}},
	{"INFERA_PREFLIGHT_ON_TIMEOUT", "warn: start the worker anyway; error: refuse (78)", "warn", func(l *loader, v string) error {
		switch strings.ToLower(v) {
		case "", "warn", "warning":
		case "error":
			l.c.PreflightTimeoutError = true
		default:
			l.warn("INFERA_PREFLIGHT_ON_TIMEOUT=%q is not warn or error; a filesystem that does not answer is a warning", v)
		}
		return nil
	}},
	{"INFERA_PREFLIGHT_SHM_MIN", "the shm check's minimum size of /dev/shm", "1Gi", func(l *loader, v string) error {
		l.c.PreflightShmMin = DefaultShmMin
		if v = strings.TrimSpace(v); v == "" {
			return nil
		}
		if n, err := ParseByteSize(v); err != nil {
			l.warn("INFERA_PREFLIGHT_SHM_MIN=%q is not a size such as 8Gi (%v); using %d bytes", v, err, l.c.PreflightShmMin)
		} else {
			l.c.PreflightShmMin = n
		}
		return nil
	}},
	{"INFERA_PREFLIGHT_NOFILE_MIN", "the nofile check's minimum open-file hard limit", fmt.Sprint(DefaultNofileMin), func(l *loader, v string) error {
		l.c.PreflightNofileMin = DefaultNofileMin
		if v = strings.TrimSpace(v); v == "" {
			return nil
		}
		if n, err := strconv.ParseUint(v, 10, 64); err != nil {
			l.warn("INFERA_PREFLIGHT_NOFILE_MIN=%q is not a number; using %d", v, l.c.PreflightNofileMin)
		} else {
			l.c.PreflightNofileMin = n
		}
		return nil
	}},
	{"INFERA_ALLOW_TCP_KV", "switch: prefill/decode without RDMA only warns", "off", func(l *loader, v string) (err error) {
		l.c.AllowTCPKV, err = readSwitch("INFERA_ALLOW_TCP_KV", v)
		return err
	}},
	{"INFERA_EXEC_LOG", "text, json or logfmt log lines on stderr", "text", func(l *loader, v string) error {
		l.c.LogFormat = "text"
		switch f := strings.ToLower(strings.TrimSpace(v)); f {
		case "", "text":
		case "json", "logfmt":
			l.c.LogFormat, l.c.LogJSON = f, f == "json"
		default:
			l.warn("INFERA_EXEC_LOG=%q is not text, json or logfmt; logging text", v)
		}
		return nil
	}},
	{"INFERA_EXEC_LOG_LEVEL", "the least level logged: debug, info, warn or error (--verbose: debug)", "info", func(l *loader, v string) error {
		l.c.LogLevel = "info"
		switch f := strings.ToLower(strings.TrimSpace(v)); f {
		case "":
		case "debug", "info", "warn", "error":
			l.c.LogLevel = f
		case "warning":
			l.c.LogLevel = "warn"
		default:
			l.warn("INFERA_EXEC_LOG_LEVEL=%q is not debug, info, warn or error; logging from info", v)
		}
		return nil
	}},
	{"INFERA_EXEC_TERMINATION_LOG", "file a refusal's exit code and reason are written to, for the kubelet (a custom terminationMessagePath); off = none", DefaultTerminationLog, func(l *loader, v string) error {
		l.c.TerminationLog = DefaultTerminationLog
		if v = strings.TrimSpace(v); v == "" {
			return nil
		}
		if on, ok := ParseSwitch(v); (ok && !on) || strings.EqualFold(v, "none") {
			l.c.TerminationLog = ""
		} else {
			l.c.TerminationLog = l.abs(v)
		}
		return nil
	}},
	{"ROCM_PATH", "ROCm root searched before " + DefaultROCmRoot, "", func(l *loader, v string) error {
		if v != "" {
			l.c.ROCmRoots = append(l.c.ROCmRoots, l.abs(v))
		}
		if len(l.c.ROCmRoots) == 0 || l.c.ROCmRoots[0] != DefaultROCmRoot {
			l.c.ROCmRoots = append(l.c.ROCmRoots, DefaultROCmRoot)
		}
		return nil
	}},
}

// duration reads a positive duration, warning and keeping def when v is
// malformed.
func (l *loader) duration(name, v string, def time.Duration) time.Duration {
	if v == "" {
		return def
	}
	d, err := ParseSeconds(v)
	if err != nil || d <= 0 {
		l.warn("%s=%q is not a positive duration; using %s", name, v, def)
		return def
	}
	return d
}

// Foreign are INFERA_* names that others read: the worker and the engine,
// the helper marker, the project's test rigs. The unknown-name check
// leaves them alone.
var Foreign = map[string]string{
	"INFERA_ADVERTISE_IP":     "the node address the worker advertises (set by the advertise-ip check when unset)",
	"INFERA_KVD_AIS":          "the engine's switch for GPU-direct L3 (hipFile) in the kvd connector",
	"INFERA_KVD_GPU_DIRECT":   "the deprecated name of INFERA_KVD_AIS",
	"INFERA_EXEC_HELPER":      "marks infera-exec's own helper child",
	"INFERA_EXEC_BIN":         "tests: the binary under test",
	"INFERA_EXEC":             "tests: the binary under test, in stories",
	"INFERA_EXEC_STAGED":      "tests: the staged copy stories link",
	"INFERA_REQUIRE_SANDBOX":  "tests: fail instead of skipping container tests",
	"INFERA_REQUIRE_FIXTURES": "tests: fail instead of skipping fixture tests",
	"INFERA_RUNTIME_TESTS":    "tests: run the container runtime tests (make test-runtime)",
	"INFERA_REQUIRE_RUNTIME":  "tests: fail instead of skipping the container runtime tests",
	"INFERA_OVERLAY_ARCHIVE":  "tests: the overlay image the container runtime tests load",
}

// known reports whether infera-exec or someone it knows reads name.
func known(name string) bool {
	if _, ok := Foreign[name]; ok {
		return true
	}
	for _, v := range Vars {
		if v.Name == name {
			return true
		}
	}
	return false
}

// UnknownNames warns about the INFERA_* (and PAYLOAD_*) variables that
// look like a typo of one infera-exec knows, or like one it reads cut
// short or with words added: such a name is otherwise silently ignored.
// payload are the names the payload's own code reads (the worker, the
// router, the kvd daemon; overlay.PayloadEnvNames): set in correct
// deployments, they are never flagged. A name that is neither known nor
// near a known one is left alone: it belongs to someone else (a newer
// payload, the operator's own tooling), and a warning on every correct
// pod teaches operators to ignore warnings.
func UnknownNames(env *environ.Env, payload []string) []string {
	theirs := make(map[string]bool, len(payload))
	for _, n := range payload {
		theirs[n] = true
	}
	var names []string
	for _, name := range env.Names() {
		if (strings.HasPrefix(name, "INFERA_") || strings.HasPrefix(name, "PAYLOAD_")) && !known(name) && !theirs[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var warns []string
	typos, ours := allNames(), make([]string, 0, len(Vars))
	for _, v := range Vars {
		ours = append(ours, v.Name)
	}
	for _, n := range names {
		// A typo of anyone's name, or one of infera-exec's cut short or
		// grown at a word (INFERA_ENGINE_READY, INFERA_EXEC_LOG_FORMAT).
		if c := closest.Variable(n, typos, ours); c != "" {
			warns = append(warns, n+" is not a variable infera-exec reads, and it is ignored; did you mean "+c+"?")
		}
	}
	return warns
}

func allNames() []string {
	out := make([]string, 0, len(Vars)+len(Foreign))
	for _, v := range Vars {
		out = append(out, v.Name)
	}
	for n := range Foreign {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Closest is the candidate s is probably a typo of, "" if none.
func Closest(s string, candidates []string) string { return closest.Name(s, candidates) }

// HelpEnvironment is the environment part of --help: every variable of
// Vars with its meaning and default, wrapped to 78 columns.
func HelpEnvironment() string {
	var b strings.Builder
	b.WriteString("Environment (switches: " + SwitchGrammar + "; unset or empty is\nthe default; an INFERA_* name near one of these is a warning):\n")
	for _, v := range Vars {
		text := v.Meaning
		if v.Default != "" {
			text += " (default " + v.Default + ")"
		}
		writeWrapped(&b, v.Name, text, 31)
	}
	return b.String()
}

// writeWrapped prints "  NAME  text" with text starting at column col,
// wrapped at 78 columns and indented under itself.
func writeWrapped(b *strings.Builder, name, text string, col int) {
	const width = 78
	line := "  " + name
	if len(line) >= col-1 {
		b.WriteString(line + "\n")
		line = ""
	}
	line += strings.Repeat(" ", col-len(line))
	n := 0
	for _, w := range strings.Fields(text) {
		if n > 0 && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line, n = strings.Repeat(" ", col), 0
		}
		if n > 0 {
			line += " "
		}
		line += w
		n++
	}
	b.WriteString(line + "\n")
}
