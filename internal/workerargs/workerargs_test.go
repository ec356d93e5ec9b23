package workerargs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEngine(t *testing.T) {
	tests := []struct {
		argv   []string
		engine Engine
		from   string
	}{
		{[]string{"vllm", "serve", "/m"}, VLLM, "vllm serve"},
		{[]string{"/usr/local/bin/vllm", "serve", "/m"}, VLLM, "vllm serve"},
		{[]string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"}, VLLM, "python3 -m vllm.entrypoints.openai.api_server"},
		{[]string{"python", "-u", "-X", "importtime", "-m", "vllm.entrypoints.cli.main", "serve", "/m"}, VLLM, "python -m vllm.entrypoints.cli.main"},
		{[]string{"/usr/bin/python3.12", "-msglang.launch_server", "--model-path", "/m"}, SGLang, "python3.12 -m sglang.launch_server"},
		{[]string{"python3", "-m", "infera.engine.vllm", "--model", "/m"}, VLLM, "python3 -m infera.engine.vllm"},
		{[]string{"python3", "-m", "infera.engine.sglang", "--model-path", "/m"}, SGLang, "python3 -m infera.engine.sglang"},
		// Not engines: another module, a script, -c, a similar name.
		{[]string{"python3", "-m", "infera_demo.worker", "--model", "/m"}, Unknown, ""},
		{[]string{"python3", "serve.py", "-m", "vllm"}, Unknown, ""},
		{[]string{"python3", "-c", "import vllm", "-m", "vllm"}, Unknown, ""},
		{[]string{"python3", "-m", "vllmx"}, Unknown, ""},
		{[]string{"python3", "-m"}, Unknown, ""},
		{[]string{"sglang-router", "--host", "0.0.0.0"}, Unknown, ""},
		{nil, Unknown, ""},
		// An unknown command: the engine's own options tell.
		{[]string{"show-worker", "--kv-transfer-config", "{}"}, VLLM, "--kv-transfer-config"},
		{[]string{"show-worker", "--disaggregation-mode", "decode"}, SGLang, "--disaggregation-mode"},
	}
	for _, tt := range tests {
		a := Parse(tt.argv)
		assert.Equal(t, tt.engine, a.Engine, "%q", tt.argv)
		assert.Equal(t, tt.from, a.EngineFrom, "%q", tt.argv)
	}
}

func TestModel(t *testing.T) {
	tests := []struct {
		argv        []string
		value, from string
	}{
		{[]string{"vllm", "serve", "/models/x", "--tensor-parallel-size", "8"}, "/models/x", "serve"},
		{[]string{"vllm", "serve", "/models/x", "--model", "/other"}, "/models/x", "serve"},
		{[]string{"python3", "-m", "vllm.entrypoints.cli.main", "serve", "./m"}, "./m", "serve"},
		{[]string{"python3", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "8"}, "/m", "--model-path"},
		{[]string{"python3", "-m", "sglang.launch_server", "--model-path=/m"}, "/m", "--model-path"},
		{[]string{"python3", "-m", "infera.engine.vllm", "--model=/m"}, "/m", "--model"},
		{[]string{"python3", "-m", "infera.engine.vllm", "--model", "/a", "--model=/b"}, "/b", "--model"},
		{[]string{"vllm", "--served-model-name", "serve", "--model", "/m"}, "/m", "--model"},
		{[]string{"vllm", "serve", "--help"}, "", ""},
		{[]string{"python3", "-m", "x", "--model-loader-extra-config", "{}"}, "", ""},
		{[]string{"python3", "-m", "x", "--model"}, "", ""},
		{nil, "", ""},
	}
	for _, tt := range tests {
		a := Parse(tt.argv)
		assert.Equal(t, tt.value, a.Model, "%q", tt.argv)
		assert.Equal(t, tt.from, a.ModelFrom, "%q", tt.argv)
	}
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name string
		argv []string
		want Flag
	}{
		{"space", []string{"w", "--host", "10.0.0.1"}, Flag{"10.0.0.1", true}},
		{"equals", []string{"w", "--host=10.0.0.1"}, Flag{"10.0.0.1", true}},
		{"empty after equals", []string{"w", "--host="}, Flag{"", true}},
		{"last wins", []string{"w", "--host", "a", "--host=b", "--host", "c"}, Flag{"c", true}},
		{"no value", []string{"w", "--host"}, Flag{}},
		// argparse takes a dash word for an option, not a value (and
		// refuses the command): nothing is read.
		{"option as value", []string{"w", "--host", "--port", "8000"}, Flag{}},
		{"negative number", []string{"w", "--host", "-1"}, Flag{"-1", true}},
		{"a value is not an option", []string{"w", "--served-model-name", "--host", "x"}, Flag{"x", true}},
		{"consumed value", []string{"w", "--api-key", "s", "--host", "h"}, Flag{"h", true}},
		{"after --", []string{"w", "--host", "a", "--", "--host", "b"}, Flag{"a", true}},
		{"a prefix is another option", []string{"w", "--host-ip", "x", "--hostname=y"}, Flag{}},
		{"argv[0] is the program", []string{"--host", "x"}, Flag{}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Parse(tt.argv).Host, tt.name)
	}
	a := Parse([]string{"vllm", "serve", "/m", "-dpa", "10.0.0.2"})
	assert.Equal(t, Flag{"10.0.0.2", true}, a.DataParallelAddress)
	a = Parse([]string{"python3", "-m", "sglang.launch_server", "--disaggregation-bootstrap-host=10.0.0.3", "--dist-init-addr", "10.0.0.4:5000"})
	assert.Equal(t, Flag{"10.0.0.3", true}, a.BootstrapHost)
	assert.Equal(t, Flag{"10.0.0.4:5000", true}, a.DistInitAddr)
}

