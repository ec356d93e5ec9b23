package preflight

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/closest"
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/memcg"
	"github.com/infera/infera-exec/internal/workerargs"
	"github.com/infera/infera-exec/preflight/rules"
)

// Engine is where the worker's engine package is, as the patch step
// locates it (patches.Early.Engine): its directory, its version, and
// what told ("" dir: not found, from says why).
type Engine func(name string) (dir, version, from string)

// ConfigError is a configuration the rules cannot run with: a payload
// rule file that does not parse, or an INFERA_PREFLIGHT_SKIP name that is
// no check and no rule. Exit code 78.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ExitCode is EX_CONFIG.
func (e *ConfigError) ExitCode() int { return 78 }

// LoadRules is the built-in rules with the payload's rules/*.toml.
func LoadRules(payloadRoot string) ([]*rules.Rule, error) {
	var extra []*rules.Rule
	if payloadRoot != "" {
		var err error
		extra, err = rules.LoadDir(filepath.Join(payloadRoot, "rules"))
		if err != nil {
			return nil, &ConfigError{err}
		}
	}
	rs, err := rules.Merge(rules.Builtin(), extra)
	if err != nil {
		return nil, &ConfigError{err}
	}
	return rs, nil
}

// checkSkips refuses an INFERA_PREFLIGHT_SKIP name that is no check and
// no rule, naming the closest: a typo would leave a rule on that the
// operator meant off.
func checkSkips(skip []string, rs []*rules.Rule) error {
	known := Names()
	for _, r := range rs {
		known = append(known, r.ID)
	}
	for _, s := range skip {
		if slices.Contains(known, s) {
			continue
		}
		msg := fmt.Sprintf("INFERA_PREFLIGHT_SKIP names %q, which is no check and no rule", s)
		if c := closest.Name(s, known); c != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", c)
		}
		return &ConfigError{logging.WithBrief(fmt.Errorf("%s (checks and rules: %s)", msg, strings.Join(known, ", ")), msg)}
	}
	return nil
}

// runRules evaluates every rule not skipped; the facts they ask for are
// read once.
func runRules(in *Facts, skip []string) []Result {
	var out []Result
	engine := string(in.Args.Engine)
	for _, r := range in.Rules {
		name := r.ID
		if slices.Contains(skip, r.ID) {
			out = append(out, Result{Name: name, Status: Skipped, Seen: "disabled by INFERA_PREFLIGHT_SKIP", Rule: r.Source})
			continue
		}
		start := time.Now()
		version := ""
		if len(r.Engines) > 0 && r.Versions != "" {
			version = in.engine().version
		}
		v := r.Eval(engine, version, in.fact)
		res := Result{Name: name, Rule: r.Source, Read: v.Read}
		switch v.Outcome {
		case rules.Holds:
			res.Status, res.Severity = Fail, Severity(r.Severity)
			res.Seen, res.Why, res.Do, res.Fix = strings.Join(v.Read, "; "), r.Message, r.Fix, r.Fix
		case rules.DoesNot:
			res.Status, res.Seen = Pass, strings.Join(v.Read, "; ")
		case rules.NotFor:
			res.Status, res.Seen = Pass, "does not apply: "+v.Note
		default:
			res.Status, res.Seen = Skipped, "cannot tell: "+v.Note
		}
		res.TookMicros = time.Since(start).Microseconds()
		out = append(out, res)
	}
	return out
}

// modelView is the model-dir operation's answer, asked once per run for
// the model-dir check and the rules.
func (in *Facts) modelView(full string) (modelView, fsprobe.Access, error) {
	if in.model == nil || in.model.path != full {
		v, acc, err := fsprobe.Call(in.Probe, modelDirOp, full, full)
		in.model = &modelAnswer{path: full, view: v, acc: acc, err: err}
	}
	return in.model.view, in.model.acc, in.model.err
}

type modelAnswer struct {
	path string
	view modelView
	acc  fsprobe.Access
	err  error
}

// modelConfig is config.json as the rules read it: decoded once, or why
// not.
type modelConfig struct {
	fields map[string]any
	why    string // "" when fields were read
	size   uint64 // the weights on disk, from the same operation
	shards int
}

