// Package workerargs reads the worker's command line once: which engine it
// starts, the model, the prefill/decode role, the KV transfer settings and
// the addresses it binds or advertises. The capability and preflight
// stages consume the typed result, so that "is this a prefill/decode
// worker" is decided by one rule.
package workerargs

import (
	"path/filepath"
	"strings"
)

// Engine is the serving engine the command starts.
type Engine string

const (
	Unknown Engine = ""
	VLLM    Engine = "vllm"
	SGLang  Engine = "sglang"
	// Kvd is the Infera kvd daemon (python3 -m infera.kvd), the tiered
	// KV cache the engines' connectors offload to: not an engine, but a
	// command infera-exec starts the same way.
	Kvd Engine = "kvd"
)

// Name is the engine's name for messages: vLLM, SGLang.
func (e Engine) Name() string {
	switch e {
	case VLLM:
		return "vLLM"
	case SGLang:
		return "SGLang"
	case Kvd:
		return "the kvd daemon"
	}
	return "the engine"
}

// Role is the worker's part in prefill/decode disaggregation.
type Role string

const (
	NoRole  Role = ""
	Prefill Role = "prefill" // SGLang --disaggregation-mode prefill, vLLM kv_role kv_producer
	Decode  Role = "decode"  // SGLang --disaggregation-mode decode, vLLM kv_role kv_consumer
	// Both is vLLM's kv_both: the connector sends and receives KV
	// blocks. Offloading connectors (a KV cache store, LMCache) use it
	// without any peer, so it does not make a prefill/decode worker.
	Both Role = "both"
)

// DefaultTransferBackend is SGLang's --disaggregation-transfer-backend
// when the option is not given.
const DefaultTransferBackend = "mooncake"

// Flag is the value of an option; Set is false when the command does not
// give it (Value is then the engine's default, if this package knows it).
type Flag struct {
	Value string
	Set   bool
}

// Args is what the worker's command says.
type Args struct {
	Argv []string // the command as given

	Engine     Engine
	EngineFrom string // what told the engine: "python3 -m infera.engine.vllm", "vllm serve", "--kv-transfer-config"

	Model     string
	ModelFrom string // "serve" (vLLM's positional argument), "--model-path" or "--model"; "" without a model

	Role     Role
	RoleFrom string // "--disaggregation-mode prefill", "--kv-transfer-config kv_role=kv_producer (MooncakeConnector)"

	// SGLang --disaggregation-transfer-backend; Value is
	// DefaultTransferBackend when not set. Empty for other engines.
	TransferBackend Flag

	// KV is vLLM's --kv-transfer-config; nil when not given (or when the
	// engine is another one).
	KV *KVConfig

	Host                Flag // --host: the address the HTTP server (SGLang: also the bootstrap server) binds
	DataParallelAddress Flag // vLLM --data-parallel-address, -dpa
	BootstrapHost       Flag // SGLang --disaggregation-bootstrap-host
	DistInitAddr        Flag // SGLang --dist-init-addr, host:port

	// Wrapper is the infera payload's engine wrapper (python3 -m
	// infera.engine.vllm, infera.engine.sglang), which starts the engine
	// and registers the worker with the router; false for the engine's own
	// entry points.
	Wrapper bool
	// The wrapper's --discovery-backend (its default is kubernetes) and
	// --advertise-host (the host it publishes; default: the Pod IP under
	// Kubernetes discovery, else --host). Unset for other commands.
	DiscoveryBackend Flag
	AdvertiseHost    Flag

	// LongBackend is the kvd daemon's --long-backend: tablespace (local
	// L3, its default), mooncake or lmcache (distributed L4). Empty for
	// other commands.
	LongBackend Flag
}

// DefaultDiscoveryBackend is the wrapper's --discovery-backend when not
// given (infera/engine/{vllm,sglang}/args.py).
const DefaultDiscoveryBackend = "kubernetes"

// DefaultLongBackend is the kvd daemon's --long-backend when not given.
const DefaultLongBackend = "tablespace"

// PD reports whether the worker is one side of a prefill/decode pair: its
// role is prefill (producer) or decode (consumer).
func (a Args) PD() bool { return a.Role == Prefill || a.Role == Decode }

