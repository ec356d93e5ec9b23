package preflight

import (
	"regexp"
	"strings"
	"sync"

	"net/netip"

	"github.com/infera/infera-exec/internal/workerargs"
)

// The advertise check: a prefill/decode worker tells its peer on the
// other node where to connect. An address that is the unspecified one
// (0.0.0.0, ::), a loopback one (127.0.0.0/8, ::1, localhost) or an
// unexpanded Kubernetes $(VAR) cannot be reached from there, and requests
// hang until the connector's 480 s timeout instead of failing.

// addrKind is what a configured address is, judged without DNS.
type addrKind int

const (
	addrRoutable    addrKind = iota // a literal IP, neither unspecified nor loopback
	addrUnspecified                 // 0.0.0.0, ::
	addrLoopback                    // 127.0.0.0/8, ::1, localhost
	addrHostname                    // a name: not resolved here
	addrUnexpanded                  // $(VAR) left by Kubernetes: VAR is not defined
	addrEmpty
)

// k8sVarRef is a Kubernetes dependent-variable reference, $(VAR), which
// the kubelet leaves as is when VAR is not defined before it.
var k8sVarRef = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\$\(([-._A-Za-z0-9]+)\)`) })

// unexpandedNote says what an unexpanded $(VAR) shows: the kubelet
// expands a reference in command, args and env only from the variables
// the container spec defines (before it, for env), so the text reached
// the worker because VAR was not defined there at that point.
func unexpandedNote(name string) string {
	return "an unexpanded reference: $(" + name + ") reached the worker as text, so " + name +
		" was not defined in the container spec at that point"
}

// setLater adds, when VAR is in the environment now, where it may have
// come from instead: an image ENV or a wrapper, which Kubernetes does not
// expand references from.
func setLater(env map[string]string, name string) string {
	if v, ok := env[name]; ok {
		return " (" + name + "=" + v + " is in this environment, but not from a spec entry before the reference: " +
			"an image ENV, a later env entry or a wrapper does not count for Kubernetes' $(VAR) expansion)"
	}
	return ""
}

// localhostNames are names that mean the loopback interface; they are
// judged without a lookup.
var localhostNames = map[string]bool{
	"localhost": true, "localhost.localdomain": true, "ip6-localhost": true, "ip6-loopback": true,
}

// classifyAddr judges an address (a literal IP, optionally in brackets,
// or a name) without any lookup. varName is set for addrUnexpanded; note
// says what the value is, for Seen.
func classifyAddr(v string) (kind addrKind, varName, note string) {
	v = strings.TrimSpace(v)
	if v == "" {
		return addrEmpty, "", "empty"
	}
	if m := k8sVarRef().FindStringSubmatch(v); m != nil {
		return addrUnexpanded, m[1], unexpandedNote(m[1])
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")); err == nil {
		a = a.Unmap()
		switch {
		case a.IsUnspecified():
			return addrUnspecified, "", "the unspecified address: a bind address, nobody can connect to it"
		case a.IsLoopback():
			return addrLoopback, "", "loopback: reachable from this pod only"
		}
		return addrRoutable, "", ""
	}
	name := strings.ToLower(strings.TrimSuffix(v, "."))
	if localhostNames[name] || strings.HasSuffix(name, ".localhost") {
		return addrLoopback, "", "a name of the loopback address"
	}
	return addrHostname, "", "not resolved (preflight makes no DNS queries)"
}

// advFinding is one address the worker will use, and the verdict on it.
type advFinding struct {
	seen   string   // "--host 127.0.0.1: loopback: reachable from this pod only"
	sev    Severity // "" when fine
	target string   // what to change, for Do
	kind   addrKind
	varRef string // for addrUnexpanded
	// why and do of a warning, which each kind of warning words itself.
	why, do string
}

type advCheck struct {
	in       *Facts
	findings []advFinding
}

// addr judges one configured address. A literal routable IP or an
// unresolved name is fine; loopback, unspecified, unexpanded or empty is
// an error.
func (a *advCheck) addr(label, target, v string) addrKind {
	kind, ref, note := classifyAddr(v)
	f := advFinding{seen: label + " " + v, target: target, kind: kind, varRef: ref}
	if v == "" {
		f.seen = label + " is empty"
	} else if note != "" {
		f.seen += ": " + note
	}
	if kind == addrUnexpanded {
		f.seen += setLater(a.in.Env, ref)
	}
	switch kind {
	case addrUnspecified, addrLoopback, addrUnexpanded, addrEmpty:
		f.sev = Error
	}
	a.findings = append(a.findings, f)
	return kind
}

func (a *advCheck) note(seen string) {
	a.findings = append(a.findings, advFinding{seen: seen})
}

func checkAdvertise(in *Facts) Result {
	if !in.Args.PD() {
		return skipped("not a prefill/decode worker")
	}
	a := &advCheck{in: in}
	if in.Args.Engine == workerargs.VLLM {
		a.vllm()
	} else {
		a.sglang()
	}
	return a.result(in.Args.Engine, in.Args.RoleFrom)
}

// vllm: --data-parallel-address where the connector uses it, addresses
// inside --kv-transfer-config, VLLM_HOST_IP, and the address the worker
// finds for itself when VLLM_HOST_IP does not name one.
//
// vLLM's MooncakeConnector (vllm/distributed/kv_transfer/kv_connector/v1/
// mooncake/mooncake_connector.py) uses the data-parallel master address
// for one thing: get_mooncake_bootstrap_addr, "only used by prefillers to
// register workers. Decoders should get addr from kv_transfer_params".
// Every worker that is not a kv_consumer (kv_producer, kv_both) starts or
// registers with the bootstrap server at data_parallel_master_ip, which
// is 127.0.0.1 unless --data-parallel-address says otherwise, and the seed's
// recipes record the hang that follows ("Failed to connect to bootstrap
// server http://0.0.0.0:8998"). A kv_consumer never contacts it: it is
// told the prefiller's bootstrap address per request, and what it
// advertises itself is get_ip() (MooncakeConnectorWorker.hostname, sent
// as remote_hostname in MooncakeXferMetadata and used to initialize its
// TransferEngine): VLLM_HOST_IP, else the source address of the route to
// 8.8.8.8 (vllm/utils/network_utils.py). vLLM's NixlConnector does not use
// the data-parallel address either; its handshake address is
// VLLM_NIXL_SIDE_CHANNEL_HOST (nixlSideChannel). For other connectors this
// check keeps requiring the address of any prefill/decode worker.
func (a *advCheck) vllm() {
	args := a.in.Args
	need, why := dpAddressNeeded(args.KV)
	if f := args.DataParallelAddress; f.Set {
		a.addr("--data-parallel-address", "--data-parallel-address", f.Value)
	} else if need {
		a.findings = append(a.findings, advFinding{
			seen:   "--data-parallel-address not set (vLLM then uses 127.0.0.1)",
			sev:    Error,
			target: "--data-parallel-address",
			kind:   addrLoopback,
		})
	} else {
		a.note("--data-parallel-address not set: " + why)
	}
	if args.KV != nil {
		a.nixlSideChannel(args.KV)
	}
	// A prefill/decode role comes from a parsed config, so args.KV is
	// there.
	args.KV.Walk(func(path, key string, val any) {
		if s, ok := val.(string); ok && advConfigKeys[key] {
			a.addr("--kv-transfer-config "+path, path+" in --kv-transfer-config", s)
		}
	})
	if v := a.in.Env["VLLM_HOST_IP"]; v != "" {
		a.addr("VLLM_HOST_IP", "VLLM_HOST_IP", v)
	} else if hasMooncake(args.KV) {
		a.ownAddr("VLLM_HOST_IP", "vLLM's get_ip()", args.Wrapper)
	}
}

// dpAddressNeeded says whether the worker needs --data-parallel-address,
// per connector and the role it acts in: a MooncakeConnector that is not a
// kv_consumer needs it; a MooncakeConnector kv_consumer and a
// NixlConnector (whose handshake address is VLLM_NIXL_SIDE_CHANNEL_HOST,
// nixlSideChannel) do not; any other connector in a prefill or decode role
// keeps the rule of every prefill/decode worker, as does a config without
// a connector this check knows. why says, when it is not needed, who does
// not use it.
func dpAddressNeeded(kv *workerargs.KVConfig) (need bool, why string) {
	if kv == nil {
		return true, ""
	}
	var users []string
	for _, c := range kv.Connectors {
		role := kv.RoleOf(c)
		switch c.Name {
		case "MultiConnector":
		case "MooncakeConnector":
			if role != "kv_consumer" {
				return true, ""
			}
			users = advAppendUnique(users, "a MooncakeConnector kv_consumer (it is told the prefiller's bootstrap address with each request)")
		case "NixlConnector":
			users = advAppendUnique(users, "NixlConnector (its handshake address is VLLM_NIXL_SIDE_CHANNEL_HOST)")
		default:
			if role == "kv_producer" || role == "kv_consumer" {
				return true, ""
			}
		}
	}
	if len(users) == 0 {
		return true, ""
	}
	return false, "not used by " + advJoin(users)
}

// nixlSideChannel judges VLLM_NIXL_SIDE_CHANNEL_HOST for a NixlConnector
// that sends KV blocks (kv_producer, kv_both): vLLM's NixlConnector
// listens for the decoder's handshake there and hands it to the decoder
// as remote_host in the request's kv_transfer_params (NixlConnectorScheduler.
// request_finished); unset, it is "localhost" (vllm/envs.py), which no
// peer can reach.
func (a *advCheck) nixlSideChannel(kv *workerargs.KVConfig) {
	sends := false
	for _, c := range kv.Connectors {
		if c.Name == "NixlConnector" && kv.RoleOf(c) != "kv_consumer" {
			sends = true
		}
	}
	if !sends {
		return
	}
	if v := a.in.Env["VLLM_NIXL_SIDE_CHANNEL_HOST"]; v != "" {
		a.addr("VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_HOST", v)
		return
	}
	a.findings = append(a.findings, advFinding{
		seen:   "VLLM_NIXL_SIDE_CHANNEL_HOST not set (vLLM then uses localhost)",
		sev:    Error,
		target: "VLLM_NIXL_SIDE_CHANNEL_HOST",
		kind:   addrLoopback,
	})
}

func hasMooncake(kv *workerargs.KVConfig) bool {
	if kv == nil {
		return false
	}
	for _, c := range kv.Connectors {
		if c.Name == "MooncakeConnector" {
			return true
		}
	}
	return false
}

// ownAddr judges the address an engine finds for itself when no variable
// names it (hostVar, e.g. VLLM_HOST_IP): vLLM's get_ip() and SGLang's
// get_local_ip_auto() both take the source address of the route to
// 8.8.8.8, which sends nothing; Facts.RouteSource does the same. On a
// node with hostNetwork whose default route leaves through a bridge or a
// tunnel (the class of the CNI-bridge address the seed's rail selection
// was fixed for: infera/engine/rocm_rdma_env.py, _private_rail_ipv4), that
// address is one the peer cannot reach while a physical NIC has one it
// can: a warning, as is no route at all (vLLM then advertises 0.0.0.0,
// SGLang raises). wrapperPins: the infera vLLM wrapper sets VLLM_HOST_IP
// itself before the engine starts, on ROCm, which is what these images are
// (apply_kv_host_ip_default: the IPv4 of the RoCE GID, else the first
// private address of a physical NIC), so on
// a node where such a NIC exists the worker advertises that, not the
// route's.
func (a *advCheck) ownAddr(hostVar, picker string, wrapperPins bool) {
	if a.in.noNode {
		a.note(hostVar + " not set: " + picker + " picks the address on the node (--doctor in the pod says which)")
		return
	}
	l := listAdvertise(a.in)
	if wrapperPins && l.err == nil && l.choice != "" {
		a.note(hostVar + " not set: the infera wrapper pins it to the RDMA rail before the engine starts " +
			"(the RoCE GID's IPv4, else the first private address of a physical NIC: " + l.choice + " on " + l.choiceIf + ")")
		return
	}
	src, err := routeSourceOf(a.in)
	fix := "Set " + hostVar + " to this node's address on the network the peer uses"
	if l.choice != "" {
		fix += " (here " + l.choice + " on " + l.choiceIf + ")"
	}
	fix += "; under hostNetwork $(POD_IP) is the node's address."
	if err != nil {
		a.findings = append(a.findings, advFinding{
			seen: hostVar + " not set and " + picker + " finds no address: no IPv4 route (" + err.Error() + ")",
			sev:  Warn, target: hostVar, kind: addrUnspecified,
			why: "Without " + hostVar + " the engine advertises the source address of its default route; " +
				"without one vLLM falls back to 0.0.0.0 and SGLang refuses to start, and no peer can reach 0.0.0.0.",
			do: fix,
		})
		return
	}
	ifname := advOwner(l.ifs, src)
	seen := hostVar + " not set: " + picker + " takes " + src
	if ifname != "" {
		seen += " (on " + ifname + ", the interface of the default route)"
	}
	if l.err == nil && l.choice != "" && src != l.choice && ifname != "" && !netPhysical(sysfsOf(a.in), ifname) {
		a.findings = append(a.findings, advFinding{
			seen: seen + ", a virtual interface, while " + l.choiceIf + " has " + l.choice,
			sev:  Warn, target: hostVar, kind: addrRoutable,
			why: "The engine advertises this address to the peer on the other node for the KV transfer. " +
				"On a node with hostNetwork, an address of a bridge or tunnel (cni0, docker0, flannel) " +
				"is one only this node can reach, and transfers hang.",
			do: fix,
		})
		return
	}
	a.note(seen)
}

// advConfigKeys are the keys of --kv-transfer-config (at any depth, e.g.
// in kv_connector_extra_config or a MultiConnector's list) that hold an
// address the peer is given; the values are strings.
var advConfigKeys = map[string]bool{"kv_ip": true, "kv_host": true, "host": true}

// sglang: --host binds the HTTP and bootstrap servers (default 127.0.0.1);
// SGLANG_HOST_IP or --disaggregation-bootstrap-host say what is
// advertised; --dist-init-addr is the host:port of multi-node init.
//
// Under the infera wrapper (python3 -m infera.engine.sglang) with
// Kubernetes discovery (its default) and POD_IP set, the wrapper publishes
// the Pod IP as the worker's address and the prefiller's bootstrap_addr
// (infera/engine/sglang/__main__.py main: advertise_host from POD_IP;
// worker.py: bootstrap_addr = advertise_host:disaggregation_bootstrap_port),
// so --host 0.0.0.0 only says where to listen. What is still the engine's
// own guess is the address its KV manager binds and registers with the
// bootstrap server for the transfer (sglang/srt/disaggregation/common/
// conn.py CommonKVManager: local_ip = get_local_ip_auto(): SGLANG_HOST_IP,
// HOST_IP, SGLANG_LOCAL_IP_NIC, else the route to 8.8.8.8): ownAddr
// judges that.
func (a *advCheck) sglang() {
	args, env := a.in.Args, a.in.Env
	advertised := "" // a routable address (or name) given explicitly
	if f := args.BootstrapHost; f.Set {
		v := f.Value
		if k := a.addr("--disaggregation-bootstrap-host", "--disaggregation-bootstrap-host", v); k == addrRoutable || k == addrHostname {
			advertised = "--disaggregation-bootstrap-host " + v
		}
	}
	// SGLang's get_local_ip_auto reads SGLANG_HOST_IP, then HOST_IP.
	ownSet := false
	for _, name := range []string{"SGLANG_HOST_IP", "HOST_IP", "VLLM_HOST_IP"} {
		if v := env[name]; v != "" && !(name == "HOST_IP" && ownSet) {
			if k := a.addr(name, name, v); (k == addrRoutable || k == addrHostname) && name != "VLLM_HOST_IP" && advertised == "" {
				advertised = name + " " + v
			}
			ownSet = ownSet || name != "VLLM_HOST_IP"
		}
	}
	if f := args.DistInitAddr; f.Set {
		host := f.Value
		if h, ok := hostOfHostPort(f.Value); ok {
			host = h
		}
		a.addr("--dist-init-addr host", "the host of --dist-init-addr", host)
	}
	published := a.wrapperPublishes()
	host := args.Host.Value
	if !args.Host.Set {
		a.findings = append(a.findings, advFinding{
			seen:   "--host not set (SGLang then binds 127.0.0.1)",
			sev:    Error,
			target: "--host",
			kind:   addrLoopback,
		})
		return
	}
	// --host 0.0.0.0 binds every interface: a peer can connect, and only
	// the address SGLang advertises without SGLANG_HOST_IP is a guess
	// that may be right, so a warning. 127.0.0.1 (and SGLang's default)
	// binds loopback only: no peer can ever connect, an error.
	if kind, _, _ := classifyAddr(host); kind == addrUnspecified {
		switch {
		case advertised != "":
			a.note("--host " + host + ": a bind address, fine: " + advertised + " is advertised")
		case published != "":
			a.note("--host " + host + ": a bind address, fine: " + published)
			if nic := env["SGLANG_LOCAL_IP_NIC"]; nic != "" {
				a.note("SGLANG_HOST_IP not set: SGLang takes an address of " + nic + " (SGLANG_LOCAL_IP_NIC)")
			} else {
				a.ownAddr("SGLANG_HOST_IP", "SGLang's get_local_ip_auto()", false)
			}
		default:
			a.findings = append(a.findings, advFinding{
				seen:   "--host " + host + " with neither SGLANG_HOST_IP nor --disaggregation-bootstrap-host set",
				sev:    Warn,
				target: "SGLANG_HOST_IP",
				kind:   addrUnspecified,
				why: "A bind address such as 0.0.0.0 only says where to " +
					"listen. Without SGLANG_HOST_IP SGLang advertises an address it guesses, " +
					"which on a node with CNI bridges or several NICs may be one the peer " +
					"cannot reach.",
			})
		}
		return
	}
	a.addr("--host", "--host", host)
}

// wrapperPublishes says what the infera SGLang wrapper publishes as the
// worker's address and bootstrap_addr, when that is settled: an explicit
// --advertise-host (judged here), or the Pod IP under Kubernetes
// discovery; "" when the wrapper would publish --host.
func (a *advCheck) wrapperPublishes() string {
	args := a.in.Args
	if !args.Wrapper {
		return ""
	}
	if f := args.AdvertiseHost; f.Set {
		if k := a.addr("--advertise-host", "--advertise-host", f.Value); k == addrRoutable || k == addrHostname {
			return "the infera wrapper publishes --advertise-host " + f.Value + " as the bootstrap address"
		}
		return ""
	}
	if args.DiscoveryBackend.Value != "kubernetes" {
		return ""
	}
	if ip := a.in.Env["POD_IP"]; ip != "" {
		if kind, _, _ := classifyAddr(ip); kind == addrRoutable {
			return "the infera wrapper publishes POD_IP " + ip + " as the bootstrap address (Kubernetes discovery)"
		}
	}
	return ""
}

// result folds the findings: the worst severity decides; Seen lists every
// address looked at.
func (a *advCheck) result(engine workerargs.Engine, source string) Result {
	var seen []string
	worst := Severity("")
	for _, f := range a.findings {
		seen = append(seen, f.seen)
		if f.sev == Error || (f.sev == Warn && worst == "") {
			worst = f.sev
		}
	}
	if worst == "" {
		return pass(strings.Join(seen, "; "))
	}

	var targets, undefined []string
	loopOrAny, unexpanded := false, false
	for _, f := range a.findings {
		if f.sev != worst {
			continue
		}
		if f.kind == addrUnexpanded {
			unexpanded = true
			undefined = advAppendUnique(undefined, f.varRef)
			continue
		}
		loopOrAny = true
		targets = advAppendUnique(targets, f.target)
	}

	var why, do []string
	if worst == Warn {
		for _, f := range a.findings {
			if f.sev == Warn && f.why != "" {
				why = advAppendUnique(why, f.why)
			}
			if f.sev == Warn && f.do != "" {
				do = advAppendUnique(do, f.do)
				targets = advRemove(targets, f.target)
			}
		}
	} else {
		if loopOrAny {
			why = append(why, "The "+engine.Name()+" worker on the other node ("+source+
				") connects to the address this one advertises; it cannot reach "+
				"0.0.0.0, 127.0.0.0/8 or ::1, and requests hang until the "+
				"connector's 480 s timeout.")
		}
		if unexpanded {
			why = append(why, "Kubernetes expands $(VAR) in command, args and env only "+
				"from the variables the container spec defines (for env, before the entry); "+
				"otherwise it passes the text on, so the engine gets the text, not an address.")
		}
	}
	if len(targets) > 0 {
		do = append(do, "Set "+advJoin(targets)+" to this pod's routable address: "+a.podIPHint()+".")
	}
	if len(undefined) > 0 {
		do = append(do, "Define "+advJoin(undefined)+" in the container's env before "+
			"the entries that refer to it (for the pod's address: valueFrom "+
			"fieldRef status.podIP).")
	}
	r := fail(worst, strings.Join(seen, "; "), strings.Join(why, " "), strings.Join(do, " "))
	switch { // the fix in a few words (Result.Line)
	case len(targets) > 0:
		r.Fix = "set " + advJoin(targets) + " to this pod's address"
		if ip := a.in.Env["POD_IP"]; ip != "" && strings.HasPrefix(a.podIPHint(), "use ") {
			r.Fix = "set " + advJoin(targets) + " to $(POD_IP) = " + ip
		}
	case len(undefined) > 0:
		r.Fix = "define " + advJoin(undefined) + " in the container's env"
	}
	return r
}

// podIPHint suggests $(POD_IP) with its value when the pod has one.
func (a *advCheck) podIPHint() string {
	if ip := a.in.Env["POD_IP"]; ip != "" {
		if kind, _, _ := classifyAddr(ip); kind == addrRoutable {
			return "use $(POD_IP) = " + ip
		}
	}
	return "e.g. $(POD_IP), with POD_IP from the downward API (fieldRef status.podIP)"
}

func advRemove(list []string, s string) []string {
	var out []string
	for _, e := range list {
		if e != s {
			out = append(out, e)
		}
	}
	return out
}

func advAppendUnique(list []string, s string) []string {
	for _, e := range list {
		if e == s {
			return list
		}
	}
	return append(list, s)
}

// advJoin joins "a", "a and b", "a, b and c".
func advJoin(list []string) string {
	switch len(list) {
	case 0:
		return ""
	case 1:
		return list[0]
	}
	return strings.Join(list[:len(list)-1], ", ") + " and " + list[len(list)-1]
}

// hostOfHostPort is the host of "host:port" or "[v6]:port", as
// net.SplitHostPort splits it (false where it fails: no port, a bare IPv6
// address, stray brackets); the port is not looked at. Here rather than
// package net, which nothing else in a start needs.
func hostOfHostPort(hostport string) (string, bool) {
	i := strings.LastIndexByte(hostport, ':')
	if i < 0 {
		return "", false
	}
	host, j, k := hostport[:i], 0, 0
	if hostport[0] == '[' {
		end := strings.IndexByte(hostport, ']')
		if end+1 != i {
			return "", false
		}
		host, j, k = hostport[1:end], 1, end+1
	} else if strings.IndexByte(host, ':') >= 0 {
		return "", false
	}
	if strings.IndexByte(hostport[j:], '[') >= 0 || strings.IndexByte(hostport[k:], ']') >= 0 {
		return "", false
	}
	return host, true
}