func (in *Facts) config() *modelConfig {
	if in.cfg != nil {
		return in.cfg
	}
	c := &modelConfig{}
	in.cfg = c
	arg := in.Args.Model
	switch {
	case in.Args.ModelFrom == "":
		c.why = "no model in the command"
		return c
	case !workerargs.IsModelPath(arg):
		c.why = fmt.Sprintf("the model %s is a hub id, not a directory: config.json is not read", arg)
		return c
	}
	full := arg
	if !filepath.IsAbs(arg) {
		full = filepath.Join(in.Chdir, arg)
	}
	v, _, err := in.modelView(full)
	switch {
	case err != nil:
		c.why = fmt.Sprintf("the model directory could not be read: %v", err)
		return c
	case v.Missing || v.StatErr != "" || v.NotModel || v.ListErr != "":
		c.why = "the model directory could not be read (see model-dir)"
		return c
	}
	c.size, c.shards = v.Scan.Size, v.Scan.Count
	if v.ConfigErr != "" {
		c.why = fmt.Sprintf("%s/config.json: %s", full, v.ConfigErr)
		return c
	}
	if err := json.Unmarshal(v.Config, &c.fields); err != nil || c.fields == nil {
		c.fields, c.why = nil, fmt.Sprintf("%s/config.json %s", full, undecodable(err))
	}
	return c
}

// undecodable says why config.json gave no object: err is the decoder's
// (nil when the value decoded is not an object). Valid JSON nested deeper
// than the decoder reads (10000 levels) is said to be so, not called
// something else.
func undecodable(err error) string {
	var se *json.SyntaxError
	switch {
	case err == nil:
		return "is not a JSON object"
	case errors.As(err, &se) && strings.Contains(se.Error(), "exceeded max depth"):
		return fmt.Sprintf("nests deeper than the 10000 levels infera-exec reads (at byte %d); the rules that need it are not checked", se.Offset)
	case errors.As(err, &se):
		return fmt.Sprintf("is not valid JSON (%v)", err)
	}
	return fmt.Sprintf("is not a JSON object (%v)", err)
}

// field is a config.json field by dotted path
// (quantization_config.quant_method); a path the top level lacks is
// looked up under text_config, where multimodal models nest the language
// model's model_type, architectures and quantization_config.
func (c *modelConfig) field(path string) (any, bool) {
	get := func(m map[string]any) (any, bool) {
		var cur any = m
		for _, k := range strings.Split(path, ".") {
			obj, ok := cur.(map[string]any)
			if !ok {
				return nil, false
			}
			if cur, ok = obj[k]; !ok {
				return nil, false
			}
		}
		return cur, true
	}
	if v, ok := get(c.fields); ok {
		return v, true
	}
	if tc, ok := c.fields["text_config"].(map[string]any); ok {
		return get(tc)
	}
	return nil, false
}

func jsonValues(v any) []string {
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, jsonValues(e)...)
		}
		return out
	case bool:
		return []string{strconv.FormatBool(x)}
	case float64:
		return []string{strconv.FormatFloat(x, 'f', -1, 64)}
	}
	b, _ := json.Marshal(v)
	return []string{string(b)}
}

// fact answers one fact, once per run.
func (in *Facts) fact(name string) rules.Value {
	if v, ok := in.facts[name]; ok {
		return v
	}
	v := in.readFact(name)
	if in.facts == nil {
		in.facts = map[string]rules.Value{}
	}
	in.facts[name] = v
	return v
}