func TestRole(t *testing.T) {
	sgl := []string{"python3", "-m", "sglang.launch_server", "--model-path", "/m"}
	vl := []string{"vllm", "serve", "/m"}
	tests := []struct {
		name    string
		argv    []string
		role    Role
		from    string
		backend Flag
	}{
		{"SGLang prefill", append(sgl, "--disaggregation-mode", "prefill"), Prefill, "--disaggregation-mode prefill", Flag{"mooncake", false}},
		{"SGLang decode over nixl", append(sgl, "--disaggregation-mode=decode", "--disaggregation-transfer-backend", "nixl"), Decode, "--disaggregation-mode decode", Flag{"nixl", true}},
		{"SGLang null", append(sgl, "--disaggregation-mode", "null"), NoRole, "", Flag{"mooncake", false}},
		{"SGLang last mode wins", append(sgl, "--disaggregation-mode", "prefill", "--disaggregation-mode", "null"), NoRole, "", Flag{"mooncake", false}},
		{"SGLang aggregated", sgl, NoRole, "", Flag{"mooncake", false}},
		{"vLLM ignores SGLang's option", append(vl, "--disaggregation-mode", "prefill"), NoRole, "", Flag{}},
		{"SGLang ignores vLLM's option", append(sgl, "--kv-transfer-config", `{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}`), NoRole, "", Flag{"mooncake", false}},
		{"vLLM producer", append(vl, "--kv-transfer-config", `{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}`),
			Prefill, "--kv-transfer-config kv_role=kv_producer (MooncakeConnector)", Flag{}},
		{"vLLM consumer, another connector", append(vl, `--kv-transfer-config={"kv_connector":"NixlConnector","kv_role":"kv_consumer"}`),
			Decode, "--kv-transfer-config kv_role=kv_consumer (NixlConnector)", Flag{}},
		{"vLLM kv_both", append(vl, "--kv-transfer-config", `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`),
			Both, "--kv-transfer-config kv_role=kv_both (LMCacheConnectorV1)", Flag{}},
		{"vLLM without a role", append(vl, "--kv-transfer-config", `{"kv_connector":"MooncakeConnector"}`), NoRole, "", Flag{}},
		{"vLLM role without a connector", append(vl, "--kv-transfer-config", `{"kv_role":"kv_producer"}`), NoRole, "", Flag{}},
		{"vLLM unknown role", append(vl, "--kv-transfer-config", `{"kv_connector":"X","kv_role":"producer"}`), NoRole, "", Flag{}},
		{"vLLM not JSON", append(vl, "--kv-transfer-config", `kv_role=kv_producer`), NoRole, "", Flag{}},
		{"vLLM MultiConnector child producer",
			append(vl, "--kv-transfer-config", `{"kv_connector":"MultiConnector","kv_role":"kv_both","kv_connector_extra_config":{"connectors":[`+
				`{"kv_connector":"OffloadingConnector","kv_role":"kv_both"},{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}]}}`),
			Prefill, "--kv-transfer-config kv_connector_extra_config.connectors[1].kv_role=kv_producer (MooncakeConnector)", Flag{}},
		{"vLLM top-level role first",
			append(vl, "--kv-transfer-config", `{"kv_connector":"MultiConnector","kv_role":"kv_consumer","kv_connector_extra_config":{"connectors":[`+
				`{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}]}}`),
			Decode, "--kv-transfer-config kv_role=kv_consumer (MultiConnector)", Flag{}},
		{"unknown command, vLLM option", []string{"show-worker", "--kv-transfer-config", `{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer"}`},
			Decode, "--kv-transfer-config kv_role=kv_consumer (MooncakeConnector)", Flag{}},
		{"unknown command, SGLang option", []string{"show-worker", "--disaggregation-mode", "prefill"}, Prefill, "--disaggregation-mode prefill", Flag{"mooncake", false}},
	}
	for _, tt := range tests {
		a := Parse(tt.argv)
		assert.Equal(t, tt.role, a.Role, tt.name)
		assert.Equal(t, tt.from, a.RoleFrom, tt.name)
		assert.Equal(t, tt.backend, a.TransferBackend, tt.name)
		assert.Equal(t, tt.role == Prefill || tt.role == Decode, a.PD(), tt.name)
	}
}

