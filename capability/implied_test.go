package capability

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/infera/infera-exec/workerargs"
)

func TestImplied(t *testing.T) {
	cases := []struct {
		argv []string
		want []Implication
	}{
		{[]string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"}, nil},
		{[]string{"--kv-transfer-config", `{"kv_connector":"MooncakeConnector"}`}, []Implication{{"mooncake", "--kv-transfer-config kv_connector=MooncakeConnector"}}},
		{[]string{`--kv-transfer-config={"kv_connector":"MultiConnector","kv_connector_extra_config":{"connectors":[{"kv_connector":"NixlConnector"},{"kv_connector":"MooncakeConnector"}]}}`}, []Implication{{"mooncake", "--kv-transfer-config kv_connector=MooncakeConnector"}}},
		{[]string{"--kv-transfer-config", `{"kv_connector":"NixlConnector"}`}, nil},
		{[]string{"--kv-transfer-config", `not json`}, nil},
		{[]string{"--kv-transfer-config", `{"kv_connector":"KvdConnector","kv_connector_extra_config":{"l3_gpu_direct":true}}`}, []Implication{{"hipfile", "--kv-transfer-config l3_gpu_direct=true (GPU-direct L3)"}}},
		{[]string{"--kv-transfer-config", `{"kv_connector":"KvdConnector","kv_connector_extra_config":{"gds":false}}`}, nil},
		{[]string{"--disaggregation-mode", "prefill"}, []Implication{{"mooncake", "--disaggregation-mode prefill (transfer backend mooncake by default)"}}},
		{[]string{"--disaggregation-mode=decode", "--disaggregation-transfer-backend=mooncake"}, []Implication{{"mooncake", "--disaggregation-mode decode --disaggregation-transfer-backend mooncake"}}},
		{[]string{"--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl"}, nil},
		{[]string{"--disaggregation-mode", "null"}, nil},
		{[]string{"--disaggregation-mode"}, nil}, // no value: nothing to read
		// Two Mooncake connectors: the first, in the order of the config.
		{[]string{"--kv-transfer-config", `{"kv_connector":"MultiConnector","kv_connector_extra_config":{"connectors":[{"kv_connector":"MooncakeStoreConnector"},{"kv_connector":"MooncakeConnector"}]}}`}, []Implication{{"mooncake", "--kv-transfer-config kv_connector=MooncakeStoreConnector"}}},
		// An SGLang option on a vLLM command is not read.
		{[]string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--disaggregation-mode", "prefill"}, nil},
	}
	for _, c := range cases {
		argv := c.argv
		if strings.HasPrefix(argv[0], "-") {
			// A command workerargs does not know: the options tell the engine.
			argv = append([]string{"worker"}, argv...)
		}
		assert.Equal(t, c.want, Implied(workerargs.Parse(argv)), "%q", argv)
	}
}

func TestRequirementAuto(t *testing.T) {
	r, err := ParseRequirement("auto,hipfile")
	assert.NoError(t, err)
	assert.True(t, r.Auto)
	assert.Equal(t, []string{"hipfile"}, r.Names)
	r = r.With([]Implication{{"mooncake", "--disaggregation-mode prefill"}})
	assert.Equal(t, []string{"hipfile", "mooncake"}, r.Names)
	assert.Equal(t, map[string]string{"mooncake": "--disaggregation-mode prefill"}, r.Sources)

	plain, _ := ParseRequirement("hipfile")
	assert.Equal(t, plain, plain.With([]Implication{{"mooncake", "x"}}), "without auto, implications are only warnings")
}

func TestEvidence(t *testing.T) {
	dir := t.TempDir()
	put(t, dir+"/mooncake/engine.cpython-312-x86_64-linux-gnu.so", "")
	put(t, dir+"/lib/libtransfer_engine.so", "")
	put(t, dir+"/bin/ais-check", "")
	set, ev := Verify(dir, map[string][]string{
		"mooncake": {"mooncake/engine*.so", "lib/libtransfer_engine.so*"},
		"hipfile":  {"lib/libhipfile.so.*"},
		"ais":      {"bin/ais-check", "**/missing"},
	})
	assert.Equal(t, Set{"mooncake"}, set)
	assert.Equal(t, "ais", ev[0].Capability)
	assert.False(t, ev[0].Granted)
	assert.Equal(t, []string{"**/missing"}, ev[0].Missing)
	assert.Equal(t, []string{"lib/libhipfile.so.*"}, ev[1].Missing)
	assert.True(t, ev[2].Granted)
	assert.Equal(t, []string{"mooncake/engine.cpython-312-x86_64-linux-gnu.so"}, ev[2].Found["mooncake/engine*.so"])

	for _, g := range []string{"", "/etc/*", "../x", "a/../../b", "a/[", "./a"} {
		assert.Error(t, CheckGlob(g), "%q", g)
	}
	for _, g := range []string{"lib/libhipfile.so.*", "**/*.so", "bin/ais-check"} {
		assert.NoError(t, CheckGlob(g), "%q", g)
	}
}

func put(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
