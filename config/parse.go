package config

import (
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/infera/infera-exec/internal/closest"
)

// SwitchGrammar is the one grammar of every on/off variable.
const SwitchGrammar = "1/true/yes/on or 0/false/no/off"

// ParseSwitch reads an on/off value: 1, true, yes, on are on; 0, false,
// no, off and the empty string are off; case and surrounding blanks do
// not matter. ok is false for anything else. Every on/off value
// infera-exec reads, its own and the engine's it looks at, uses it.
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
func readSwitch(name, v string) (bool, error) {
	on, ok := ParseSwitch(v)
	if !ok {
		return false, &Error{fmt.Sprintf("%s=%q is not a switch value: use %s", name, v, SwitchGrammar)}
	}
	return on, nil
}

// readLegacySwitch reads a switch that v0.2.2 took as on whenever it was
// set to anything: values outside the grammar keep that meaning, and
// 0/false/no/off, now off, are named as a change.
func readLegacySwitch(name, v string) (on bool, warn string) {
	on, ok := ParseSwitch(v)
	switch {
	case !ok:
		return true, fmt.Sprintf("%s=%q is not a switch value (%s); taken as on, as v0.2.2 took any non-empty value", name, v, SwitchGrammar)
	case !on && strings.TrimSpace(v) != "":
		return false, fmt.Sprintf("%s=%q is off; v0.2.2 read any non-empty value, this one too, as on: set it to 1 to keep that, or unset it", name, v)
	}
	return on, ""
}

var providerRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9_]+$`) })

// providerName reports whether v can name an RDMA provider.
func providerName(v string) bool { return providerRE().MatchString(v) }

// parentOfBin is the payload root a binary at exe belongs to: the parent
// of the directory holding it (PAYLOAD/bin/infera-exec).
func parentOfBin(exe string) string { return filepath.Dir(filepath.Dir(exe)) }

// Requirement is what the deployment asks of the native tree
// (INFERA_REQUIRE_NATIVE).
type Requirement struct {
	Raw   string   `json:"raw"`
	All   bool     `json:"all,omitempty"`   // on/all: the tree must exist; everything it declares is required
	Auto  bool     `json:"auto,omitempty"`  // auto: what the worker's arguments imply is required
	Names []string `json:"names,omitempty"` // explicit list, sorted, distinct
	// Sources says where each implied name came from.
	Sources map[string]string `json:"sources,omitempty"`
}

// None reports whether nothing is required.
func (r Requirement) None() bool { return !r.All && len(r.Names) == 0 }

func (r Requirement) String() string {
	switch {
	case r.All:
		return "the native tree and all it declares"
	case len(r.Names) == 0:
		return "nothing"
	}
	return strings.Join(r.Names, " ")
}

var capNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`) })

// CapabilityName reports whether w is a well-formed capability name:
// lower-case letters, digits, '_', '.', '-', starting with a letter or
// digit. The one grammar of names in INFERA_REQUIRE_NATIVE and in a native
// tree's CAPABILITIES file.
func CapabilityName(w string) bool { return capNameRE().MatchString(w) }

// Capabilities names the capabilities infera-exec knows the meaning of,
// the vocabulary of INFERA_REQUIRE_NATIVE. A payload may declare others;
// they are kept and reported, with a note.
var Capabilities = map[string]string{
	"mooncake": "Mooncake transfer engine (prefill/decode KV transfer)",
	"hipfile":  "hipFile GPU-direct storage for the kvd L3 cache (vLLM only)",
}

// KnownCapabilities is the names of Capabilities, sorted.
func KnownCapabilities() []string { return slices.Sorted(maps.Keys(Capabilities)) }

// SuggestCapability is "; did you mean NAME?" for a word close to a known
// capability, else "".
func SuggestCapability(w string) string {
	if c := closest.Name(w, KnownCapabilities()); c != "" {
		return "; did you mean " + c + "?"
	}
	return ""
}

// ParseRequirement parses INFERA_REQUIRE_NATIVE: a switch value (see
// ParseSwitch), all or none, or a comma- or space-separated list of
// names, in which "auto" stands for what the worker's arguments imply.
func ParseRequirement(raw string) (Requirement, error) {
	r := Requirement{Raw: raw}
	v := strings.ToLower(strings.TrimSpace(raw))
	if on, ok := ParseSwitch(v); ok {
		r.All = on
		return r, nil
	}
	switch v {
	case "all":
		r.All = true
		return r, nil
	case "none":
		return r, nil
	}
	var names []string
	for _, w := range splitList(v) {
		if w == "auto" {
			r.Auto = true
			continue
		}
		if !CapabilityName(w) {
			return Requirement{}, fmt.Errorf("INFERA_REQUIRE_NATIVE=%q: %q is not a capability name%s; use on/all, off/none, auto, or a comma-separated list such as \"mooncake,hipfile\"", raw, w, SuggestCapability(w))
		}
		names = append(names, w)
	}
	slices.Sort(names)
	r.Names = slices.Compact(names)
	return r, nil
}

// Family is an ABI family named by INFERA_ABI_FAMILY: rocmN-py3XX, or
// py3XX for a container without ROCm.
type Family struct {
	Raw     string // as given
	ROCm    int    // the ROCm major; 0: none
	PyMajor int
	PyMinor int
}

// No leading zeros and at most three digits, so the name round-trips and no
// number overflows.
var familyRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(?:rocm([1-9]\d{0,2})-)?py(\d)([1-9]\d{0,2}|0)$`)
})

// ParseFamily parses an INFERA_ABI_FAMILY value such as rocm7-py312 or py311.
func ParseFamily(s string) (Family, error) {
	m := familyRE().FindStringSubmatch(s)
	if m == nil {
		return Family{}, fmt.Errorf("INFERA_ABI_FAMILY=%q: expected rocmN-py3XX (e.g. rocm7-py312) or py3XX", s)
	}
	f := Family{Raw: s}
	f.ROCm, _ = strconv.Atoi(m[1])
	f.PyMajor, _ = strconv.Atoi(m[2])
	f.PyMinor, _ = strconv.Atoi(m[3])
	if f.PyMajor != 3 {
		return Family{}, fmt.Errorf("INFERA_ABI_FAMILY=%q: payload trees are built for CPython 3 only", s)
	}
	return f, nil
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
