//go:generate go test -run ^TestBuiltinGenerated$ -update-builtin .

// Package rules is the format of the preflight's model-aware rules: what a
// deployment learned about a model meeting an engine build and a pod, kept
// as data. A rule names the engines and engine versions it is about,
// conditions over facts infera-exec knows or reads cheaply (the worker's
// arguments, its environment, the payload's capabilities, the model's
// config.json, and a few facts derived in Go), a severity, the message
// (cause and fix) and the rationale (the evidence). Built-in rules are
// decoded at build time (builtin_gen.go); a payload adds its own in
// rules/*.toml beside patches/.
package rules

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
	goversion "github.com/hashicorp/go-version"
	"github.com/infera/infera-exec/internal/boundedread"
)

// Rule is one rule, as one TOML file holds it.
type Rule struct {
	ID        string   `toml:"id"`
	Summary   string   `toml:"summary"`
	Engines   []string `toml:"engines"`  // vllm, sglang; empty: any
	Versions  string   `toml:"versions"` // hashicorp/go-version constraint on the engine's release
	Severity  string   `toml:"severity"` // error or warn
	Message   string   `toml:"message"`  // the cause, as the operator reads it
	Fix       string   `toml:"fix"`      // what to do
	Rationale string   `toml:"rationale"`
	When      []Cond   `toml:"when"` // all must hold
	Source    string   `toml:"-"`    // builtin:<file> or the payload file

	constraint goversion.Constraints
}

// Cond is one condition over a fact: its value is one of In, none of
// NotIn (an absent fact is none of them), or the fact is Present or
// Absent. A fact with several values (architectures, capabilities) is in
// In when any value is.
type Cond struct {
	Fact    string   `toml:"fact"`
	In      []string `toml:"in"`
	NotIn   []string `toml:"not_in"`
	Present bool     `toml:"present"`
	Absent  bool     `toml:"absent"`
}

// Severities a rule may have.
const (
	Error = "error"
	Warn  = "warn"
)

// Engines rules may name.
var Engines = []string{"vllm", "sglang"}

// factPrefixes are the families of facts read from the command and the
// environment; Derived are the facts computed in Go.
var factPrefixes = []string{"arg:", "flag:", "env:", "config:"}

// Derived are the facts the preflight computes, with what each says.
var Derived = map[string]string{
	"engine":                       "the engine the command starts: vllm, sglang, kvd",
	"module":                       "the Python module run with -m (infera.engine.vllm), or the console script (vllm)",
	"capability":                   "the capabilities of the payload's native tree for this container",
	"kv_cache_dtype":               "vLLM's KV cache dtype as the worker will run it: --kv-cache-dtype, else infera.engine.vllm's default (fp8_e4m3 unless INFERA_DEFAULT_KV_FP8=0), else auto",
	"model.architecture_supported": "true when the installed engine registers every architecture of config.json, false when it registers none of one; unknown (skipped with a note) for remote code",
	"host.gpu_direct_storage":      "true when GPU-direct storage is there: the hipfile capability and a PCI device exposing P2PDMA memory (/sys/bus/pci/devices/*/p2pmem)",
	"memory.limit_below_weights":   "true when the container's memory cgroup limit is below the model's weights on disk",
}

// KnownFact reports whether a rule may name fact.
func KnownFact(fact string) bool {
	if _, ok := Derived[fact]; ok {
		return true
	}
	for _, p := range factPrefixes {
		if strings.HasPrefix(fact, p) && len(fact) > len(p) {
			return true
		}
	}
	return false
}

var idRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`) })

// FileError is a rule file that does not parse or says something
// impossible, with the line it is on (0 when no line is to blame).
type FileError struct {
	File string
	Line int
	Err  error
}

func (e *FileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("rule file %s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("rule file %s: %v", e.File, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// Parse reads one rule file. Unknown keys are an error: a misspelt
// "not_in" must not turn into a condition that always holds.
func Parse(data []byte, source string) (*Rule, error) {
	var r Rule
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&r)
	if err != nil {
		line := 0
		var pe toml.ParseError
		if errors.As(err, &pe) {
			line = pe.Position.Line
			err = errors.New(pe.Message)
		}
		return nil, &FileError{File: source, Line: line, Err: err}
	}
	if un := md.Undecoded(); len(un) > 0 {
		last := un[0][len(un[0])-1]
		return nil, &FileError{File: source, Line: lineOf(data, last, 0), Err: fmt.Errorf("unknown key %s", un[0])}
	}
	r.Source = source
	if key, err := r.validate(); err != nil {
		key, nth, _ := strings.Cut(key, "#")
		n, _ := strconv.Atoi(nth)
		return nil, &FileError{File: source, Line: lineOf(data, key, n), Err: err}
	}
	return &r, nil
}

// lineOf is the line where key is set for the nth time, from 0 ("key ="
// at a line's start), or 0.
func lineOf(data []byte, key string, nth int) int {
	if key == "" {
		return 0
	}
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if rest, ok := strings.CutPrefix(l, key); ok && strings.HasPrefix(strings.TrimSpace(rest), "=") {
			if nth == 0 {
				return i + 1
			}
			nth--
		}
	}
	return 0
}

// validate checks a decoded rule; key names the offending key.
func (r *Rule) validate() (key string, err error) {
	switch {
	case !idRE().MatchString(r.ID):
		return "id", fmt.Errorf("id %q: want lower-case letters, digits, '.', '_' or '-'", r.ID)
	case strings.TrimSpace(r.Summary) == "":
		return "summary", fmt.Errorf("%s: summary is empty", r.ID)
	case r.Severity != Error && r.Severity != Warn:
		return "severity", fmt.Errorf("%s: severity %q: want error or warn", r.ID, r.Severity)
	case strings.TrimSpace(r.Message) == "" || strings.TrimSpace(r.Fix) == "":
		return "message", fmt.Errorf("%s: message and fix must both say something", r.ID)
	case strings.TrimSpace(r.Rationale) == "":
		return "rationale", fmt.Errorf("%s: rationale is empty: say what the rule is known from", r.ID)
	case len(r.When) == 0:
		return "fact", fmt.Errorf("%s: no [[when]] condition", r.ID)
	}
	for _, e := range r.Engines {
		if !slices.Contains(Engines, e) {
			return "engines", fmt.Errorf("%s: engine %q: want one of %s", r.ID, e, strings.Join(Engines, ", "))
		}
	}
	if r.Versions != "" {
		if len(r.Engines) == 0 {
			return "versions", fmt.Errorf("%s: versions without engines: whose version?", r.ID)
		}
		if r.constraint, err = goversion.NewConstraint(r.Versions); err != nil {
			return "versions", fmt.Errorf("%s: versions %q: %w", r.ID, r.Versions, err)
		}
	}
	for i, c := range r.When {
		ops := 0
		for _, on := range []bool{len(c.In) > 0, len(c.NotIn) > 0, c.Present, c.Absent} {
			if on {
				ops++
			}
		}
		switch {
		case !KnownFact(c.Fact):
			return fmt.Sprintf("fact#%d", i), fmt.Errorf("%s: condition %d: fact %q: want arg:--NAME, flag:--NAME, env:NAME, config:FIELD or one of %s", r.ID, i+1, c.Fact, strings.Join(derivedNames(), ", "))
		case ops != 1:
			return fmt.Sprintf("fact#%d", i), fmt.Errorf("%s: condition %d (%s): want exactly one of in, not_in, present, absent", r.ID, i+1, c.Fact)
		}
	}
	return "", nil
}

func derivedNames() []string {
	var out []string
	for n := range Derived {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// prepare parses the version constraint of a rule not read by Parse (the
// generated built-ins).
func (r *Rule) prepare() error {
	var err error
	if r.Versions != "" {
		r.constraint, err = goversion.NewConstraint(r.Versions)
	}
	return err
}

var releaseRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\d+(\.\d+)*`) })

// InVersions says whether the engine's version is in the rule's range;
// ok false when the version cannot be compared (unknown, not a release).
func (r *Rule) InVersions(version string) (in, ok bool) {
	if r.constraint == nil {
		return true, true
	}
	v, err := goversion.NewVersion(releaseRE().FindString(version))
	if version == "" || err != nil {
		return false, false
	}
	return r.constraint.Check(v), true
}

//go:embed builtin
var builtinFS embed.FS

// Builtin returns the project's own rules, decoded from builtin/*.toml at
// build time (go generate ./preflight/rules; a test holds the two equal).
func Builtin() []*Rule {
	rs := builtinRules()
	for _, r := range rs {
		if err := r.prepare(); err != nil {
			panic(fmt.Sprintf("built-in rule %s: %v", r.Source, err)) // the generation test parsed it
		}
	}
	return rs
}

func builtinFromTOML() ([]*Rule, string, error) {
	sub, err := fs.Sub(builtinFS, "builtin")
	if err != nil {
		return nil, "", err
	}
	files, err := fs.Glob(sub, "*.toml")
	if err != nil {
		return nil, "", err
	}
	return loadFiles(files, "builtin:", func(f string) ([]byte, error) { return fs.ReadFile(sub, f) })
}

// maxFileBytes caps a payload rule file.
const maxFileBytes = 256 << 10

// LoadDir reads dir/*.toml (a payload's rules/), each a regular file of
// at most 256 KiB, as a start and a payload build both read them. A
// missing directory holds no rules.
func LoadDir(dir string) ([]*Rule, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.toml"))
	if err != nil || len(files) == 0 {
		return nil, err
	}
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	rs, _, err := loadFiles(files, dir+"/", func(f string) ([]byte, error) { return boundedread.File(filepath.Join(dir, f), maxFileBytes) })
	return rs, err
}

func loadFiles(files []string, prefix string, read func(string) ([]byte, error)) ([]*Rule, string, error) {
	sort.Strings(files)
	var out []*Rule
	h := sha256.New()
	for _, f := range files {
		data, err := read(f)
		if err != nil {
			return nil, "", &FileError{File: prefix + f, Err: err}
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(data))
		h.Write(data)
		r, err := Parse(data, prefix+f)
		if err != nil {
			return nil, "", err
		}
		out = append(out, r)
	}
	return out, hex.EncodeToString(h.Sum(nil)), nil
}

// Merge is the built-in rules with a payload's: a payload rule with a
// built-in's id replaces it (newer knowledge); one id twice in the
// payload is an error.
func Merge(builtin, payload []*Rule) ([]*Rule, error) {
	out := slices.Clone(builtin)
	seen := map[string]bool{}
	for _, r := range payload {
		if seen[r.ID] {
			return nil, &FileError{File: r.Source, Err: fmt.Errorf("id %s is used by another rule file of the payload", r.ID)}
		}
		seen[r.ID] = true
		if i := slices.IndexFunc(out, func(b *Rule) bool { return b.ID == r.ID }); i >= 0 {
			out[i] = r
		} else {
			out = append(out, r)
		}
	}
	return out, nil
}
