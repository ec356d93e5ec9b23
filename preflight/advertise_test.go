package preflight

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/workerargs"
)

const advMooncake = `{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}`

func advVLLM(extra ...string) []string {
	return append([]string{"python3", "-m", "infera.engine.vllm", "--model", "/models/X",
		"--kv-transfer-config", advMooncake}, extra...)
}

func advSGLang(extra ...string) []string {
	return append([]string{"python3", "-m", "infera.engine.sglang", "--model-path", "/models/X",
		"--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mooncake"}, extra...)
}

func TestClassifyAddr(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    addrKind
		varName string
	}{
		{"10.1.2.3", addrRoutable, ""},
		{"fd00::7", addrRoutable, ""},
		{"[fd00::7]", addrRoutable, ""},
		{"0.0.0.0", addrUnspecified, ""},
		{"::", addrUnspecified, ""},
		{"127.0.0.1", addrLoopback, ""},
		{"127.3.4.5", addrLoopback, ""},
		{"::1", addrLoopback, ""},
		{"[::1]", addrLoopback, ""},
		{"::ffff:127.0.0.1", addrLoopback, ""},
		{"localhost", addrLoopback, ""},
		{"LocalHost.", addrLoopback, ""},
		{"localhost.localdomain", addrLoopback, ""},
		{"ip6-localhost", addrLoopback, ""},
		{"prefill-0.infera.svc", addrHostname, ""},
		{"$(POD_IP)", addrUnexpanded, "POD_IP"},
		{"$(NODE_IP):8998", addrUnexpanded, "NODE_IP"},
		{"", addrEmpty, ""},
	} {
		kind, ref, _ := classifyAddr(tc.in)
		assert.Equal(t, tc.want, kind, tc.in)
		assert.Equal(t, tc.varName, ref, tc.in)
	}
}

