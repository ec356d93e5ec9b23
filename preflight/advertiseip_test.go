package preflight

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// advSysfs builds <tmp>/class/net: every name gets a directory; physical
// ones a device directory; lowers maps an upper device to its lower_<dev>
// links.
func advSysfs(t *testing.T, physical []string, virtual []string, lowers map[string][]string) string {
	t.Helper()
	root := t.TempDir()
	net := filepath.Join(root, "class/net")
	for _, n := range virtual {
		require.NoError(t, os.MkdirAll(filepath.Join(net, n), 0o755))
	}
	for _, n := range physical {
		require.NoError(t, os.MkdirAll(filepath.Join(net, n, "device"), 0o755))
	}
	for up, ls := range lowers {
		for _, l := range ls {
			require.NoError(t, os.Symlink("../"+l, filepath.Join(net, up, "lower_"+l)))
		}
	}
	return root
}

func advIfs(ifs ...Interface) func() ([]Interface, error) {
	return func() ([]Interface, error) { return ifs, nil }
}

var advLo = Interface{Name: "lo", Addrs: []string{"127.0.0.1", "::1"}, Up: true, Loopback: true}

// A Kubernetes node with hostNetwork: the CNI bridge, docker0 and a veth
// have private addresses and come first, eth0 is physical with a public
// address only, eth1 is the physical private one.
func advNode(t *testing.T) *Facts {
	sysfs := advSysfs(t, []string{"eth0", "eth1"}, []string{"cni0", "docker0", "veth1a2b", "flannel.1"},
		map[string][]string{"cni0": {"veth1a2b"}})
	return &Facts{Sysfs: sysfs, Env: map[string]string{}, Interfaces: advIfs(
		advLo,
		Interface{Name: "cni0", Addrs: []string{"10.244.0.1", "fe80::1"}, Up: true},
		Interface{Name: "docker0", Addrs: []string{"172.17.0.1"}, Up: true},
		Interface{Name: "flannel.1", Addrs: []string{"10.244.0.0"}, Up: true},
		Interface{Name: "veth1a2b", Addrs: []string{"10.244.0.7"}, Up: true},
		Interface{Name: "eth0", Addrs: []string{"203.0.113.5", "2001:db8::5"}, Up: true},
		Interface{Name: "eth1", Addrs: []string{"192.168.10.5", "10.200.0.5"}, Up: true},
	)}
}

