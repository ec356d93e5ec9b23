package capability

import (
	"fmt"
	"strings"

	"github.com/infera/infera-exec/workerargs"
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
func Implied(args workerargs.Args) []Implication {
	var out []Implication
	add := func(c, src string) {
		for _, i := range out {
			if i.Capability == c {
				return
			}
		}
		out = append(out, Implication{c, src})
	}
	if args.KV != nil {
		for _, c := range args.KV.Connectors {
			if strings.Contains(strings.ToLower(c.Name), "mooncake") {
				add("mooncake", fmt.Sprintf("--kv-transfer-config kv_connector=%s", c.Name))
			}
		}
		args.KV.Walk(func(_, key string, val any) {
			if b, ok := val.(bool); ok && b {
				switch key {
				case "gpu_direct", "l3_gpu_direct", "use_gpu_direct", "gds":
					add("hipfile", fmt.Sprintf("--kv-transfer-config %s=true (GPU-direct L3)", key))
				}
			}
		})
	}
	if args.Engine == workerargs.SGLang && args.PD() && args.TransferBackend.Value == "mooncake" {
		src := args.RoleFrom
		if args.TransferBackend.Set {
			src += " --disaggregation-transfer-backend mooncake"
		} else {
			src += " (transfer backend mooncake by default)"
		}
		add("mooncake", src)
	}
	return out
}
