package capability

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Implication is a capability the worker's own arguments need, and where
// that came from.
type Implication struct {
	Capability string `json:"capability"`
	Source     string `json:"source"`
}

// Implied reads the worker command for deployments that cannot work
// without a capability:
//
//   - vLLM --kv-transfer-config whose kv_connector (or a connector inside a
//     MultiConnector) is a Mooncake connector: mooncake;
//   - SGLang --disaggregation-mode prefill|decode with the Mooncake
//     transfer backend (SGLang's default): mooncake;
//   - GPU-direct L3 for the kvd cache, a kv_connector_extra_config key
//     gpu_direct, l3_gpu_direct, use_gpu_direct or gds set to true: hipfile.
func Implied(argv []string) []Implication {
	var out []Implication
	add := func(c, src string) {
		for _, i := range out {
			if i.Capability == c {
				return
			}
		}
		out = append(out, Implication{c, src})
	}
	if cfg, ok := flagValue(argv, "--kv-transfer-config"); ok {
		var v any
		if err := json.Unmarshal([]byte(cfg), &v); err == nil {
			walkJSON(v, func(key string, val any) {
				if s, ok := val.(string); ok && key == "kv_connector" && strings.Contains(strings.ToLower(s), "mooncake") {
					add("mooncake", fmt.Sprintf("--kv-transfer-config kv_connector=%s", s))
				}
				if b, ok := val.(bool); ok && b {
					switch key {
					case "gpu_direct", "l3_gpu_direct", "use_gpu_direct", "gds":
						add("hipfile", fmt.Sprintf("--kv-transfer-config %s=true (GPU-direct L3)", key))
					}
				}
			})
		}
	}
	if mode, ok := flagValue(argv, "--disaggregation-mode"); ok && (mode == "prefill" || mode == "decode") {
		backend, set := flagValue(argv, "--disaggregation-transfer-backend")
		if !set || backend == "mooncake" {
			src := "--disaggregation-mode " + mode
			if set {
				src += " --disaggregation-transfer-backend mooncake"
			} else {
				src += " (transfer backend mooncake by default)"
			}
			add("mooncake", src)
		}
	}
	return out
}

// flagValue finds --name VALUE or --name=VALUE; the last one wins, as in
// argparse.
func flagValue(argv []string, name string) (string, bool) {
	val, found := "", false
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			val, found = v, true
		} else if a == name && i+1 < len(argv) {
			val, found = argv[i+1], true
			i++
		}
	}
	return val, found
}

func walkJSON(v any, fn func(key string, val any)) {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			fn(k, val)
			walkJSON(val, fn)
		}
	case []any:
		for _, val := range t {
			walkJSON(val, fn)
		}
	}
}