func TestAdvertise(t *testing.T) {
	podIP := map[string]string{"POD_IP": "10.1.2.3"}
	for _, tc := range []struct {
		name   string
		argv   []string
		env    map[string]string
		status Status
		sev    Severity
		seen   []string
		why    []string
		do     []string
		notDo  []string
	}{
		{name: "aggregated vLLM", argv: []string{"python3", "-m", "infera.engine.vllm", "--host", "0.0.0.0"},
			status: Skipped, seen: []string{"not a prefill/decode worker"}},
		{name: "vLLM 0.0.0.0", argv: advVLLM("--data-parallel-address", "0.0.0.0"), env: podIP,
			status: Fail, sev: Error,
			seen: []string{"--data-parallel-address 0.0.0.0: the unspecified address"},
			do:   []string{"Set --data-parallel-address to this pod's routable address: use $(POD_IP) = 10.1.2.3."}},
		{name: "vLLM 127.0.0.1", argv: advVLLM("--data-parallel-address=127.0.0.1"), env: podIP,
			status: Fail, sev: Error, seen: []string{"--data-parallel-address 127.0.0.1: loopback"}},
		{name: "vLLM 127/8", argv: advVLLM("--data-parallel-address", "127.0.1.1"),
			status: Fail, sev: Error, seen: []string{"127.0.1.1: loopback"},
			do: []string{"e.g. $(POD_IP), with POD_IP from the downward API (fieldRef status.podIP)"}},
		{name: "vLLM ::1", argv: advVLLM("-dpa", "::1"), env: podIP,
			status: Fail, sev: Error, seen: []string{"--data-parallel-address ::1: loopback"}},
		{name: "vLLM routable", argv: advVLLM("--data-parallel-address", "10.1.2.3"), env: podIP,
			status: Pass, seen: []string{"--data-parallel-address 10.1.2.3"}},
		{name: "vLLM hostname", argv: advVLLM("--data-parallel-address", "prefill-0.infera.svc"),
			status: Pass, seen: []string{"prefill-0.infera.svc: not resolved (preflight makes no DNS queries)"}},
		{name: "vLLM $(POD_IP) unexpanded", argv: advVLLM("--data-parallel-address", "$(POD_IP)"),
			status: Fail, sev: Error,
			seen:  []string{"--data-parallel-address $(POD_IP): an unexpanded reference: $(POD_IP) reached the worker as text, so POD_IP was not defined in the container spec at that point"},
			do:    []string{"Define POD_IP in the container's env"},
			notDo: []string{"use $(POD_IP) ="}},
		{name: "vLLM without --data-parallel-address", argv: advVLLM(), env: podIP,
			status: Fail, sev: Error,
			seen: []string{"--data-parallel-address not set (vLLM then uses 127.0.0.1)"},
			do:   []string{"Set --data-parallel-address to this pod's routable address: use $(POD_IP) = 10.1.2.3."}},
		{name: "vLLM kv_ip loopback in the config",
			argv: []string{"vllm", "serve", "--data-parallel-address", "10.1.2.3", "--kv-transfer-config",
				`{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer","kv_ip":"127.0.0.1"}`},
			status: Fail, sev: Error, seen: []string{"--kv-transfer-config kv_ip 127.0.0.1: loopback"},
			do: []string{"Set kv_ip in --kv-transfer-config to"}},
		{name: "vLLM nested host in a MultiConnector",
			argv: []string{"vllm", "serve", "--data-parallel-address", "10.1.2.3", "--kv-transfer-config",
				`{"kv_connector":"MultiConnector","kv_role":"kv_both","kv_connector_extra_config":{"connectors":[{"kv_connector":"MooncakeConnector","kv_role":"kv_producer","kv_connector_extra_config":{"host":"localhost"}}]}}`},
			status: Fail, sev: Error,
			seen: []string{"--kv-transfer-config kv_connector_extra_config.connectors[0].kv_connector_extra_config.host localhost"},
			why:  []string{"(--kv-transfer-config kv_connector_extra_config.connectors[0].kv_role=kv_producer (MooncakeConnector))"}},
		{name: "vLLM kv_ip routable",
			argv: []string{"vllm", "serve", "--data-parallel-address", "10.1.2.3", "--kv-transfer-config",
				`{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer","kv_ip":"10.1.2.3"}`},
			status: Pass, seen: []string{"--kv-transfer-config kv_ip 10.1.2.3"}},
		// The role decides, not the connector: kv_both (a KV cache store
		// or offload) has no peer; a producer with any connector has one.
		{name: "vLLM Mooncake kv_both", argv: []string{"vllm", "serve", "/m", "--kv-transfer-config",
			`{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}`},
			status: Skipped, seen: []string{"not a prefill/decode worker"}},
		{name: "vLLM Mooncake without a role", argv: []string{"vllm", "serve", "/m", "--kv-transfer-config",
			`{"kv_connector":"MooncakeConnector"}`},
			status: Skipped, seen: []string{"not a prefill/decode worker"}},
		// NixlConnector: the handshake address is
		// VLLM_NIXL_SIDE_CHANNEL_HOST (default localhost), given to the
		// decoder by the producer; the data-parallel address is not used.
		{name: "vLLM Nixl producer", argv: []string{"vllm", "serve", "/m", "--kv-transfer-config",
			`{"kv_connector":"NixlConnector","kv_role":"kv_producer"}`},
			status: Fail, sev: Error, seen: []string{"--data-parallel-address not set: not used by NixlConnector", "VLLM_NIXL_SIDE_CHANNEL_HOST not set (vLLM then uses localhost)"},
			why: []string{"The vLLM worker on the other node (--kv-transfer-config kv_role=kv_producer (NixlConnector))"},
			do:  []string{"Set VLLM_NIXL_SIDE_CHANNEL_HOST to this pod's routable address"}},
		{name: "vLLM Nixl producer with a side channel host", argv: []string{"vllm", "serve", "/m", "--kv-transfer-config",
			`{"kv_connector":"NixlConnector","kv_role":"kv_producer"}`}, env: map[string]string{"VLLM_NIXL_SIDE_CHANNEL_HOST": "10.1.2.3"},
			status: Pass, seen: []string{"VLLM_NIXL_SIDE_CHANNEL_HOST 10.1.2.3"}},
		{name: "vLLM Nixl consumer", argv: []string{"vllm", "serve", "/m", "--kv-transfer-config",
			`{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}`},
			status: Pass, seen: []string{"--data-parallel-address not set: not used by NixlConnector"}},
		{name: "vLLM other connector producer", argv: []string{"vllm", "serve", "/m", "--kv-transfer-config",
			`{"kv_connector":"P2pNcclConnector","kv_role":"kv_producer"}`},
			status: Fail, sev: Error, seen: []string{"--data-parallel-address not set (vLLM then uses 127.0.0.1)"}},
		{name: "SGLang Nixl prefill", argv: []string{"python3", "-m", "sglang.launch_server", "--disaggregation-mode", "prefill",
			"--disaggregation-transfer-backend", "nixl", "--host", "10.1.2.3"},
			status: Pass, seen: []string{"--host 10.1.2.3"}},
		{name: "vLLM VLLM_HOST_IP 0.0.0.0", argv: advVLLM("--data-parallel-address", "10.1.2.3"),
			env:    map[string]string{"VLLM_HOST_IP": "0.0.0.0"},
			status: Fail, sev: Error, seen: []string{"VLLM_HOST_IP 0.0.0.0"}, do: []string{"Set VLLM_HOST_IP to"}},
		{name: "SGLang 0.0.0.0 with SGLANG_HOST_IP", argv: advSGLang("--host", "0.0.0.0"),
			env:    map[string]string{"SGLANG_HOST_IP": "10.1.2.3", "POD_IP": "10.1.2.3"},
			status: Pass, seen: []string{"--host 0.0.0.0: a bind address, fine: SGLANG_HOST_IP 10.1.2.3 is advertised"}},
		{name: "SGLang 0.0.0.0 with a bootstrap host", argv: advSGLang("--host", "0.0.0.0", "--disaggregation-bootstrap-host", "10.1.2.4"),
			status: Pass, seen: []string{"fine: --disaggregation-bootstrap-host 10.1.2.4 is advertised"}},
		{name: "SGLang 0.0.0.0 alone", argv: advSGLang("--host", "0.0.0.0", "--discovery-backend", "etcd"), env: podIP,
			status: Fail, sev: Warn,
			seen: []string{"--host 0.0.0.0 with neither SGLANG_HOST_IP nor --disaggregation-bootstrap-host set"},
			do:   []string{"Set SGLANG_HOST_IP to this pod's routable address: use $(POD_IP) = 10.1.2.3."}},
		// The infera wrapper under Kubernetes discovery (its default)
		// publishes the Pod IP as the bootstrap address: --host 0.0.0.0
		// is only where to listen, and what is left to judge is the
		// engine's own KV address (the route's source address here).
		{name: "SGLang wrapper 0.0.0.0 with POD_IP", argv: advSGLang("--host", "0.0.0.0"), env: podIP,
			status: Pass, seen: []string{"--host 0.0.0.0: a bind address, fine: the infera wrapper publishes POD_IP 10.1.2.3 as the bootstrap address (Kubernetes discovery)",
				"SGLANG_HOST_IP not set: SGLang's get_local_ip_auto() takes 10.1.2.3 (on eth0"}},
		{name: "SGLang wrapper 0.0.0.0 with HOST_IP", argv: advSGLang("--host", "0.0.0.0"), env: map[string]string{"POD_IP": "10.1.2.3", "HOST_IP": "10.9.8.7"},
			status: Pass, seen: []string{"HOST_IP 10.9.8.7", "--host 0.0.0.0: a bind address, fine: HOST_IP 10.9.8.7 is advertised"}},
		{name: "SGLang wrapper 0.0.0.0 with SGLANG_LOCAL_IP_NIC", argv: advSGLang("--host", "0.0.0.0"), env: map[string]string{"POD_IP": "10.1.2.3", "SGLANG_LOCAL_IP_NIC": "nic0"},
			status: Pass, seen: []string{"SGLang takes an address of nic0 (SGLANG_LOCAL_IP_NIC)"}},
		{name: "SGLang wrapper 0.0.0.0 without POD_IP", argv: advSGLang("--host", "0.0.0.0"),
			status: Fail, sev: Warn, seen: []string{"--host 0.0.0.0 with neither SGLANG_HOST_IP nor --disaggregation-bootstrap-host set"}},
		{name: "SGLang wrapper --advertise-host loopback", argv: advSGLang("--host", "0.0.0.0", "--advertise-host", "127.0.0.1"), env: podIP,
			status: Fail, sev: Error, seen: []string{"--advertise-host 127.0.0.1: loopback"}},
		{name: "SGLang engine's own entry point 0.0.0.0", argv: []string{"python3", "-m", "sglang.launch_server", "--disaggregation-mode", "decode",
			"--host", "0.0.0.0"}, env: podIP,
			status: Fail, sev: Warn, seen: []string{"--host 0.0.0.0 with neither"}},
		// vLLM's MooncakeConnector: a kv_consumer does not use the
		// data-parallel address; what it advertises is get_ip().
		{name: "vLLM Mooncake consumer without --data-parallel-address", argv: []string{"vllm", "serve", "/m", "--kv-transfer-config",
			`{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer"}`}, env: podIP,
			status: Pass, seen: []string{"--data-parallel-address not set: not used by a MooncakeConnector kv_consumer",
				"VLLM_HOST_IP not set: vLLM's get_ip() takes 10.1.2.3 (on eth0"}},
		{name: "vLLM Mooncake consumer in a MultiConnector", argv: []string{"python3", "-m", "infera.engine.vllm", "--kv-transfer-config",
			`{"kv_connector":"MultiConnector","kv_role":"kv_both","kv_connector_extra_config":{"connectors":[{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer"},{"kv_connector":"InferaKvdConnector","kv_role":"kv_both"}]}}`},
			env: podIP, status: Pass, seen: []string{"not used by a MooncakeConnector kv_consumer"}},
		{name: "vLLM Mooncake producer in a MultiConnector", argv: []string{"python3", "-m", "infera.engine.vllm", "--kv-transfer-config",
			`{"kv_connector":"MultiConnector","kv_role":"kv_both","kv_connector_extra_config":{"connectors":[{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"},{"kv_connector":"InferaKvdConnector","kv_role":"kv_both"}]}}`},
			env: podIP, status: Fail, sev: Error, seen: []string{"--data-parallel-address not set (vLLM then uses 127.0.0.1)"}},
		{name: "vLLM Mooncake consumer with VLLM_HOST_IP unexpanded", argv: []string{"vllm", "serve", "/m", "--kv-transfer-config",
			`{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer"}`}, env: map[string]string{"VLLM_HOST_IP": "$(NODE_IP)"},
			status: Fail, sev: Error, seen: []string{"VLLM_HOST_IP $(NODE_IP): an unexpanded reference"}},
		{name: "SGLang 0.0.0.0 with a loopback SGLANG_HOST_IP", argv: advSGLang("--host", "0.0.0.0"),
			env:    map[string]string{"SGLANG_HOST_IP": "127.0.0.1"},
			status: Fail, sev: Error, seen: []string{"SGLANG_HOST_IP 127.0.0.1: loopback"}},
		{name: "SGLang SGLANG_HOST_IP unexpanded", argv: advSGLang("--host", "0.0.0.0"),
			env:    map[string]string{"SGLANG_HOST_IP": "$(POD_IP)"},
			status: Fail, sev: Error, seen: []string{"SGLANG_HOST_IP $(POD_IP): an unexpanded reference"},
			do: []string{"Define POD_IP"}},
		{name: "SGLang --host unexpanded", argv: advSGLang("--host", "$(POD_IP)", "--port", "30000"),
			status: Fail, sev: Error, seen: []string{"--host $(POD_IP): an unexpanded reference: $(POD_IP) reached the worker as text, so POD_IP was not defined in the container spec at that point"}},
		// POD_IP set in this environment (an image ENV, a wrapper): the
		// message says what is true, not that POD_IP is undefined.
		{name: "SGLang --host unexpanded with POD_IP set", argv: advSGLang("--host", "$(POD_IP)", "--port", "30000"),
			env:    map[string]string{"POD_IP": "10.1.2.3"},
			status: Fail, sev: Error, seen: []string{"--host $(POD_IP): an unexpanded reference: $(POD_IP) reached the worker as text, so POD_IP was not defined in the container spec at that point (POD_IP=10.1.2.3 is in this environment, but not from a spec entry before the reference"}},
		{name: "SGLang --host loopback", argv: advSGLang("--host", "127.0.0.1"),
			env:    map[string]string{"SGLANG_HOST_IP": "10.1.2.3"},
			status: Fail, sev: Error, seen: []string{"--host 127.0.0.1: loopback"}, do: []string{"Set --host to"}},
		{name: "SGLang --host localhost", argv: advSGLang("--host=localhost"),
			status: Fail, sev: Error, seen: []string{"--host localhost: a name of the loopback address"}},
		{name: "SGLang without --host", argv: advSGLang(),
			env:    map[string]string{"SGLANG_HOST_IP": "10.1.2.3"},
			status: Fail, sev: Error, seen: []string{"--host not set (SGLang then binds 127.0.0.1)"}},
		{name: "SGLang routable", argv: advSGLang("--host", "10.1.2.3"),
			env:    map[string]string{"SGLANG_HOST_IP": "10.1.2.3"},
			status: Pass, seen: []string{"--host 10.1.2.3", "SGLANG_HOST_IP 10.1.2.3"}},
		{name: "SGLang --dist-init-addr loopback", argv: advSGLang("--host", "10.1.2.3", "--dist-init-addr", "127.0.0.1:5000"),
			status: Fail, sev: Error, seen: []string{"--dist-init-addr host 127.0.0.1: loopback"},
			do: []string{"Set the host of --dist-init-addr to"}},
		{name: "SGLang --dist-init-addr ::1", argv: advSGLang("--host", "10.1.2.3", "--dist-init-addr", "[::1]:5000"),
			status: Fail, sev: Error, seen: []string{"--dist-init-addr host ::1: loopback"}},
		{name: "SGLang --dist-init-addr routable", argv: advSGLang("--host", "10.1.2.3", "--dist-init-addr", "10.1.2.9:5000"),
			status: Pass, seen: []string{"--dist-init-addr host 10.1.2.9"}},
		{name: "SGLang VLLM_HOST_IP loopback", argv: advSGLang("--host", "10.1.2.3"),
			env:    map[string]string{"VLLM_HOST_IP": "127.0.0.1"},
			status: Fail, sev: Error, seen: []string{"VLLM_HOST_IP 127.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkAdvertise(podNetwork(t, workerargs.Parse(tc.argv), tc.env))
			assert.Equal(t, tc.status, r.Status, "%+v", r)
			assert.Equal(t, tc.sev, r.Severity, "%+v", r)
			for _, s := range tc.seen {
				assert.Contains(t, r.Seen, s)
			}
			for _, s := range tc.why {
				assert.Contains(t, r.Why, s)
			}
			for _, s := range tc.do {
				assert.Contains(t, r.Do, s)
			}
			for _, s := range tc.notDo {
				assert.NotContains(t, r.Do, s)
			}
			if r.Status == Fail {
				assert.NotEmpty(t, r.Why)
				assert.NotEmpty(t, r.Do)
			}
			if r.Severity == Error && !strings.Contains(r.Seen, "unexpanded") {
				assert.Contains(t, r.Why, "480 s")
			}
		})
	}
}

