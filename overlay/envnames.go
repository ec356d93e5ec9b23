package overlay

import (
	"encoding/json"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"sync"

	"github.com/infera/infera-exec/internal/boundedread"
)

// The INFERA_* variables the payload's own code reads (the worker, the
// router, the kvd daemon): they are set in correct deployments, and the
// unknown-name check of the configuration must not call them typos. A
// payload built by `infera-payload index` lists them in its index
// (Index.EnvNames); for a payload whose index does not (v0.2.2, or one
// built before the field), LegacyEnvNames stands in.

// LegacyEnvNames are the INFERA_* names the infera package of payload
// v0.2.2 reads, as string literals in its Python code (infera/**/*.py:
// the engines' wrappers, the server, the kvd daemon, their preflight).
var LegacyEnvNames = []string{
	"INFERA_ATOM_KV_EVENTS_ENDPOINT", "INFERA_ATOM_KV_EVENTS_STRICT", "INFERA_ATOM_READY_TIMEOUT",
	"INFERA_BREAKER_COOLDOWN_S", "INFERA_BREAKER_FAILURE_THRESHOLD", "INFERA_BREAKER_MAX_COOLDOWN_S",
	"INFERA_DEFAULT_KV_FP8", "INFERA_DRAIN_TIMEOUT", "INFERA_E2E_MODEL_DIR",
	"INFERA_ENABLE_PROFILING", "INFERA_ENABLE_SCALING_API",
	"INFERA_EPP_DEST_PORT", "INFERA_EPP_GRPC_HEALTH_PORT", "INFERA_EPP_GRPC_PORT", "INFERA_EPP_SECURE",
	"INFERA_K8S_LABEL_SELECTOR",
	"INFERA_KVD_ACTIVE_MODE", "INFERA_KVD_AIS", "INFERA_KVD_ARENA_HUGETLB", "INFERA_KVD_ARENA_PREFAULT",
	"INFERA_KVD_ASYNC_LOAD", "INFERA_KVD_CHUNK_RING_MAX_BYTES", "INFERA_KVD_CHUNK_TARGET_MIB",
	"INFERA_KVD_CHUNK_TOKENS", "INFERA_KVD_FSYNC_SAVE", "INFERA_KVD_GPU_DIRECT", "INFERA_KVD_HIPFILE_ROOTS",
	"INFERA_KVD_IO_MODE", "INFERA_KVD_L3_BUDGET_BYTES", "INFERA_KVD_L3_FREE_FLOOR", "INFERA_KVD_L3_REAP_INTERVAL",
	"INFERA_KVD_LAYERWISE_LOAD", "INFERA_KVD_LAYERWISE_PINNED_CAP_MIB", "INFERA_KVD_LAYERWISE_PREFETCH_DEPTH",
	"INFERA_KVD_LOAD_DRAIN_S", "INFERA_KVD_LOAD_RING_SLOTS", "INFERA_KVD_LOAD_WORKERS", "INFERA_KVD_LOG_L3",
	"INFERA_KVD_LONG_BYTES", "INFERA_KVD_LONG_FSYNC", "INFERA_KVD_RETENTION_DEFAULT", "INFERA_KVD_SAVE_BOUNCE",
	"INFERA_KVD_SAVE_POOL_MB", "INFERA_KVD_SAVE_WORKERS", "INFERA_KVD_SCAN_WORKERS", "INFERA_KVD_SELFCHECK_GB",
	"INFERA_KVD_SILENT", "INFERA_KVD_SOCKET", "INFERA_KVD_STORAGE_SELFCHECK",
	"INFERA_KV_EVENTS", "INFERA_L4_ALLOW_TCP_FALLBACK", "INFERA_L4_CLUSTER_ID", "INFERA_L4_LOCAL_PORT",
	"INFERA_MIGRATION_LIMIT", "INFERA_NATS_REQ_IDLE_TIMEOUT", "INFERA_NATS_REQ_MAX_DURATION",
	"INFERA_NATS_REQ_MAX_PENDING", "INFERA_NODEPORT_RANGE",
	"INFERA_PREFLIGHT_KV_GPUS", "INFERA_PREFLIGHT_STORAGE_GB", "INFERA_PREFLIGHT_STORAGE_PATH",
	"INFERA_REQUESTS", "INFERA_REQUEST_MAX_RETRIES",
	"INFERA_ROUTER_BACKEND", "INFERA_ROUTER_BIN", "INFERA_ROUTER_DEFAULT_RETENTION", "INFERA_ROUTER_MODE",
	"INFERA_VLLM_SAVED_KEYS_CAP", "INFERA_VLLM_SAVED_KEYS_TTL_S",
}

// envLiteral is an INFERA_* name written as a Python string literal:
// os.environ.get("INFERA_X"), os.getenv('INFERA_X'), envvar="INFERA_X".
var envLiteral = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`["']((?:INFERA_)[A-Z0-9_]+)["']`) })

// PythonEnvNames are the INFERA_* names written as string literals in
// Python source src.
func PythonEnvNames(src []byte) []string {
	var out []string
	for _, m := range envLiteral().FindAllSubmatch(src, -1) {
		out = append(out, string(m[1]))
	}
	return sortedUnique(out)
}

// EnvNamesAnswering is PayloadEnvNames's names, read only when the
// payload's filesystem answers in time (else LegacyEnvNames).
func EnvNamesAnswering(root string, answers func(paths ...string) error) []string {
	if root == "" || answers(root) != nil {
		return LegacyEnvNames
	}
	names, _ := PayloadEnvNames(root)
	return names
}

// PayloadEnvNames are the INFERA_* names the payload at root reads: the
// list in its index, or LegacyEnvNames when the index has none (a v0.2.2
// payload, an index written before the list existed, no index at all).
// fromIndex says which. Only the start of the index is read: the list
// comes before the entries.
func PayloadEnvNames(root string) (names []string, fromIndex bool) {
	if names, ok := indexEnvNames(filepath.Join(root, IndexName)); ok {
		return names, true
	}
	return LegacyEnvNames, false
}

// indexEnvNames reads the index's "infera_env" list, stopping at the
// entries; false when the file cannot be read or holds no list.
func indexEnvNames(path string) ([]string, bool) {
	f, err := boundedread.Open(path, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, boundedread.Index))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		switch t {
		case "infera_env":
			var names []string
			if err := dec.Decode(&names); err != nil || len(names) == 0 {
				return nil, false
			}
			return names, true
		case "entries":
			return nil, false // written after the list: there is none
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, false
		}
	}
	return nil, false
}

func sortedUnique(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := append([]string(nil), in...)
	sort.Strings(out)
	n := 1
	for _, s := range out[1:] {
		if s != out[n-1] {
			out[n] = s
			n++
		}
	}
	return out[:n]
}