func (in *Facts) readFact(name string) rules.Value {
	show := func(label string, vals []string) rules.Value {
		if len(vals) == 0 {
			return rules.Value{Read: label + " not given"}
		}
		return rules.Value{Values: vals, Read: label + "=" + strings.Join(vals, ",")}
	}
	switch {
	case strings.HasPrefix(name, "arg:"):
		o := name[len("arg:"):]
		if f := in.Args.Option(o); f.Set {
			return rules.Value{Values: []string{f.Value}, Read: o + " " + f.Value}
		}
		return rules.Value{Read: o + " not given"}
	case strings.HasPrefix(name, "flag:"):
		o := name[len("flag:"):]
		if on, from, ok := in.Args.Switch(o); ok {
			return rules.Value{Values: []string{strconv.FormatBool(on)}, Read: from}
		}
		return rules.Value{Read: o + " not given"}
	case strings.HasPrefix(name, "env:"):
		k := name[len("env:"):]
		if v, ok := in.Env[k]; ok {
			return rules.Value{Values: []string{v}, Read: k + "=" + v}
		}
		return rules.Value{Read: k + " unset"}
	case strings.HasPrefix(name, "config:"):
		c := in.config()
		if c.why != "" {
			return rules.Value{Unknown: true, Why: c.why}
		}
		k := name[len("config:"):]
		v, _ := c.field(k)
		return show("config.json "+k, jsonValues(v))
	}
	switch name {
	case "engine":
		return show("engine", nonEmpty(string(in.Args.Engine)))
	case "module":
		return show("module", nonEmpty(module(in.Args)))
	case "capability":
		if !in.NativeKnown {
			return rules.Value{Unknown: true, Why: "the payload's native tree was not chosen"}
		}
		return show("capabilities", in.Capabilities)
	case "kv_cache_dtype":
		return in.kvCacheDtype()
	case "model.architecture_supported":
		return in.architectureSupported()
	case "host.gpu_direct_storage":
		return in.gpuDirectStorage()
	case "memory.limit_below_weights":
		return in.memoryBelowWeights()
	}
	return rules.Value{Unknown: true, Why: "no such fact: " + name}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// module is the Python module the command runs with -m, or the console
// script.
func module(a workerargs.Args) string {
	if _, m, ok := strings.Cut(a.EngineFrom, " -m "); ok {
		return m
	}
	if strings.HasPrefix(a.EngineFrom, "vllm") {
		return "vllm"
	}
	return ""
}

// kvCacheDtype is vLLM's KV cache dtype as the worker will run: the
// option, else the infera wrapper's default (fp8_e4m3 unless
// INFERA_DEFAULT_KV_FP8=0), else vLLM's own (auto).
func (in *Facts) kvCacheDtype() rules.Value {
	if f := in.Args.Option("--kv-cache-dtype"); f.Set {
		return rules.Value{Values: []string{f.Value}, Read: "--kv-cache-dtype " + f.Value}
	}
	if module(in.Args) == "infera.engine.vllm" {
		if v := in.Env["INFERA_DEFAULT_KV_FP8"]; v == "0" {
			return rules.Value{Values: []string{"auto"}, Read: "--kv-cache-dtype not given, INFERA_DEFAULT_KV_FP8=0: auto"}
		}
		return rules.Value{Values: []string{"fp8_e4m3"}, Read: "--kv-cache-dtype not given: infera.engine.vllm's default fp8_e4m3"}
	}
	return rules.Value{Values: []string{"auto"}, Read: "--kv-cache-dtype not given: auto"}
}

// engineLoc is the engine package, located once.
type engineLoc struct{ dir, version, from string }

func (in *Facts) engine() engineLoc {
	if in.eng == nil {
		in.eng = &engineLoc{}
		name := string(in.Args.Engine)
		if in.Engine != nil && (name == "vllm" || name == "sglang") {
			in.eng.dir, in.eng.version, in.eng.from = in.Engine(name)
		}
	}
	return *in.eng
}

var (
	entryRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?m)^EntryClass\s*=\s*(\[[^\]]*\]|[A-Za-z_][A-Za-z0-9_]*)`)
	})
	identRE     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`) })
	pluginGroup = "[vllm.general_plugins]"
)

// architectureSupported reads the installed engine's own list of
// architectures: vLLM's models/registry.py (every "Name": (module, class)
// entry), SGLang's srt/models/*.py EntryClass.
func (in *Facts) architectureSupported() rules.Value {
	c := in.config()
	if c.why != "" {
		return rules.Value{Unknown: true, Why: c.why}
	}
	archV, _ := c.field("architectures")
	archs := jsonValues(archV)
	if len(archs) == 0 {
		return rules.Value{Unknown: true, Why: "config.json names no architectures"}
	}
	if _, remote := c.fields["auto_map"]; remote {
		if on, _, _ := in.Args.Switch("--trust-remote-code"); on {
			return rules.Value{Unknown: true, Why: "the model brings its own code (auto_map in config.json, --trust-remote-code): the engine may load its classes from the model directory"}
		}
	}
	e := in.engine()
	if e.dir == "" {
		why := "the engine package was not located"
		if e.from != "" {
			why += ": " + e.from
		}
		return rules.Value{Unknown: true, Why: why}
	}
	known, read, why := registered(string(in.Args.Engine), e.dir)
	if why != "" {
		return rules.Value{Unknown: true, Why: why}
	}
	var missing []string
	for _, a := range archs {
		if !known[a] {
			missing = append(missing, a)
		}
	}
	seen := fmt.Sprintf("config.json architectures=%s; %s (%s, %d registered)", strings.Join(archs, ","), read, e.from, len(known))
	if len(missing) == 0 {
		return rules.Value{Values: []string{"true"}, Read: seen}
	}
	if string(in.Args.Engine) == "vllm" {
		if p := vllmPlugins(filepath.Dir(e.dir)); len(p) > 0 {
			return rules.Value{Unknown: true, Why: fmt.Sprintf("%s not in %s, but the vLLM plugins %s may register it", strings.Join(missing, ","), read, strings.Join(p, ", "))}
		}
	}
	return rules.Value{Values: []string{"false"}, Read: seen + "; not registered: " + strings.Join(missing, ",")}
}