func TestAdvertiseRegistered(t *testing.T) {
	idx := map[string]int{}
	for i, n := range Names() {
		idx[n] = i + 1
	}
	require.NotZero(t, idx["advertise"])
	require.NotZero(t, idx["advertise-ip"])
	require.NotZero(t, idx["rdma"])
	assert.Less(t, idx["advertise"], idx["advertise-ip"])
	assert.Less(t, idx["advertise-ip"], idx["rdma"])
}

// podNetwork is a pod without hostNetwork: eth0 (a veth, virtual) has the
// Pod IP 10.1.2.3 and the default route.
func podNetwork(t *testing.T, args workerargs.Args, env map[string]string) *Facts {
	return &Facts{Args: args, Env: env, Sysfs: t.TempDir(),
		Interfaces: func() ([]Interface, error) {
			return []Interface{{Name: "lo", Addrs: []string{"127.0.0.1"}, Up: true, Loopback: true},
				{Name: "eth0", Addrs: []string{"10.1.2.3"}, Up: true}}, nil
		},
		RouteSource: func() (string, error) { return "10.1.2.3", nil },
	}
}

// hostNetwork is a node: cni0 (a bridge) and nic0 (physical), with the
// default route through route.
func hostNetwork(t *testing.T, args workerargs.Args, env map[string]string, route string, routeErr error) *Facts {
	sys := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "class/net/nic0/device"), 0o755))
	return &Facts{Args: args, Env: env, Sysfs: sys,
		Interfaces: func() ([]Interface, error) {
			return []Interface{{Name: "lo", Addrs: []string{"127.0.0.1"}, Up: true, Loopback: true},
				{Name: "cni0", Addrs: []string{"10.42.0.1"}, Up: true},
				{Name: "nic0", Addrs: []string{"10.9.8.7"}, Up: true}}, nil
		},
		RouteSource: func() (string, error) { return route, routeErr },
	}
}

