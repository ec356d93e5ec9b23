package preflight

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"net/netip"
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
// Two netlink dumps, links then addresses, on one socket and one receive
// buffer, read in place: the net package would dump every address once
// per interface and link its resolver into every start, and package
// syscall's helpers copy every message and attribute.
func RealInterfaces() ([]Interface, error) {
	nl, err := openNetlink()
	if err != nil {
		return nil, err
	}
	defer nl.close()
	var out []Interface
	var index []uint32
	err = nl.dump(syscall.RTM_GETLINK, func(typ uint16, data []byte) {
		if typ != syscall.RTM_NEWLINK || len(data) < syscall.SizeofIfInfomsg {
			return
		}
		// struct ifinfomsg: family, pad, type (u16), index (i32), flags (u32), change.
		flags := binary.NativeEndian.Uint32(data[8:12])
		it := Interface{
			Up:       flags&syscall.IFF_UP != 0 && flags&syscall.IFF_RUNNING != 0,
			Loopback: flags&syscall.IFF_LOOPBACK != 0,
		}
		eachAttr(data[syscall.SizeofIfInfomsg:], func(typ uint16, v []byte) {
			if typ == syscall.IFLA_IFNAME {
				if i := bytes.IndexByte(v, 0); i >= 0 {
					v = v[:i]
				}
				it.Name = string(v)
			}
		})
		out = append(out, it)
		index = append(index, binary.NativeEndian.Uint32(data[4:8]))
	})
	if err != nil {
		return nil, err
	}
	err = nl.dump(syscall.RTM_GETADDR, func(typ uint16, data []byte) {
		if typ != syscall.RTM_NEWADDR || len(data) < syscall.SizeofIfAddrmsg {
			return
		}
		// struct ifaddrmsg: family, prefixlen, flags, scope (u8 each), index (u32).
		i := slices.Index(index, binary.NativeEndian.Uint32(data[4:8]))
		if i < 0 {
			return
		}
		if a, ok := ifAddr(data[0], data[syscall.SizeofIfAddrmsg:]); ok {
			out[i].Addrs = append(out[i].Addrs, a)
		}
	})
	if err != nil {
		return nil, err
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

// netlinkSock is a NETLINK_ROUTE socket bound to a port the kernel chose,
// with the buffer its dumps are received into.
type netlinkSock struct {
	fd   int
	port uint32
	buf  []byte
}

func openNetlink() (*netlinkSock, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_ROUTE)
	if err != nil {
		return nil, os.NewSyscallError("netlink socket", err)
	}
	nl := &netlinkSock{fd: fd}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		nl.close()
		return nil, os.NewSyscallError("netlink bind", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		nl.close()
		return nil, os.NewSyscallError("netlink getsockname", err)
	}
	if s, ok := sa.(*syscall.SockaddrNetlink); ok {
		nl.port = s.Pid
	}
	// The kernel fills each read of a dump up to the size the reader
	// offered before, and at most 32 KB; a buffer that large never cuts
	// a message short (an interface with many attributes can pass a
	// page), and only what is read is touched.
	nl.buf = make([]byte, 32<<10)
	return nl, nil
}

func (nl *netlinkSock) close() { syscall.Close(nl.fd) }

// dump asks for every object of kind req (RTM_GETLINK, RTM_GETADDR), for
// every address family, and passes each message's type and payload to
// each (valid only during the call) until the kernel says it is done.
func (nl *netlinkSock) dump(req uint16, each func(typ uint16, data []byte)) error {
	// struct nlmsghdr (len, type, flags, seq, pid) + struct rtgenmsg (family).
	msg := make([]byte, syscall.SizeofNlMsghdr+syscall.SizeofRtGenmsg)
	binary.NativeEndian.PutUint32(msg[0:4], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:6], req)
	binary.NativeEndian.PutUint16(msg[6:8], syscall.NLM_F_DUMP|syscall.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(msg[8:12], 1)
	msg[16] = syscall.AF_UNSPEC
	if err := syscall.Sendto(nl.fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return os.NewSyscallError("netlink send", err)
	}
	for {
		n, from, err := syscall.Recvfrom(nl.fd, nl.buf, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("netlink receive", err)
		}
		if s, ok := from.(*syscall.SockaddrNetlink); !ok || s.Pid != 0 {
			continue // not from the kernel
		}
		b := nl.buf[:n]
		for len(b) >= syscall.SizeofNlMsghdr {
			l := binary.NativeEndian.Uint32(b[0:4])
			typ := binary.NativeEndian.Uint16(b[4:6])
			if l < syscall.SizeofNlMsghdr || uint64(l) > uint64(len(b)) {
				return os.NewSyscallError("parse netlink message", syscall.EINVAL)
			}
			if binary.NativeEndian.Uint32(b[8:12]) != 1 || binary.NativeEndian.Uint32(b[12:16]) != nl.port {
				return os.NewSyscallError("parse netlink message", syscall.EINVAL)
			}
			switch typ {
			case syscall.NLMSG_DONE:
				return nil
			case syscall.NLMSG_ERROR:
				errno := syscall.EINVAL
				if l >= syscall.SizeofNlMsghdr+4 {
					if e := int32(binary.NativeEndian.Uint32(b[16:20])); e < 0 {
						errno = syscall.Errno(-e)
					}
				}
				return os.NewSyscallError("netlink dump", errno)
			}
			each(typ, b[syscall.SizeofNlMsghdr:l])
			b = b[min(uint64(nlAlign(l)), uint64(len(b))):]
		}
	}
}

// eachAttr passes each route attribute (struct rtattr: len, type, value)
// in b to f; a truncated attribute ends the list.
func eachAttr(b []byte, f func(typ uint16, v []byte)) {
	for len(b) >= syscall.SizeofRtAttr {
		l := binary.NativeEndian.Uint16(b[0:2])
		if l < syscall.SizeofRtAttr || int(l) > len(b) {
			return
		}
		f(binary.NativeEndian.Uint16(b[2:4]), b[syscall.SizeofRtAttr:l])
		b = b[min(nlAlign(uint32(l)), uint32(len(b))):]
	}
}

func nlAlign(l uint32) uint32 { return (l + syscall.NLMSG_ALIGNTO - 1) &^ (syscall.NLMSG_ALIGNTO - 1) }

// ifAddr is the address of an RTM_NEWADDR message's attributes: the local
// address (IFA_LOCAL) when it has one, which on a point-to-point link
// differs from the peer's IFA_ADDRESS, else IFA_ADDRESS. IPv4-mapped
// IPv6 addresses are written as IPv4.
func ifAddr(family byte, attrs []byte) (string, bool) {
	var local, addr []byte
	eachAttr(attrs, func(typ uint16, v []byte) {
		switch typ {
		case syscall.IFA_LOCAL:
			local = v
		case syscall.IFA_ADDRESS:
			addr = v
		}
	})
	raw := local
	if raw == nil {
		raw = addr
	}
	switch {
	case family == syscall.AF_INET && len(raw) >= 4:
		return netip.AddrFrom4([4]byte(raw[:4])).String(), true
	case family == syscall.AF_INET6 && len(raw) >= 16:
		return netip.AddrFrom16([16]byte(raw[:16])).Unmap().String(), true
	}
	return "", false
}

// interfacesOf lists the interfaces through the test seam, or the real ones.
func interfacesOf(in *Facts) ([]Interface, error) {
	if in.Interfaces != nil {
		return in.Interfaces()
	}
	return RealInterfaces()
}

// RealRouteSource is the IPv4 address this network namespace uses to
// reach 8.8.8.8: what vLLM's get_ip() and SGLang's get_local_ip_by_remote()
// take when no variable names the address. Like them it connects a UDP
// socket, which only picks a route: nothing is sent.
func RealRouteSource() (string, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: 80, Addr: [4]byte{8, 8, 8, 8}}); err != nil {
		return "", err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return "", err
	}
	v4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		return "", syscall.EAFNOSUPPORT
	}
	return netip.AddrFrom4(v4.Addr).String(), nil
}

// routeSourceOf is the route's source address through the test seam, or
// the real one; read once per Facts.
func routeSourceOf(in *Facts) (string, error) {
	if in.route == nil {
		r := &routeAnswer{}
		if in.RouteSource != nil {
			r.addr, r.err = in.RouteSource()
		} else {
			r.addr, r.err = RealRouteSource()
		}
		in.route = r
	}
	return in.route.addr, in.route.err
}

type routeAnswer struct {
	addr string
	err  error
}

// sysfsOf is the sysfs root the checks read, /sys unless the pass says
// otherwise.
func sysfsOf(in *Facts) string {
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
