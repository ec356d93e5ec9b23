package capability

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/workerargs"
)

func TestImplied(t *testing.T) {
	cases := []struct {
		argv []string
		want []Implication
	}{
		{[]string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"}, nil},
		{[]string{"--kv-transfer-config", `{"kv_connector":"MooncakeConnector"}`}, []Implication{{Capability: "mooncake", Source: "--kv-transfer-config kv_connector=MooncakeConnector"}}},
		{[]string{`--kv-transfer-config={"kv_connector":"MultiConnector","kv_connector_extra_config":{"connectors":[{"kv_connector":"NixlConnector"},{"kv_connector":"MooncakeConnector"}]}}`}, []Implication{{Capability: "mooncake", Source: "--kv-transfer-config kv_connector=MooncakeConnector"}}},
		{[]string{"--kv-transfer-config", `{"kv_connector":"NixlConnector"}`}, nil},
		{[]string{"--kv-transfer-config", `not json`}, nil},
		// Guessed keys in the connector's config mean nothing.
		{[]string{"--kv-transfer-config", `{"kv_connector":"KvdConnector","kv_connector_extra_config":{"l3_gpu_direct":true}}`}, nil},
		{[]string{"--disaggregation-mode", "prefill"}, []Implication{{Capability: "mooncake", Source: "--disaggregation-mode prefill (transfer backend mooncake by default)"}}},
		{[]string{"--disaggregation-mode=decode", "--disaggregation-transfer-backend=mooncake"}, []Implication{{Capability: "mooncake", Source: "--disaggregation-mode decode --disaggregation-transfer-backend mooncake"}}},
		{[]string{"--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl"}, nil},
		{[]string{"--disaggregation-mode", "null"}, nil},
		{[]string{"--disaggregation-mode"}, nil}, // no value: nothing to read
		// Two Mooncake connectors: the first, in the order of the config.
		{[]string{"--kv-transfer-config", `{"kv_connector":"MultiConnector","kv_connector_extra_config":{"connectors":[{"kv_connector":"MooncakeStoreConnector"},{"kv_connector":"MooncakeConnector"}]}}`}, []Implication{{Capability: "mooncake", Source: "--kv-transfer-config kv_connector=MooncakeStoreConnector"}}},
		// An SGLang option on a vLLM command is not read.
		{[]string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--disaggregation-mode", "prefill"}, nil},
	}
	for _, c := range cases {
		argv := c.argv
		if strings.HasPrefix(argv[0], "-") {
			// A command workerargs does not know: the options tell the engine.
			argv = append([]string{"worker"}, argv...)
		}
		assert.Equal(t, c.want, Implied(workerargs.Parse(argv), environ.New(nil)), "%q", argv)
	}
}

// GPU-direct L3 (hipFile) is the InferaKvdConnector's, switched by the
// worker's environment as the engine reads it.
func TestImpliedKvdAIS(t *testing.T) {
	kv := `{"kv_connector":"InferaKvdConnector","kv_role":"kv_both"}`
	multi := `{"kv_connector":"MultiConnector","kv_connector_extra_config":{"connectors":[{"kv_connector":"InferaKvdConnector"},{"kv_connector":"MooncakeConnector"}]}}`
	src := func(from string) string {
		return "--kv-transfer-config kv_connector=InferaKvdConnector with " + from + " (GPU-direct L3)"
	}
	cases := []struct {
		kv   string
		env  []string
		want []Implication
	}{
		{kv, []string{"INFERA_KVD_AIS=1"}, []Implication{{Capability: "hipfile", Source: src("INFERA_KVD_AIS=1")}}},
		{kv, []string{"INFERA_KVD_AIS=On"}, []Implication{{Capability: "hipfile", Source: src("INFERA_KVD_AIS=On")}}},
		{kv, nil, []Implication{{Capability: "hipfile", Source: src("INFERA_KVD_AIS unset"), Optional: true}}},
		{kv, []string{"INFERA_KVD_AIS=auto"}, []Implication{{Capability: "hipfile", Source: src("INFERA_KVD_AIS=auto"), Optional: true}}},
		{kv, []string{"INFERA_KVD_AIS=0"}, nil},
		{kv, []string{"INFERA_KVD_AIS=posix"}, nil},
		{kv, []string{"INFERA_KVD_AIS="}, nil},
		// The deprecated name, only when INFERA_KVD_AIS is unset.
		{kv, []string{"INFERA_KVD_GPU_DIRECT=true"}, []Implication{{Capability: "hipfile", Source: src("INFERA_KVD_GPU_DIRECT=true")}}},
		{kv, []string{"INFERA_KVD_GPU_DIRECT=true", "INFERA_KVD_AIS=off"}, nil},
		{multi, []string{"INFERA_KVD_AIS=yes"}, []Implication{
			{Capability: "mooncake", Source: "--kv-transfer-config kv_connector=MooncakeConnector"},
			{Capability: "hipfile", Source: src("INFERA_KVD_AIS=yes")},
		}},
		// Another connector: the switch is not its.
		{`{"kv_connector":"LMCacheConnectorV1"}`, []string{"INFERA_KVD_AIS=1"}, nil},
	}
	for _, c := range cases {
		argv := []string{"python3", "-m", "infera.engine.vllm", "--kv-transfer-config", c.kv}
		assert.Equal(t, c.want, Implied(workerargs.Parse(argv), environ.New(c.env)), "%s %q", c.kv, c.env)
	}
	// An SGLang worker has no vLLM connector.
	assert.Nil(t, Implied(workerargs.Parse([]string{"python3", "-m", "sglang.launch_server", "--kv-transfer-config", kv}), environ.New([]string{"INFERA_KVD_AIS=1"})))
}

// The kvd daemon's distributed L4 store is Mooncake's.
func TestImpliedKvdLongBackend(t *testing.T) {
	got := Implied(workerargs.Parse([]string{"python3", "-m", "infera.kvd", "--long-backend", "mooncake", "--max-bytes", "16G"}), environ.New(nil))
	assert.Equal(t, []Implication{{Capability: "mooncake", Source: "kvd --long-backend mooncake (distributed L4 store)"}}, got)
	for _, argv := range [][]string{
		{"python3", "-m", "infera.kvd", "--long-backend", "lmcache"},
		{"python3", "-m", "infera.kvd"}, // tablespace by default
		{"worker", "--long-backend", "mooncake"},
	} {
		assert.Nil(t, Implied(workerargs.Parse(argv), environ.New(nil)), "%q", argv)
	}
}

func TestRequirementAuto(t *testing.T) {
	r, err := config.ParseRequirement("auto,hipfile")
	assert.NoError(t, err)
	assert.True(t, r.Auto)
	assert.Equal(t, []string{"hipfile"}, r.Names)
	r = withImplied(r, []Implication{{Capability: "mooncake", Source: "--disaggregation-mode prefill"}, {Capability: "hipfile", Source: "auto", Optional: true}})
	assert.Equal(t, []string{"hipfile", "mooncake"}, r.Names)
	assert.Equal(t, map[string]string{"mooncake": "--disaggregation-mode prefill"}, r.Sources)

	plain, _ := config.ParseRequirement("hipfile")
	assert.Equal(t, plain, withImplied(plain, []Implication{{Capability: "mooncake", Source: "x"}}), "without auto, implications are only warnings")
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
