package preflight

import (
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
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
func RealInterfaces() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	sort.SliceStable(ifs, func(i, j int) bool { return ifs[i].Index < ifs[j].Index })
	out := make([]Interface, 0, len(ifs))
	for _, ifi := range ifs {
		it := Interface{
			Name:     ifi.Name,
			Up:       ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagRunning != 0,
			Loopback: ifi.Flags&net.FlagLoopback != 0,
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			switch v := a.(type) {
			case *net.IPNet:
				it.Addrs = append(it.Addrs, v.IP.String())
			case *net.IPAddr:
				it.Addrs = append(it.Addrs, v.IP.String())
			}
		}
		out = append(out, it)
	}
	return out, nil
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