// What a decoder advertises on a node: the address of its default route,
// unless VLLM_HOST_IP names one or the infera wrapper pins it.
func TestAdvertiseOwnAddress(t *testing.T) {
	consumer := `{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer"}`
	plain := workerargs.Parse([]string{"vllm", "serve", "/m", "--kv-transfer-config", consumer})
	wrapped := workerargs.Parse([]string{"python3", "-m", "infera.engine.vllm", "--kv-transfer-config", consumer})

	r := checkAdvertise(hostNetwork(t, plain, nil, "10.42.0.1", nil))
	assert.Equal(t, Fail, r.Status)
	assert.Equal(t, Warn, r.Severity)
	assert.Contains(t, r.Seen, "VLLM_HOST_IP not set: vLLM's get_ip() takes 10.42.0.1 (on cni0, the interface of the default route), a virtual interface, while nic0 has 10.9.8.7")
	assert.Contains(t, r.Do, "Set VLLM_HOST_IP to this node's address on the network the peer uses (here 10.9.8.7 on nic0)")
	assert.NotContains(t, r.Do, "Set VLLM_HOST_IP to this pod's routable address")

	r = checkAdvertise(hostNetwork(t, plain, nil, "10.9.8.7", nil))
	assert.Equal(t, Pass, r.Status, "%+v", r)
	assert.Contains(t, r.Seen, "get_ip() takes 10.9.8.7 (on nic0")

	r = checkAdvertise(hostNetwork(t, plain, nil, "", syscall.ENETUNREACH))
	assert.Equal(t, Warn, r.Severity)
	assert.Contains(t, r.Seen, "finds no address: no IPv4 route (network is unreachable)")

	r = checkAdvertise(hostNetwork(t, wrapped, nil, "10.42.0.1", nil))
	assert.Equal(t, Pass, r.Status, "%+v", r)
	assert.Contains(t, r.Seen, "VLLM_HOST_IP not set: the infera wrapper pins it to the RDMA rail before the engine starts")

	r = checkAdvertise(hostNetwork(t, plain, map[string]string{"VLLM_HOST_IP": "10.9.8.7"}, "10.42.0.1", nil))
	assert.Equal(t, Pass, r.Status, "%+v", r)
	assert.Contains(t, r.Seen, "VLLM_HOST_IP 10.9.8.7")
}
