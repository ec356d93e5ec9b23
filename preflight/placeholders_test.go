package preflight

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/workerargs"
)

func TestPlaceholdersRegisteredInOrder(t *testing.T) {
	idx := map[string]int{}
	for i, n := range Names() {
		idx[n] = i
	}
	order := []string{"placeholders", "model-dir", "shm", "nofile"}
	for i, n := range order {
		require.Contains(t, idx, n)
		if i > 0 {
			assert.Less(t, idx[order[i-1]], idx[n], "%s is reported before %s", order[i-1], n)
		}
	}
}

func TestPlaceholdersPass(t *testing.T) {
	in := &Facts{
		Args: workerargs.Parse([]string{"python3", "-m", "infera.engine.vllm", "--model", "/models/x", "a<b", "x>y", "<foo>", "<1A>", "<_A>", "<>", "< A >", "<a_B>"}),
		Env:  map[string]string{"<MODEL_DIR>": "names do not count", "HOST": "node-1", "LESS": "<x>"},
	}
	r := checkPlaceholders(in)
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, "no <UPPER_CASE> placeholder in 13 arguments and 3 environment variables", r.Seen)

	r = checkPlaceholders(&Facts{Args: workerargs.Parse([]string{"true"})})
	assert.Equal(t, "no <UPPER_CASE> placeholder in 1 argument and 0 environment variables", r.Seen)
}

// The check reads the environment as the container gave it (Given), not
// the worker's composed one: --doctor, which composes nothing, and a start
// see and count the same variables.
func TestPlaceholdersReadTheGivenEnvironment(t *testing.T) {
	given := map[string]string{"HOST": "<NODE>"}
	composed := map[string]string{"HOST": "<NODE>", "PYTHONPATH": "/overlay/py312", "INFERA_ENGINE_READY_TIMEOUT": "1800"}
	args := workerargs.Parse([]string{"true"})
	doctor := checkPlaceholders(&Facts{Args: args, Env: given})
	start := checkPlaceholders(&Facts{Args: args, Env: composed, Given: given})
	assert.Equal(t, doctor, start)
	assert.Equal(t, "<NODE> in env HOST", start.Seen)
	delete(given, "HOST")
	assert.Equal(t, checkPlaceholders(&Facts{Args: args, Env: given}).Seen, checkPlaceholders(&Facts{Args: args, Env: composed, Given: given}).Seen)
}

func TestPlaceholdersSkipped(t *testing.T) {
	r := checkPlaceholders(&Facts{})
	assert.Equal(t, Skipped, r.Status)
	assert.Equal(t, "no command and no environment to look at", r.Seen)
}

func TestPlaceholdersFound(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		env  map[string]string
		seen string
	}{
		{"value of an option", []string{"vllm", "serve", "--model", "<MODEL_DIR>"}, nil,
			"<MODEL_DIR> in argv[3], the value of --model"},
		{"inside a path", []string{"python3", "--model", "/models/<MODEL>/config"}, nil,
			"<MODEL> in argv[2], the value of --model"},
		{"option=value", []string{"python3", "--model-path=/models/<MODEL>"}, nil,
			"<MODEL> in argv[1], the value of --model-path"},
		{"positional", []string{"vllm", "serve", "/m/<M2_X>"}, nil,
			"<M2_X> in argv[2]"},
		{"command itself", []string{"<PYTHON>", "-m", "x"}, nil,
			"<PYTHON> in argv[0]"},
		{"twice in one word, two tokens", []string{"x", "<NODE>:<PORT>/<NODE>"}, nil,
			"<NODE> in argv[1]; <PORT> in argv[1]"},
		{"environment", []string{"x"}, map[string]string{"PREFILL_HOST": "<PREFILL_NODE>:8998", "A": "ok"},
			"<PREFILL_NODE> in env PREFILL_HOST"},
		{"argv then env sorted by name", []string{"x", "--node", "<NODE>"}, map[string]string{"Z": "<Z>", "B": "/d/<B>"},
			"<NODE> in argv[2], the value of --node; <B> in env B; <Z> in env Z"},
		{"many", []string{"<A>", "<B>", "<C>", "<D>", "<E>", "<F>", "<G>"}, nil,
			"<A> in argv[0]; <B> in argv[1]; <C> in argv[2]; <D> in argv[3]; <E> in argv[4]; and 2 more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkPlaceholders(&Facts{Args: workerargs.Parse(tt.argv), Env: tt.env})
			require.Equal(t, Fail, r.Status)
			assert.Equal(t, Error, r.Severity)
			assert.Equal(t, tt.seen, r.Seen)
			assert.Contains(t, r.Why, "placeholder still in it")
			assert.Contains(t, r.Do, "Substitute every <NAME>")
		})
	}
}
