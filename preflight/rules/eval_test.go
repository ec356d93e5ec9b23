package rules

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rule parses a rule of the given scope and one condition, as a payload
// file would carry it.
func rule(t *testing.T, scope, cond string) *Rule {
	t.Helper()
	r, err := Parse([]byte("id = \"r\"\nsummary = \"s\"\nseverity = \"error\"\nmessage = \"m\"\nfix = \"f\"\nrationale = \"r\"\n"+scope+"\n[[when]]\nfact = \"arg:--x\"\n"+cond+"\n"), "r.toml")
	require.NoError(t, err)
	return r
}

// Each kind of condition over every shape of fact: none, one value, several
// values (a fact such as architectures or capabilities), one of them
// matching. An absent fact is none of not_in; "absent" holds for no value
// only, "present" for any number of them.
func TestCondOverValues(t *testing.T) {
	values := map[string][]string{
		"none":            nil,
		"one match":       {"a"},
		"one other":       {"z"},
		"two, one match":  {"z", "a"},
		"two, none match": {"y", "z"},
		"empty string":    {""},
	}
	for cond, want := range map[string]map[string]Outcome{
		"absent = true":       {"none": Holds, "one match": DoesNot, "one other": DoesNot, "two, one match": DoesNot, "two, none match": DoesNot, "empty string": DoesNot},
		"present = true":      {"none": DoesNot, "one match": Holds, "one other": Holds, "two, one match": Holds, "two, none match": Holds, "empty string": Holds},
		`in = ["a", "b"]`:     {"none": DoesNot, "one match": Holds, "one other": DoesNot, "two, one match": Holds, "two, none match": DoesNot, "empty string": DoesNot},
		`not_in = ["a", "b"]`: {"none": Holds, "one match": DoesNot, "one other": Holds, "two, one match": DoesNot, "two, none match": Holds, "empty string": Holds},
	} {
		r := rule(t, "", cond)
		for name, vals := range values {
			v := r.Eval("vllm", "", func(f string) Value {
				require.Equal(t, "arg:--x", f)
				return Value{Values: vals}
			})
			assert.Equal(t, want[name], v.Outcome, "%s over %s %q", cond, name, vals)
		}
	}
}

// A rule's engines and version range decide before any fact is read: a
// version outside the range is NotFor, one that cannot be compared is
// CannotTell, and only a version in the range lets the conditions decide.
func TestEvalScopesByEngineAndVersion(t *testing.T) {
	for _, c := range []struct {
		scope, engine, version string
		want                   Outcome
	}{
		{`engines = ["vllm"]`, "vllm", "", Holds},
		{`engines = ["vllm"]`, "sglang", "", NotFor},
		{`engines = ["vllm"]`, "", "", NotFor},
		{`engines = ["vllm", "sglang"]`, "sglang", "0.5.1", Holds},
		{"engines = [\"vllm\"]\nversions = \">= 0.10, < 0.12\"", "vllm", "0.10.0", Holds},
		{"engines = [\"vllm\"]\nversions = \">= 0.10, < 0.12\"", "vllm", "0.11.2+rocm700", Holds},
		{"engines = [\"vllm\"]\nversions = \">= 0.10, < 0.12\"", "vllm", "0.12.0", NotFor},
		{"engines = [\"vllm\"]\nversions = \">= 0.10, < 0.12\"", "vllm", "0.9.2", NotFor},
		{"engines = [\"vllm\"]\nversions = \">= 0.10, < 0.12\"", "vllm", "", CannotTell},
		{"engines = [\"vllm\"]\nversions = \">= 0.10, < 0.12\"", "vllm", "main", CannotTell},
		{"engines = [\"vllm\"]\nversions = \">= 0.10, < 0.12\"", "sglang", "0.11.0", NotFor},
		{"engines = [\"sglang\"]\nversions = \"< 1\"", "sglang", "0.5.16", Holds},
		{"engines = [\"sglang\"]\nversions = \"< 1\"", "sglang", "1.0.0", NotFor},
	} {
		t.Run(fmt.Sprintf("%s/%s-%s", c.scope, c.engine, c.version), func(t *testing.T) {
			r := rule(t, c.scope, "present = true")
			read := false
			v := r.Eval(c.engine, c.version, func(string) Value { read = true; return Value{Values: []string{"1"}} })
			assert.Equal(t, c.want, v.Outcome, v.Note)
			assert.Equal(t, c.want == Holds, read, "facts are read only for a rule in scope")
			if c.want != Holds {
				assert.NotEmpty(t, v.Note, "an out-of-scope or undecidable rule says why")
			}
		})
	}
}

// A fact that cannot be read makes the rule CannotTell with its reason,
// whatever the condition; the facts before it are still reported.
func TestEvalUnknownFact(t *testing.T) {
	r := rule(t, "", "absent = true")
	v := r.Eval("vllm", "", func(string) Value { return Value{Unknown: true, Why: "config.json is not JSON", Read: "config.json"} })
	assert.Equal(t, CannotTell, v.Outcome)
	assert.Equal(t, "config.json is not JSON", v.Note)
	assert.Equal(t, []string{"config.json"}, v.Read)
}