// Parse reads argv, the worker command (argv[0] is the program).
func Parse(argv []string) Args {
	a := Args{Argv: argv}
	var model, modelPath, kv, mode, backend, longBackend Flag
	flags := map[string]*Flag{
		"--host":                            &a.Host,
		"--data-parallel-address":           &a.DataParallelAddress,
		"-dpa":                              &a.DataParallelAddress,
		"--disaggregation-bootstrap-host":   &a.BootstrapHost,
		"--dist-init-addr":                  &a.DistInitAddr,
		"--model":                           &model,
		"--model-path":                      &modelPath,
		"--kv-transfer-config":              &kv,
		"--disaggregation-mode":             &mode,
		"--disaggregation-transfer-backend": &backend,
		"--long-backend":                    &longBackend,
		"--discovery-backend":               &a.DiscoveryBackend,
		"--advertise-host":                  &a.AdvertiseHost,
	}
	scanFlags(argv, flags)

	a.Engine, a.EngineFrom = engineOf(argv)
	if a.Engine == Unknown {
		// A command this package does not know (a wrapper script, a
		// test stub): the engine-specific options tell.
		switch {
		case kv.Set:
			a.Engine, a.EngineFrom = VLLM, "--kv-transfer-config"
		case mode.Set:
			a.Engine, a.EngineFrom = SGLang, "--disaggregation-mode"
		}
	}

	a.Wrapper = strings.HasSuffix(a.EngineFrom, " -m infera.engine.vllm") || strings.HasSuffix(a.EngineFrom, " -m infera.engine.sglang")
	if !a.Wrapper {
		a.DiscoveryBackend, a.AdvertiseHost = Flag{}, Flag{}
	} else if !a.DiscoveryBackend.Set {
		a.DiscoveryBackend = Flag{Value: DefaultDiscoveryBackend}
	}

	// The model: vLLM's serve argument wins over --model, as in vLLM.
	if v, ok := servePositional(argv); ok {
		a.Model, a.ModelFrom = v, "serve"
	} else if modelPath.Set {
		a.Model, a.ModelFrom = modelPath.Value, "--model-path"
	} else if model.Set {
		a.Model, a.ModelFrom = model.Value, "--model"
	}

	switch a.Engine {
	case VLLM:
		if kv.Set {
			a.KV = parseKVConfig(kv.Value)
			a.Role, a.RoleFrom = a.KV.role()
		}
	case SGLang:
		a.TransferBackend = Flag{Value: DefaultTransferBackend}
		if backend.Set {
			a.TransferBackend = backend
		}
		if mode.Set && (mode.Value == "prefill" || mode.Value == "decode") {
			a.Role, a.RoleFrom = Role(mode.Value), "--disaggregation-mode "+mode.Value
		}
	case Kvd:
		a.LongBackend = Flag{Value: DefaultLongBackend}
		if longBackend.Set {
			a.LongBackend = longBackend
		}
	}
	return a
}

// scanFlags fills flags the way argparse reads long options: --name VALUE
// or --name=VALUE, the last one wins. A value that looks like an option
// is not taken (argparse refuses the command; the engine will not start),
// and "--" ends the options.
func scanFlags(argv []string, flags map[string]*Flag) {
	for i := 1; i < len(argv); i++ {
		arg := argv[i]
		if arg == "--" {
			return
		}
		if !strings.HasPrefix(arg, "-") {
			continue
		}
		if name, val, ok := strings.Cut(arg, "="); ok {
			if f := flags[name]; f != nil {
				*f = Flag{Value: val, Set: true}
			}
			continue
		}
		f := flags[arg]
		if f == nil || i+1 >= len(argv) || looksLikeOption(argv[i+1]) {
			continue
		}
		*f = Flag{Value: argv[i+1], Set: true}
		i++
	}
}

// looksLikeOption is argparse's test for an argument that starts an
// option rather than being a value: a leading dash, unless it is a
// negative number.
func looksLikeOption(s string) bool {
	if !strings.HasPrefix(s, "-") || s == "-" || strings.Contains(s, " ") {
		return false
	}
	return !(len(s) > 1 && (s[1] >= '0' && s[1] <= '9' || s[1] == '.'))
}

// servePositional finds the model argument of vLLM's serve subcommand:
// "serve" as a word of its own (not the value of an option, as in
// --served-model-name serve) followed by a word that is not an option.
func servePositional(argv []string) (string, bool) {
	for i := 1; i+1 < len(argv); i++ {
		if argv[i] == "serve" && !strings.HasPrefix(argv[i-1], "-") && !strings.HasPrefix(argv[i+1], "-") {
			return argv[i+1], true
		}
	}
	return "", false
}

// engineModules maps the Python modules that start an engine (and their
// packages' prefixes) to the engine.
var engineModules = []struct {
	module string // exact, or a package prefix ending in "."
	engine Engine
}{
	{"infera.engine.vllm", VLLM},
	{"infera.engine.sglang", SGLang},
	{"vllm", VLLM},
	{"vllm.", VLLM}, // vllm.entrypoints.openai.api_server, vllm.entrypoints.cli.main
	{"sglang", SGLang},
	{"sglang.", SGLang}, // sglang.launch_server
	{"infera.kvd", Kvd},
	{"infera.kvd.", Kvd}, // infera.kvd.server
}

// engineOf recognises the command: the vllm console script, or a Python
// interpreter running an engine module with -m.
func engineOf(argv []string) (Engine, string) {
	if len(argv) == 0 {
		return Unknown, ""
	}
	prog := filepath.Base(argv[0])
	if prog == "vllm" {
		if len(argv) > 1 && !strings.HasPrefix(argv[1], "-") {
			return VLLM, "vllm " + argv[1]
		}
		return VLLM, "vllm"
	}
	if !strings.HasPrefix(prog, "python") {
		return Unknown, ""
	}
	mod, ok := pythonModule(argv[1:])
	if !ok {
		return Unknown, ""
	}
	for _, m := range engineModules {
		if mod == m.module || (strings.HasSuffix(m.module, ".") && strings.HasPrefix(mod, m.module)) {
			return m.engine, prog + " -m " + mod
		}
	}
	return Unknown, ""
}

// pythonModule finds -m MODULE among the interpreter's own options, which
// end at the first word that is not an option (a script) or at -c.
func pythonModule(args []string) (string, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-m":
			if i+1 < len(args) {
				return args[i+1], true
			}
			return "", false
		case strings.HasPrefix(a, "-m"):
			return a[2:], true
		case a == "-X" || a == "-W" || a == "--check-hash-based-pycs":
			i++ // the option's value
		case a == "-c" || a == "-" || a == "--" || !strings.HasPrefix(a, "-"):
			return "", false
		}
	}
	return "", false
}

// IsModelPath: the model is a path, absolute or explicitly relative.
// Anything else (meta-llama/Llama-3.1-8B) is a Hugging Face repository id.
func IsModelPath(v string) bool {
	return strings.HasPrefix(v, "/") || v == "." || v == ".." ||
		strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../")
}
