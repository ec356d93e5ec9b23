package capability

import (
	"fmt"
	"strings"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/workerargs"
)

// Implication is a capability the worker's command and environment need,
// and where that came from.
type Implication struct {
	Capability string `json:"capability"`
	Source     string `json:"source"`
	// Optional: the worker decides at run time and starts without it,
	// with a feature off (GPU-direct "auto"). Never required, never a
	// refusal; a note when the capability is missing.
	Optional bool `json:"optional,omitempty"`
}

// KvdConnector is the Infera engine's vLLM KV connector to the kvd cache;
// GPU-direct L3 (hipFile) is its feature.
const KvdConnector = "InferaKvdConnector"

// The engine's switch for GPU-direct L3, read from the worker's
// environment: INFERA_KVD_AIS, and the deprecated INFERA_KVD_GPU_DIRECT
// only when INFERA_KVD_AIS is unset.
const (
	KvdAISVar       = "INFERA_KVD_AIS"
	KvdGPUDirectVar = "INFERA_KVD_GPU_DIRECT"
)

// kvdAIS reads the switch as the engine does: 1/true/yes/on is on; auto
// or unset is "detect kernel P2PDMA at run time, else POSIX I/O"; any
// other value is off. from is how it was set, for messages.
func kvdAIS(env *environ.Env) (mode, from string) {
	name := KvdAISVar
	v, ok := env.Get(name)
	if !ok {
		name = KvdGPUDirectVar
		if v, ok = env.Get(name); !ok {
			return "auto", KvdAISVar + " unset"
		}
	}
	from = name + "=" + v
	if on, _ := config.ParseSwitch(v); on {
		return "on", from
	}
	if strings.EqualFold(strings.TrimSpace(v), "auto") {
		return "auto", from
	}
	return "off", from
}

// Implied reads the worker command and environment for deployments that
// cannot work without a capability:
//
//   - vLLM --kv-transfer-config whose kv_connector (or a connector inside a
//     MultiConnector) is a Mooncake connector: mooncake;
//   - SGLang --disaggregation-mode prefill|decode with the Mooncake
//     transfer backend (SGLang's default): mooncake;
//   - the kvd daemon (python3 -m infera.kvd) with --long-backend mooncake,
//     its distributed L4 store: mooncake;
//   - vLLM with the InferaKvdConnector (also as a MultiConnector child)
//     and GPU-direct L3 switched on in the worker's environment
//     (INFERA_KVD_AIS, else the deprecated INFERA_KVD_GPU_DIRECT, is
//     1/true/yes/on): hipfile. With auto or unset, the engine detects
//     P2PDMA at run time and falls back to POSIX I/O: hipfile is an
//     optional implication, a note when missing.
func Implied(args workerargs.Args, env *environ.Env) []Implication {
	var out []Implication
	add := func(i Implication) {
		for _, o := range out {
			if o.Capability == i.Capability {
				return
			}
		}
		out = append(out, i)
	}
	if args.KV != nil {
		for _, c := range args.KV.Connectors {
			if strings.Contains(strings.ToLower(c.Name), "mooncake") {
				add(Implication{Capability: "mooncake", Source: fmt.Sprintf("--kv-transfer-config kv_connector=%s", c.Name)})
			}
		}
		for _, c := range args.KV.Connectors {
			if c.Name != KvdConnector {
				continue
			}
			mode, from := kvdAIS(env)
			src := fmt.Sprintf("--kv-transfer-config kv_connector=%s with %s (GPU-direct L3)", KvdConnector, from)
			switch mode {
			case "on":
				add(Implication{Capability: "hipfile", Source: src})
			case "auto":
				add(Implication{Capability: "hipfile", Source: src, Optional: true})
			}
			break
		}
	}
	if args.Engine == workerargs.SGLang && args.PD() && args.TransferBackend.Value == "mooncake" {
		src := args.RoleFrom
		if args.TransferBackend.Set {
			src += " --disaggregation-transfer-backend mooncake"
		} else {
			src += " (transfer backend mooncake by default)"
		}
		add(Implication{Capability: "mooncake", Source: src})
	}
	if args.Engine == workerargs.Kvd && args.LongBackend.Value == "mooncake" {
		add(Implication{Capability: "mooncake", Source: "kvd --long-backend mooncake (distributed L4 store)"})
	}
	return out
}
