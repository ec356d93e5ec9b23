package preflight

import (
	"fmt"
	"path/filepath"
	"strings"

	"net/netip"
)

// The advertise-ip check chooses INFERA_ADVERTISE_IP, the node address
// the worker advertises to its peers, and reports the choice. A check
// cannot change the worker's environment: the pass calls AdvertiseIP and
// sets the variable; the check reports the same decision.
//
// Choice: the first interface in the order the kernel lists them
// (ifindex, as RealInterfaces returns them) that is up, not loopback,
// physical (netPhysical: <sysfs>/class/net/<name>/device exists, or it is
// a bond, VLAN or bridge stacked on such a NIC) and has a private IPv4
// address; its first such address. The earlier name-ordered selection
// took cni0 on Kubernetes nodes with hostNetwork: "c" sorts before "e".
//
// Private means RFC 1918: 10/8, 172.16/12, 192.168/16. The RFC 6598
// shared space 100.64/10 is left out: it is carrier-grade NAT space, on
// nodes mostly seen on VPN and overlay devices (virtual anyway), and an
// address there on a NIC usually faces a NAT the peer cannot cross; a
// deployment that does use it sets INFERA_ADVERTISE_IP itself.

// AdvertiseVar is the variable AdvertiseIP decides.
const AdvertiseVar = "INFERA_ADVERTISE_IP"

// advPrivateV4 returns the private IPv4 addresses among addrs, in order.
func advPrivateV4(addrs []string) []string {
	var out []string
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		if a = a.Unmap(); a.Is4() && a.IsPrivate() {
			out = append(out, a.String())
		}
	}
	return out
}

// advIPDecision is what AdvertiseIP decides and what the check reports.
type advIPDecision struct {
	ip, why  string
	kept     bool   // already set in the environment
	keptIf   string // the interface that has the kept address, "" if none
	listErr  error
	ifs      []Interface
	choice   string // what would be chosen, even when a value is kept
	choiceIf string
	reason   string // why choice (or why none)
}

// AdvertiseIP decides INFERA_ADVERTISE_IP. A value already in in.Env is
// kept: ip is that value. Otherwise ip is the first private IPv4 address
// (10/8, 172.16/12, 192.168/16) of the first interface, in kernel
// (ifindex) order, that is up, not loopback and physical; "" when there is
// none, and why says why. The pass sets the variable in the worker's
// environment when ip is not empty (unless the advertise-ip check is
// disabled); the check reports the same decision.
func AdvertiseIP(in *Facts) (ip, why string) {
	d := decideAdvertiseIP(in)
	return d.ip, d.why
}

// advListing is the part of the decision that does not depend on the
// environment: the interfaces and what the rule picks among them.
type advListing struct {
	ifs                   []Interface
	err                   error
	choice, choiceIf, why string
}

func listAdvertise(in *Facts) *advListing {
	if in.listing != nil {
		return in.listing
	}
	l := &advListing{}
	l.ifs, l.err = interfacesOf(in)
	if dl := answers(in, sysfsOf(in)); dl != nil && l.err == nil {
		// Which interfaces are physical is read from sysfs.
		l.err = dl
	}
	if l.err == nil {
		l.choice, l.choiceIf, l.why = advChoose(sysfsOf(in), l.ifs)
	}
	in.listing = l
	return l
}

func decideAdvertiseIP(in *Facts) advIPDecision {
	l := listAdvertise(in)
	d := advIPDecision{ifs: l.ifs, listErr: l.err, choice: l.choice, choiceIf: l.choiceIf, reason: l.why}
	if v := in.Env[AdvertiseVar]; v != "" {
		d.kept, d.ip = true, v
		d.keptIf = advOwner(d.ifs, v)
		d.why = "already set in the environment; kept"
		return d
	}
	if d.listErr != nil {
		d.why = "network interfaces could not be listed: " + d.listErr.Error()
		return d
	}
	d.ip, d.why = d.choice, d.reason
	return d
}

