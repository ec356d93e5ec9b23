package preflight

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/internal/ipaddr"
)

// RealInterfaces lists the machine's network interfaces (of the network
// namespace the process runs in) with their addresses, in ifindex order:
// the order the kernel lists them (`ip link`), which is stable across
// restarts of the same node, unlike the order of their names. It reads
// netlink only; nothing is sent on any network.
//
// Up is true when the interface is administratively up and has a carrier
// (IFF_UP and IFF_RUNNING): an address on a NIC without link is not one a
// peer can reach.
//
// Two netlink dumps, links then addresses, read with package syscall: the
// net package would dump every address once per interface, and its
// resolver machinery would be linked into every start for this alone.
func RealInterfaces() ([]Interface, error) {
	links, err := netlinkDump(syscall.RTM_GETLINK)
	if err != nil {
		return nil, err
	}
	var out []Interface
	var index []uint32
	for _, m := range links {
		if m.Header.Type != syscall.RTM_NEWLINK || len(m.Data) < syscall.SizeofIfInfomsg {
			continue
		}
		// struct ifinfomsg: family, pad, type (u16), index (i32), flags (u32), change.
		idx := binary.NativeEndian.Uint32(m.Data[4:8])
		flags := binary.NativeEndian.Uint32(m.Data[8:12])
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return nil, os.NewSyscallError("parse netlink link attributes", err)
		}
		it := Interface{
			Up:       flags&syscall.IFF_UP != 0 && flags&syscall.IFF_RUNNING != 0,
			Loopback: flags&syscall.IFF_LOOPBACK != 0,
		}
		for _, a := range attrs {
			if a.Attr.Type == syscall.IFLA_IFNAME && len(a.Value) > 0 {
				it.Name = strings.TrimRight(string(a.Value), "\x00")
			}
		}
		out = append(out, it)
		index = append(index, idx)
	}
	addrs, err := netlinkDump(syscall.RTM_GETADDR)
	if err != nil {
		return nil, err
	}
	for _, m := range addrs {
		if m.Header.Type != syscall.RTM_NEWADDR || len(m.Data) < syscall.SizeofIfAddrmsg {
			continue
		}
		// struct ifaddrmsg: family, prefixlen, flags, scope (u8 each), index (u32).
		family, idx := m.Data[0], binary.NativeEndian.Uint32(m.Data[4:8])
		i := slices.Index(index, idx)
		if i < 0 {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return nil, os.NewSyscallError("parse netlink address attributes", err)
		}
		if a, ok := ifAddr(family, attrs); ok {
			out[i].Addrs = append(out[i].Addrs, a)
		}
	}
	order := make([]int, len(out))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return index[order[a]] < index[order[b]] })
	sorted := make([]Interface, len(out))
	for i, o := range order {
		sorted[i] = out[o]
	}
	return sorted, nil
}

// netlinkDump is one NETLINK_ROUTE dump of proto (RTM_GETLINK,
// RTM_GETADDR) for every address family, its messages up to NLMSG_DONE.
func netlinkDump(proto int) ([]syscall.NetlinkMessage, error) {
	tab, err := syscall.NetlinkRIB(proto, syscall.AF_UNSPEC)
	if err != nil {
		return nil, os.NewSyscallError("netlink dump", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(tab)
	if err != nil {
		return nil, os.NewSyscallError("parse netlink message", err)
	}
	for i, m := range msgs {
		if m.Header.Type == syscall.NLMSG_DONE {
			return msgs[:i], nil
		}
	}
	return msgs, nil
}

// ifAddr is the address of an RTM_NEWADDR message: the local address
// (IFA_LOCAL) when it has one, which on a point-to-point link differs
// from the peer's IFA_ADDRESS, else IFA_ADDRESS. IPv4-mapped IPv6
// addresses are written as IPv4.
func ifAddr(family byte, attrs []syscall.NetlinkRouteAttr) (string, bool) {
	var raw []byte
	for _, a := range attrs {
		switch a.Attr.Type {
		case syscall.IFA_LOCAL:
			raw = a.Value
		case syscall.IFA_ADDRESS:
			if raw == nil {
				raw = a.Value
			}
		}
	}
	switch {
	case family == syscall.AF_INET && len(raw) >= 4:
		return ipaddr.From4([4]byte(raw[:4])).String(), true
	case family == syscall.AF_INET6 && len(raw) >= 16:
		return ipaddr.From16([16]byte(raw[:16])).Unmap().String(), true
	}
	return "", false
}

// interfacesOf lists the interfaces through the test seam, or the real ones.
func interfacesOf(in *Input) ([]Interface, error) {
	if in.Interfaces != nil {
		return in.Interfaces()
	}
	return RealInterfaces()
}

// sysfsOf is the sysfs root the checks read, /sys unless the pass says
// otherwise.
func sysfsOf(in *Input) string {
	if in.Sysfs != "" {
		return in.Sysfs
	}
	return "/sys"
}

// netPhysical reports whether a network interface is backed by hardware:
// <sysfs>/class/net/<name>/device exists (a PCI or virtio NIC, an SR-IOV
// function moved into a pod), or it is stacked on such an interface, as a
// bond, a VLAN or a bridge holding a NIC is (its lower_<dev> links lead to
// one). CNI bridges (cni0, docker0: their ports are veths), veth, flannel,
// vxlan, tunnels and dummy interfaces have no device link and no physical
// lower device: they are virtual.
func netPhysical(sysfs, name string) bool {
	return netPhysicalDepth(sysfs, name, 0)
}

func netPhysicalDepth(sysfs, name string, depth int) bool {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || depth > 8 {
		return false
	}
	dir := filepath.Join(sysfs, "class/net", name)
	if _, err := os.Stat(filepath.Join(dir, "device")); err == nil {
		return true
	}
	lowers, _ := filepath.Glob(filepath.Join(dir, "lower_*"))
	for _, l := range lowers {
		if netPhysicalDepth(sysfs, strings.TrimPrefix(filepath.Base(l), "lower_"), depth+1) {
			return true
		}
	}
	return false
}