func TestAdvPrivateV4(t *testing.T) {
	assert.Equal(t,
		[]string{"10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "10.0.0.2"},
		advPrivateV4([]string{"10.0.0.1", "172.15.255.255", "172.16.0.1", "172.31.255.255", "172.32.0.0",
			"192.168.1.1", "192.169.0.1", "100.64.0.1", "8.8.8.8", "fd00::1", "::ffff:10.0.0.2", "garbage", "127.0.0.1"}))
}

func TestAdvertiseIPSkipsVirtualInterfaces(t *testing.T) {
	in := advNode(t)
	ip, why := AdvertiseIP(in)
	assert.Equal(t, "192.168.10.5", ip)
	assert.Contains(t, why, "on eth1, the first interface in kernel (ifindex) order that is up, physical and has a private IPv4 address")
	assert.Contains(t, why, "passed over: cni0 10.244.0.1 (virtual), docker0 172.17.0.1 (virtual), flannel.1 10.244.0.0 (virtual), veth1a2b 10.244.0.7 (virtual)")

	r := checkAdvertiseIP(in)
	assert.Equal(t, Pass, r.Status)
	assert.Equal(t, "INFERA_ADVERTISE_IP=192.168.10.5 "+why, r.Seen)
}

func TestAdvertiseIPKernelOrderNotNameOrder(t *testing.T) {
	sysfs := advSysfs(t, []string{"eno1", "ens9", "ens10", "eth2", "eth3"}, []string{"bond0"},
		map[string][]string{"bond0": {"eth2", "eth3"}})
	ip, why := AdvertiseIP(&Facts{Sysfs: sysfs, Interfaces: advIfs(
		advLo,
		Interface{Name: "ens9", Addrs: []string{"192.168.1.9"}, Up: false},  // no carrier
		Interface{Name: "ens9x", Addrs: []string{"192.168.1.10"}, Up: true}, // no sysfs entry at all
		Interface{Name: "ens10", Addrs: []string{"fe80::10", "192.168.1.11"}, Up: true},
		Interface{Name: "eno1", Addrs: []string{"10.0.0.1"}, Up: true}, // sorts first by name
	)})
	assert.Equal(t, "192.168.1.11", ip)
	assert.Contains(t, why, "on ens10,")
	assert.Contains(t, why, "passed over: ens9 192.168.1.9 (down), ens9x 192.168.1.10 (virtual)")

	// A bond of physical NICs counts as physical; it comes first here.
	ip, why = AdvertiseIP(&Facts{Sysfs: sysfs, Interfaces: advIfs(
		Interface{Name: "bond0", Addrs: []string{"10.1.0.1"}, Up: true},
		Interface{Name: "eno1", Addrs: []string{"10.0.0.1"}, Up: true},
	)})
	assert.Equal(t, "10.1.0.1", ip)
	assert.Contains(t, why, "on bond0,")
	assert.NotContains(t, why, "passed over")
}

func TestNetPhysical(t *testing.T) {
	sysfs := advSysfs(t, []string{"eth0"}, []string{"br0", "cni0", "veth0", "vlan7", "loop1", "loop2"},
		map[string][]string{"br0": {"vlan7"}, "vlan7": {"eth0"}, "cni0": {"veth0"}, "loop1": {"loop2"}, "loop2": {"loop1"}})
	assert.True(t, netPhysical(sysfs, "eth0"))
	assert.True(t, netPhysical(sysfs, "br0"), "bridge over a VLAN over a NIC")
	assert.False(t, netPhysical(sysfs, "cni0"), "bridge of veths")
	assert.False(t, netPhysical(sysfs, "veth0"))
	assert.False(t, netPhysical(sysfs, "loop1"), "a cycle ends")
	assert.False(t, netPhysical(sysfs, "missing"))
	assert.False(t, netPhysical(sysfs, "../net/eth0"))
}

func TestAdvertiseIPKeptWhenSet(t *testing.T) {
	in := advNode(t)
	in.Env[AdvertiseVar] = "10.200.0.5"
	ip, why := AdvertiseIP(in)
	assert.Equal(t, "10.200.0.5", ip)
	assert.Equal(t, "already set in the environment; kept", why)
	r := checkAdvertiseIP(in)
	assert.Equal(t, Pass, r.Status)
	assert.Equal(t, "INFERA_ADVERTISE_IP=10.200.0.5 is already set and kept (an address of eth1)", r.Seen)

	// The value the rule would choose anyway (the pass may set it before
	// running the checks): reported as the choice.
	in.Env[AdvertiseVar] = "192.168.10.5"
	ip, _ = AdvertiseIP(in)
	assert.Equal(t, "192.168.10.5", ip)
	r = checkAdvertiseIP(in)
	assert.Equal(t, Pass, r.Status)
	assert.Contains(t, r.Seen, "INFERA_ADVERTISE_IP=192.168.10.5 on eth1, the first interface")
	assert.Contains(t, r.Seen, "(the environment already has this value)")

	// Kept even on a virtual interface: the operator decided.
	in.Env[AdvertiseVar] = "10.244.0.1"
	r = checkAdvertiseIP(in)
	assert.Equal(t, Pass, r.Status)
	assert.Contains(t, r.Seen, "(an address of cni0)")
}

func TestAdvertiseIPKeptButNotLocal(t *testing.T) {
	in := advNode(t)
	in.Env[AdvertiseVar] = "10.9.9.9"
	ip, _ := AdvertiseIP(in)
	assert.Equal(t, "10.9.9.9", ip, "kept, even when it looks wrong")
	r := checkAdvertiseIP(in)
	assert.Equal(t, Fail, r.Status)
	assert.Equal(t, Warn, r.Severity)
	assert.Contains(t, r.Seen, "INFERA_ADVERTISE_IP=10.9.9.9 is already set and kept, but no interface here has that address; local: cni0 10.244.0.1")
	assert.Contains(t, r.Do, "(it would choose 192.168.10.5 on eth1)")
	assert.NotEmpty(t, r.Why)

	in.Env[AdvertiseVar] = "$(HOST_IP)"
	r = checkAdvertiseIP(in)
	assert.Equal(t, Warn, r.Severity)
	assert.Contains(t, r.Seen, "(an unexpanded reference: $(HOST_IP) reached the worker as text, so HOST_IP was not defined in the container spec at that point)")
}

func TestAdvertiseIPPodNetworkSkipped(t *testing.T) {
	// A pod without hostNetwork: eth0 is one end of a veth pair.
	sysfs := advSysfs(t, nil, []string{"lo", "eth0"}, nil)
	in := &Facts{Sysfs: sysfs, Interfaces: advIfs(advLo,
		Interface{Name: "eth0", Addrs: []string{"10.244.1.7", "fe80::7"}, Up: true})}
	ip, why := AdvertiseIP(in)
	assert.Empty(t, ip)
	assert.Contains(t, why, "no physical interface that is up has a private IPv4 address; passed over: eth0 10.244.1.7 (virtual); every interface")
	assert.Contains(t, why, "every interface here is virtual")
	assert.Contains(t, why, "a pod without hostNetwork sees only its veth")
	r := checkAdvertiseIP(in)
	assert.Equal(t, Skipped, r.Status)
	assert.Equal(t, why+"; INFERA_ADVERTISE_IP left unset", r.Seen)
}

func TestAdvertiseIPPhysicalWithoutPrivateAddress(t *testing.T) {
	// 100.64/10 (carrier-grade NAT space) is not taken as private.
	sysfs := advSysfs(t, []string{"eth0"}, nil, nil)
	in := &Facts{Sysfs: sysfs, Interfaces: advIfs(advLo,
		Interface{Name: "eth0", Addrs: []string{"100.64.3.4", "203.0.113.9"}, Up: true})}
	ip, why := AdvertiseIP(in)
	assert.Empty(t, ip)
	assert.Equal(t, "no physical interface that is up has a private IPv4 address", why)
	assert.Equal(t, Skipped, checkAdvertiseIP(in).Status)
}

func TestAdvertiseIPInterfacesError(t *testing.T) {
	in := &Facts{Sysfs: t.TempDir(), Interfaces: func() ([]Interface, error) { return nil, errors.New("netlink: permission denied") }}
	ip, why := AdvertiseIP(in)
	assert.Empty(t, ip)
	assert.Equal(t, "network interfaces could not be listed: netlink: permission denied", why)
	r := checkAdvertiseIP(in)
	assert.Equal(t, Fail, r.Status)
	assert.Equal(t, Info, r.Severity)

	in.Env = map[string]string{AdvertiseVar: "10.0.0.1"}
	ip, _ = AdvertiseIP(in)
	assert.Equal(t, "10.0.0.1", ip)
	r = checkAdvertiseIP(in)
	assert.Equal(t, Pass, r.Status)
	assert.Contains(t, r.Seen, "could not be listed")
}