func TestKVConfig(t *testing.T) {
	a := Parse([]string{"vllm", "serve", "/m", "--kv-transfer-config", `{"kv_connector":"MultiConnector","kv_role":"kv_both",` +
		`"kv_connector_extra_config":{"connectors":[{"kv_connector":"NixlConnector","kv_role":"kv_both"},` +
		`{"kv_connector":"KvdConnector","kv_connector_extra_config":{"l3_gpu_direct":true,"kv_ip":"10.0.0.1"}}]}}`})
	require.NotNil(t, a.KV)
	require.NoError(t, a.KV.Err)
	var names, paths []string
	for _, c := range a.KV.Connectors {
		names = append(names, c.Name)
		paths = append(paths, c.Path)
	}
	assert.Equal(t, []string{"MultiConnector", "NixlConnector", "KvdConnector"}, names)
	assert.Equal(t, []string{"", "kv_connector_extra_config.connectors[0]", "kv_connector_extra_config.connectors[1]"}, paths)
	assert.Equal(t, "kv_both", a.KV.Connectors[1].Role)
	assert.Equal(t, "", a.KV.Connectors[2].Role, "as written: the role a child inherits is not copied")
	assert.Equal(t, map[string]any{"l3_gpu_direct": true, "kv_ip": "10.0.0.1"}, a.KV.Connectors[2].Extra)

	var walked []string
	a.KV.Walk(func(path, key string, val any) {
		if _, ok := val.(string); ok {
			walked = append(walked, path)
		}
	})
	assert.Equal(t, []string{
		"kv_connector",
		"kv_connector_extra_config.connectors[0].kv_connector",
		"kv_connector_extra_config.connectors[0].kv_role",
		"kv_connector_extra_config.connectors[1].kv_connector",
		"kv_connector_extra_config.connectors[1].kv_connector_extra_config.kv_ip",
		"kv_role",
	}, walked, "depth first, keys sorted")

	for _, raw := range []string{"", "not json", "[]", `"s"`, "null", `{"kv_connector":`} {
		a := Parse([]string{"vllm", "serve", "--kv-transfer-config", raw})
		require.NotNil(t, a.KV, "%q", raw)
		assert.Error(t, a.KV.Err, "%q", raw)
		assert.Nil(t, a.KV.Doc, "%q", raw)
		assert.Empty(t, a.KV.Connectors, "%q", raw)
		a.KV.Walk(func(string, string, any) { t.Errorf("%q: walked a config that did not parse", raw) })
	}
	assert.Nil(t, Parse([]string{"vllm", "serve", "/m"}).KV)
	(*KVConfig)(nil).Walk(func(string, string, any) { t.Error("walked a nil config") })
}