// registered is the architectures an engine tree registers, and the
// file(s) read.
func registered(engine, dir string) (map[string]bool, string, string) {
	known := map[string]bool{}
	switch engine {
	case "vllm":
		p := filepath.Join(dir, "model_executor", "models", "registry.py")
		data, err := boundedread.File(p, 4<<20)
		if err != nil {
			return nil, "", fmt.Sprintf("vLLM's model registry could not be read: %v", err)
		}
		for _, name := range registryNames(data) {
			known[name] = true
		}
		return known, p, ""
	case "sglang":
		glob := filepath.Join(dir, "srt", "models", "*.py")
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			data, err := boundedread.File(f, 4<<20)
			if err != nil {
				continue
			}
			for _, m := range entryRE().FindAllSubmatch(data, -1) {
				for _, id := range identRE().FindAll(m[1], -1) {
					known[string(id)] = true
				}
			}
		}
		if len(files) == 0 {
			return nil, "", "SGLang's srt/models holds no model files under " + dir
		}
		return known, fmt.Sprintf("EntryClass of %d files in %s", len(files), filepath.Dir(glob)), ""
	}
	return nil, "", "not an engine whose registry is known"
}

// registryNames are the keys of vLLM's registry entries: every line
// that reads `"Name": (` after its indentation, Name an identifier. A
// scan of lines rather than a regular expression: the registry is tens of
// KB, read on every start of a vLLM worker, and a multi-line regular
// expression costs a millisecond on it.
func registryNames(data []byte) []string {
	var out []string
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimLeft(line, " \t")
		if len(line) < 4 || line[0] != '"' {
			continue
		}
		end := bytes.IndexByte(line[1:], '"')
		if end <= 0 || !isIdent(line[1:1+end]) {
			continue
		}
		rest := bytes.TrimLeft(line[2+end:], " \t")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		if rest = bytes.TrimLeft(rest[1:], " \t"); len(rest) > 0 && rest[0] == '(' {
			out = append(out, string(line[1:1+end]))
		}
	}
	return out
}

func isIdent(b []byte) bool {
	for i, c := range b {
		letter := c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return len(b) > 0
}

// vllmPlugins are the distributions in site that declare vLLM general
// plugins (which may register architectures out of tree).
func vllmPlugins(site string) []string {
	var out []string
	ents, _ := os.ReadDir(site)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".dist-info") {
			continue
		}
		data, err := boundedread.File(filepath.Join(site, e.Name(), "entry_points.txt"), 1<<20)
		if err == nil && strings.Contains(string(data), pluginGroup) {
			out = append(out, strings.TrimSuffix(e.Name(), ".dist-info"))
		}
	}
	return out
}

// gpuDirectStorage: the native tree declares hipfile, and a PCI device
// exposes P2PDMA memory (the kernel's /sys/bus/pci/devices/*/p2pmem),
// which hipFile's GPU-direct path needs.
func (in *Facts) gpuDirectStorage() rules.Value {
	hip := slices.Contains(in.Capabilities, "hipfile")
	glob := filepath.Join(in.Sysfs, "bus", "pci", "devices", "*", "p2pmem")
	p2p, _ := filepath.Glob(glob)
	read := fmt.Sprintf("native capabilities: %s; %s: %d", orNone(in.Capabilities), glob, len(p2p))
	if !in.NativeKnown {
		read = "no native tree; " + read
	}
	return rules.Value{Values: []string{strconv.FormatBool(hip && len(p2p) > 0)}, Read: read}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

// memoryBelowWeights compares the container's memory cgroup limit with
// the weights on disk.
func (in *Facts) memoryBelowWeights() rules.Value {
	lim, from, ok := MemoryLimit(in.CgroupRoot)
	if !ok {
		return rules.Value{Unknown: true, Why: "no memory limit could be read: " + from}
	}
	// The file by name: the cgroup's directory can be long, and --doctor
	// keeps to 80 columns.
	from = filepath.Base(from)
	if lim == 0 {
		return rules.Value{Values: []string{"false"}, Read: from + ": no limit"}
	}
	c := in.config()
	if c.shards == 0 {
		why := "the model's weights on disk are unknown"
		if c.why != "" {
			why += ": " + c.why
		}
		return rules.Value{Unknown: true, Why: why}
	}
	read := fmt.Sprintf("%s: %s; weights: %d files, %s", from, formatBytes(lim), c.shards, formatGB(c.size))
	return rules.Value{Values: []string{strconv.FormatBool(lim < c.size)}, Read: read}
}

// MemoryLimit is this process's memory cgroup limit in bytes (0: none)
// under root (SYSFS_PATH/fs/cgroup): cgroup v2's memory.max, else v1's
// memory.limit_in_bytes; and the file it came from (or why none).
func MemoryLimit(root string) (uint64, string, bool) {
	return memcg.Find(root).Limit()
}

func formatBytes(n uint64) string {
	if n%(1<<30) == 0 {
		return fmt.Sprintf("%dGi", n>>30)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
}
