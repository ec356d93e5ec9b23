package workerargs

import (
	"strings"
	"testing"
)

// FuzzParse takes a command as NUL-separated words. Parse must not panic,
// and what it reports must come from the command: a flag's value is one of
// its words (or the part after "="), a role only with its engine, a model
// only with where it came from.
func FuzzParse(f *testing.F) {
	for _, argv := range [][]string{
		{"vllm", "serve", "/m", "--kv-transfer-config", `{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}`},
		{"python3", "-m", "sglang.launch_server", "--model-path=/m", "--disaggregation-mode", "decode", "--host", "0.0.0.0"},
		{"python3", "-m", "infera.engine.vllm", "--model", "/m", "-dpa", "10.0.0.1",
			`--kv-transfer-config={"kv_connector":"MultiConnector","kv_connector_extra_config":{"connectors":[{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer"}]}}`},
		{"python3", "-m", "infera.engine.sglang", "--disaggregation-transfer-backend", "nixl", "--disaggregation-mode=prefill"},
		{"show-worker", "--host", "--", "--host", "x", "--model"},
		{"python3", "-X", "dev", "-mvllm", "--kv-transfer-config", "[[[[{}]]]]"},
		{"", "=", "-", "--=", "--host=", "serve"},
	} {
		f.Add(strings.Join(argv, "\x00"))
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		argv := strings.Split(cmd, "\x00")
		a := Parse(argv)
		words := map[string]bool{}
		for _, w := range argv {
			words[w] = true
			if _, v, ok := strings.Cut(w, "="); ok {
				words[v] = true
			}
		}
		for name, f := range map[string]Flag{
			"--host": a.Host, "--data-parallel-address": a.DataParallelAddress,
			"--disaggregation-bootstrap-host": a.BootstrapHost, "--dist-init-addr": a.DistInitAddr,
		} {
			if f.Set && !words[f.Value] {
				t.Fatalf("%q: %s=%q is no word of the command", argv, name, f.Value)
			}
			if !f.Set && f.Value != "" {
				t.Fatalf("%q: %s not set but has value %q", argv, name, f.Value)
			}
		}
		if a.ModelFrom == "" && a.Model != "" {
			t.Fatalf("%q: model %q without a source", argv, a.Model)
		}
		if a.ModelFrom != "" && !words[a.Model] {
			t.Fatalf("%q: model %q is no word of the command", argv, a.Model)
		}
		if (a.Role == NoRole) != (a.RoleFrom == "") {
			t.Fatalf("%q: role %q from %q", argv, a.Role, a.RoleFrom)
		}
		switch {
		case a.Role != NoRole && a.Engine == Unknown:
			t.Fatalf("%q: role %q without an engine", argv, a.Role)
		case a.Role == Both && a.Engine != VLLM:
			t.Fatalf("%q: kv_both on %q", argv, a.Engine)
		case a.KV != nil && a.Engine != VLLM:
			t.Fatalf("%q: a --kv-transfer-config read for %q", argv, a.Engine)
		case a.TransferBackend.Value != "" && a.Engine != SGLang:
			t.Fatalf("%q: a transfer backend for %q", argv, a.Engine)
		case a.Engine == SGLang && !a.TransferBackend.Set && a.TransferBackend.Value != DefaultTransferBackend:
			t.Fatalf("%q: default backend %q", argv, a.TransferBackend.Value)
		}
		if a.KV != nil {
			if a.KV.Err != nil && (a.KV.Doc != nil || len(a.KV.Connectors) > 0) {
				t.Fatalf("%q: a config that does not parse has content", argv)
			}
			if name, ok := a.KV.Doc["kv_connector"].(string); ok {
				if len(a.KV.Connectors) == 0 || a.KV.Connectors[0].Path != "" || a.KV.Connectors[0].Name != name {
					t.Fatalf("%q: the top-level connector is not first: %+v", argv, a.KV.Connectors)
				}
			}
		}
	})
}
