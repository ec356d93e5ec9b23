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

// vllm: --data-parallel-address (required: without it vLLM falls back to
// 127.0.0.1), addresses inside --kv-transfer-config, VLLM_HOST_IP.
func (a *advCheck) vllm() {
	args := a.in.Args
	if f := args.DataParallelAddress; f.Set {
		a.addr("--data-parallel-address", "--data-parallel-address", f.Value)
	} else {
		a.findings = append(a.findings, advFinding{
			seen:   "--data-parallel-address not set (vLLM then uses 127.0.0.1)",
			sev:    Error,
			target: "--data-parallel-address",
			kind:   addrLoopback,
		})
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
	}
}

// advConfigKeys are the keys of --kv-transfer-config (at any depth, e.g.
// in kv_connector_extra_config or a MultiConnector's list) that hold an
// address the peer is given; the values are strings.
var advConfigKeys = map[string]bool{"kv_ip": true, "kv_host": true, "host": true}

// sglang: --host binds the HTTP and bootstrap servers (default 127.0.0.1);
// SGLANG_HOST_IP or --disaggregation-bootstrap-host say what is
// advertised; --dist-init-addr is the host:port of multi-node init.
func (a *advCheck) sglang() {
	args, env := a.in.Args, a.in.Env
	advertised := "" // a routable address (or name) given explicitly
	if f := args.BootstrapHost; f.Set {
		v := f.Value
		if k := a.addr("--disaggregation-bootstrap-host", "--disaggregation-bootstrap-host", v); k == addrRoutable || k == addrHostname {
			advertised = "--disaggregation-bootstrap-host " + v
		}
	}
	for _, name := range []string{"SGLANG_HOST_IP", "VLLM_HOST_IP"} {
		if v := env[name]; v != "" {
			if k := a.addr(name, name, v); (k == addrRoutable || k == addrHostname) && name == "SGLANG_HOST_IP" {
				advertised = name + " " + v
			}
		}
	}
	if f := args.DistInitAddr; f.Set {
		host := f.Value
		if h, ok := hostOfHostPort(f.Value); ok {
			host = h
		}
		a.addr("--dist-init-addr host", "the host of --dist-init-addr", host)
	}
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
		if advertised != "" {
			a.note("--host " + host + ": a bind address, fine: " + advertised + " is advertised")
			return
		}
		a.findings = append(a.findings, advFinding{
			seen:   "--host " + host + " with neither SGLANG_HOST_IP nor --disaggregation-bootstrap-host set",
			sev:    Warn,
			target: "SGLANG_HOST_IP",
			kind:   addrUnspecified,
		})
		return
	}
	a.addr("--host", "--host", host)
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
		why = append(why, "A bind address such as 0.0.0.0 only says where to "+
			"listen. Without SGLANG_HOST_IP SGLang advertises an address it guesses, "+
			"which on a node with CNI bridges or several NICs may be one the peer "+
			"cannot reach.")
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
	return fail(worst, strings.Join(seen, "; "), strings.Join(why, " "), strings.Join(do, " "))
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