// The infera wrappers' own options: Kubernetes discovery is their default;
// an engine's own entry point has neither.
func TestParseWrapper(t *testing.T) {
	a := Parse([]string{"python3", "-m", "infera.engine.sglang", "--host", "0.0.0.0", "--disaggregation-mode", "prefill"})
	assert.True(t, a.Wrapper)
	assert.Equal(t, Flag{Value: "kubernetes"}, a.DiscoveryBackend)
	assert.False(t, a.AdvertiseHost.Set)

	a = Parse([]string{"python3", "-m", "infera.engine.vllm", "--discovery-backend", "etcd", "--advertise-host", "10.1.2.3"})
	assert.True(t, a.Wrapper)
	assert.Equal(t, Flag{Value: "etcd", Set: true}, a.DiscoveryBackend)
	assert.Equal(t, Flag{Value: "10.1.2.3", Set: true}, a.AdvertiseHost)

	a = Parse([]string{"python3", "-m", "sglang.launch_server", "--advertise-host", "10.1.2.3"})
	assert.False(t, a.Wrapper)
	assert.Equal(t, Flag{}, a.AdvertiseHost)
	assert.Equal(t, Flag{}, a.DiscoveryBackend)
}

func TestKVRoleOf(t *testing.T) {
	a := Parse([]string{"vllm", "serve", "/m", "--kv-transfer-config",
		`{"kv_connector":"MultiConnector","kv_role":"kv_consumer","kv_connector_extra_config":{"connectors":[{"kv_connector":"MooncakeConnector"},{"kv_connector":"X","kv_role":"kv_both"}]}}`})
	require.Len(t, a.KV.Connectors, 3)
	assert.Equal(t, "kv_consumer", a.KV.RoleOf(a.KV.Connectors[1]), "a child without a role acts in the top level's")
	assert.Equal(t, "kv_both", a.KV.RoleOf(a.KV.Connectors[2]))
}

func TestOptionAndSwitch(t *testing.T) {
	a := Parse([]string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--kv-cache-dtype", "fp8", "--load-format=fastsafetensors",
		"--enable-prefix-caching", "--no-enable-chunked-prefill", "--trust-remote-code", "--enforce-eager", "false"})
	assert.Equal(t, Flag{Value: "fp8", Set: true}, a.Option("--kv-cache-dtype"))
	assert.Equal(t, Flag{Value: "fastsafetensors", Set: true}, a.Option("--load-format"))
	assert.False(t, a.Option("--max-num-seqs").Set)
	for _, c := range []struct {
		name     string
		on, ok   bool
		wantFrom string
	}{
		{"--enable-prefix-caching", true, true, "--enable-prefix-caching"},
		{"--enable-chunked-prefill", false, true, "--no-enable-chunked-prefill"},
		{"--trust-remote-code", true, true, "--trust-remote-code"},
		{"--enforce-eager", false, true, "--enforce-eager false"},
		{"--disable-log-stats", false, false, ""},
	} {
		on, from, ok := a.Switch(c.name)
		assert.Equal(t, []any{c.on, c.ok, c.wantFrom}, []any{on, ok, from}, c.name)
	}
	on, _, _ := Parse([]string{"vllm", "serve", "m", "--no-enable-chunked-prefill", "--enable-chunked-prefill=true"}).Switch("--enable-chunked-prefill")
	assert.True(t, on, "the last one wins")
}
