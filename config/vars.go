package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/infera/infera-exec/internal/closest"
	"github.com/infera/infera-exec/internal/environ"
)

// Var is one environment variable infera-exec reads. Vars is the one list
// of them: --help prints it, the unknown-name check suggests from it, and a
// test holds the README's table to it.
type Var struct {
	Name    string
	Meaning string // one line for --help
	Default string // "" when unset means nothing
}

// Vars are the variables Load reads, in the order --help lists them.
var Vars = []Var{
	{"PAYLOAD_ROOT", "payload directory", "the parent of the directory holding this binary"},
	{"INFERA_PYTHON", "interpreter to detect and probe", DefaultPython},
	{"INFERA_PYTHON_TIMEOUT", "how long it may take to answer", DefaultPythonTimeout.String()},
	{"INFERA_REQUIRE_NATIVE", `capabilities the deployment needs: a list such as "mooncake,hipfile"; on (see switches) or all = the native tree and all it declares; auto = what the worker's arguments imply; off or none = none`, "none"},
	{"INFERA_ENGINE_READY_TIMEOUT", `seconds the worker waits for engine /health: "2400", "90.5", "90m" or "2h"; passed to the worker as whole seconds`, fmt.Sprint(DefaultReadyTimeout)},
	{"INFERA_EXEC_CHDIR", "working directory of the worker", DefaultChdir},
	{"INFERA_EXEC_INIT", "switch: stay as a minimal init (PID 1 or subreaper) that forwards signals to the worker and reaps zombies, like --init", "off"},
	{"INFERA_EXEC_INIT_GROUP", "switch: as INFERA_EXEC_INIT, forwarding signals to the worker's process group, like --init-group", "off"},
	{"INFERA_ABI_FAMILY", "force the family, e.g. rocm7-py312 (debugging)", ""},
	{"INFERA_HOST_LIBIONIC", "host RDMA provider; set but missing is a warning", DefaultHostLibionic},
	{"INFERA_RDMA_PROVIDER", "provider the host build replaces", DefaultRDMAProvider},
	{"SYSFS_PATH", "sysfs root, as libibverbs reads it", DefaultSysfs},
	{"INFERA_SKIP_ENGINE_PATCHES", "switch: apply no engine patches (v0.2.2: any non-empty value; still on, with a warning)", "off"},
	{"INFERA_REQUIRE_PATCHES", "patch ids that must be in force, else exit 65", ""},
	{"INFERA_EXEC_STATE_DIR", "cache of the engine location", "/run/infera-exec, else /tmp/infera-exec"},
	{"INFERA_PREFLIGHT", "switch: run the preflight checks", "on"},
	{"INFERA_PREFLIGHT_SKIP", "preflight checks to skip, e.g. rdma,shm", ""},
	{"INFERA_PREFLIGHT_TIMEOUT", "how long a filesystem that may not answer (NFS, FUSE, ...) may take", DefaultPreflightTimeout.String()},
	{"INFERA_PREFLIGHT_ON_TIMEOUT", "warn: start the worker anyway; error: refuse (78)", "warn"},
	{"INFERA_PREFLIGHT_SHM_MIN", "the shm check's minimum size of /dev/shm", "1Gi"},
	{"INFERA_PREFLIGHT_NOFILE_MIN", "the nofile check's minimum open-file hard limit", fmt.Sprint(DefaultNofileMin)},
	{"INFERA_ALLOW_TCP_KV", "switch: prefill/decode without RDMA only warns", "off"},
	{"INFERA_EXEC_LOG", "text or json log lines on stderr", "text"},
	{"INFERA_EXEC_REPORT", "report file; off = none", "/run/infera-exec/report.json, else /tmp/infera-exec/report.json"},
	{"ROCM_PATH", "ROCm root searched before /opt/rocm", ""},
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

// unknownNames warns about every INFERA_* variable nobody reads: a
// misspelt name is otherwise silently ignored.
func unknownNames(env *environ.Env) []string {
	var names []string
	for _, name := range env.Names() {
		if strings.HasPrefix(name, "INFERA_") && !known(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var warns []string
	for _, n := range names {
		w := n + " is not a variable infera-exec reads, and it is ignored"
		if c := Closest(n, allNames()); c != "" {
			w += "; did you mean " + c + "?"
		} else {
			w += " (infera-exec --help lists the variables)"
		}
		warns = append(warns, w)
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

// SwitchGrammar is the one grammar of every on/off variable.
const SwitchGrammar = "1/true/yes/on or 0/false/no/off"

// ParseSwitch reads an on/off value: 1, true, yes, on are on; 0, false,
// no, off and the empty string are off (every switch but INFERA_PREFLIGHT
// defaults to off, and that one reads empty as unset); case and
// surrounding blanks do not matter. ok is false for anything else.
func ParseSwitch(v string) (on, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true, true
	case "", "0", "false", "no", "off":
		return false, true
	}
	return false, false
}

// readSwitch reads a switch introduced after v0.2.2: a value outside the
// grammar is a configuration error naming it.
func readSwitch(env *environ.Env, name string) (bool, error) {
	v := env.Value(name)
	on, ok := ParseSwitch(v)
	if !ok {
		return false, &Error{fmt.Sprintf("%s=%q is not a switch value: use %s", name, v, SwitchGrammar)}
	}
	return on, nil
}

// readLegacySwitch reads a switch that v0.2.2 took as on whenever it was
// set to anything: values outside the grammar keep that meaning, and
// 0/false/no/off, now off, are named as a change.
func readLegacySwitch(env *environ.Env, name string) (on bool, warn string) {
	v := env.Value(name)
	on, ok := ParseSwitch(v)
	switch {
	case !ok:
		return true, fmt.Sprintf("%s=%q is not a switch value (%s); taken as on, as v0.2.2 took any non-empty value", name, v, SwitchGrammar)
	case !on && strings.TrimSpace(v) != "":
		return false, fmt.Sprintf("%s=%q is off; v0.2.2 read any non-empty value, this one too, as on: set it to 1 to keep that, or unset it", name, v)
	}
	return on, ""
}

// HelpEnvironment is the environment part of --help: every variable of
// Vars with its meaning and default, wrapped to 78 columns.
func HelpEnvironment() string {
	var b strings.Builder
	b.WriteString("Environment (switches: " + SwitchGrammar + "; unset or empty is\nthe default; an unknown INFERA_* name is a warning):\n")
	for _, v := range Vars {
		text := v.Meaning
		if v.Default != "" {
			text += " (default " + v.Default + ")"
		}
		writeWrapped(&b, v.Name, text)
	}
	return b.String()
}

// writeWrapped prints "  NAME  text" with text wrapped at 78 columns and
// indented under itself.
func writeWrapped(b *strings.Builder, name, text string) {
	const col, width = 31, 78
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