// advChoose applies the selection rule. why explains the choice, or the
// absence of one, with the interfaces passed over.
func advChoose(sysfs string, ifs []Interface) (ip, ifname, why string) {
	var passed []string
	for _, it := range ifs {
		if it.Loopback {
			continue
		}
		priv := advPrivateV4(it.Addrs)
		if len(priv) == 0 {
			continue
		}
		switch {
		case !netPhysical(sysfs, it.Name):
			passed = append(passed, it.Name+" "+priv[0]+" (virtual)")
		case !it.Up:
			passed = append(passed, it.Name+" "+priv[0]+" (down)")
		default:
			why = "on " + it.Name + ", the first interface in kernel (ifindex) order " +
				"that is up, physical and has a private IPv4 address"
			if len(passed) > 0 {
				why += "; passed over: " + advList(passed, 6)
			}
			return priv[0], it.Name, why
		}
	}
	why = "no physical interface that is up has a private IPv4 address"
	if len(passed) > 0 {
		why += "; passed over: " + advList(passed, 6)
	}
	if !advAnyPhysical(sysfs, ifs) {
		why += "; every interface here is virtual (no " +
			filepath.Join(sysfs, "class/net/<name>/device") +
			"): a pod without hostNetwork sees only its veth"
	}
	return "", "", why
}

func advAnyPhysical(sysfs string, ifs []Interface) bool {
	for _, it := range ifs {
		if !it.Loopback && netPhysical(sysfs, it.Name) {
			return true
		}
	}
	return false
}

// advOwner names the interface that has address v, "" if none does.
func advOwner(ifs []Interface, v string) string {
	want, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(v), "["), "]"))
	if err != nil {
		return ""
	}
	want = want.Unmap().WithZone("")
	for _, it := range ifs {
		for _, s := range it.Addrs {
			if a, err := netip.ParseAddr(s); err == nil && a.Unmap().WithZone("") == want {
				return it.Name
			}
		}
	}
	return ""
}

// advList joins at most max entries, then says how many more there are.
func advList(list []string, max int) string {
	if len(list) <= max {
		return strings.Join(list, ", ")
	}
	return strings.Join(list[:max], ", ") + fmt.Sprintf(" and %d more", len(list)-max)
}

// advLocalV4 lists the IPv4 addresses of the non-loopback interfaces.
func advLocalV4(ifs []Interface) []string {
	var out []string
	for _, it := range ifs {
		if it.Loopback {
			continue
		}
		for _, s := range it.Addrs {
			if a, err := netip.ParseAddr(s); err == nil && a.Unmap().Is4() {
				out = append(out, it.Name+" "+a.Unmap().String())
			}
		}
	}
	return out
}

func checkAdvertiseIP(in *Facts) Result {
	d := decideAdvertiseIP(in)
	set := AdvertiseVar + "=" + d.ip
	switch {
	case d.kept && d.listErr != nil:
		return pass(set + " is already set and kept (interfaces could not be " +
			"listed to confirm it is local: " + d.listErr.Error() + ")")
	case d.kept && d.ip == d.choice:
		// The value the rule gives, whoever put it there (the pass may
		// have set it before running the checks).
		return pass(set + " " + d.reason + " (the environment already has this value)")
	case d.kept && d.keptIf != "":
		return pass(set + " is already set and kept (an address of " + d.keptIf + ")")
	case d.kept:
		seen := set + " is already set and kept, but no interface here has that address"
		if kind, ref, _ := classifyAddr(d.ip); kind == addrUnexpanded {
			seen += " (" + unexpandedNote(ref) + ")" + setLater(in.Env, ref)
		}
		if local := advLocalV4(d.ifs); len(local) > 0 {
			seen += "; local: " + advList(local, 6)
		} else {
			seen += "; no interface has an IPv4 address"
		}
		do := "Set " + AdvertiseVar + " to an address of this node (under " +
			"hostNetwork: $(POD_IP)), or unset it to let infera-exec choose"
		if d.choice != "" {
			do += " (it would choose " + d.choice + " on " + d.choiceIf + ")"
		}
		return fail(Warn, seen,
			"The worker advertises this address to its peers; one this node does "+
				"not have sends them to another host or to nowhere, and transfers hang.",
			do+".")
	case d.listErr != nil:
		return fail(Info, d.why,
			AdvertiseVar+" is left unset, so the engine guesses the address it advertises.",
			"Set "+AdvertiseVar+" to this node's routable address.")
	case d.ip == "":
		return skipped(d.why + "; " + AdvertiseVar + " left unset")
	}
	return pass(set + " " + d.why)
}
