package preflight

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Static decides from the command and environment alone: the Mooncake
// prefill without --data-parallel-address fails as --doctor says, a
// consumer does not need it, a placeholder is named, and the node's own
// address is left to the node (no interface or route is read).
func TestStatic(t *testing.T) {
	prefill := []string{"python3", "-m", "infera.engine.vllm", "--model", "/models/m",
		"--kv-transfer-config", `{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}`}
	consumer := []string{"python3", "-m", "infera.engine.vllm", "--model", "/models/m",
		"--kv-transfer-config", `{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer"}`}
	byName := func(rs []Result) map[string]Result {
		m := map[string]Result{}
		for _, r := range rs {
			m[r.Name] = r
		}
		return m
	}
	for _, c := range []struct {
		name   string
		argv   []string
		env    map[string]string
		check  string
		status Status
		seen   string
	}{
		{"mooncake prefill without the address", prefill, nil, "advertise", Fail, "--data-parallel-address not set (vLLM then uses 127.0.0.1)"},
		{"mooncake prefill with the pod's address", append(append([]string(nil), prefill...), "--data-parallel-address", "192.0.2.10"), nil, "advertise", Pass, "--data-parallel-address 192.0.2.10"},
		{"mooncake consumer", consumer, nil, "advertise", Pass, "not used by a MooncakeConnector kv_consumer"},
		{"the node picks the address", consumer, nil, "advertise", Pass, "picks the address on the node"},
		{"placeholder in the model path", []string{"python3", "-m", "infera.engine.vllm", "--model", "/models/<MODEL_DIR>"}, nil, "placeholders", Fail, "<MODEL_DIR> in argv[4], the value of --model"},
		{"placeholder in the environment", []string{"python3"}, map[string]string{"HOST": "<NODE>"}, "placeholders", Fail, "<NODE> in env HOST"},
		{"aggregated", []string{"python3", "-m", "infera.engine.vllm", "--model", "/models/m"}, nil, "advertise", Skipped, "not a prefill/decode worker"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := Static(c.argv, c.env)
			require.Len(t, rs, len(StaticNames))
			r := byName(rs)[c.check]
			assert.Equal(t, c.status, r.Status, "%+v", r)
			assert.Contains(t, r.Seen, c.seen)
			if c.status == Fail {
				assert.Equal(t, Error, r.Severity)
				assert.NotEmpty(t, r.Do, "a failure says what to do")
			}
		})
	}
}
