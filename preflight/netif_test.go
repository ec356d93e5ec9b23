package preflight

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// netnsHelperEnv marks the child run of the test binary inside a fresh
// network namespace.
const netnsHelperEnv = "INFERA_PREFLIGHT_NETNS_HELPER"

// TestRealInterfacesNetns runs TestHelperNetns in a new network and mount
// namespace (util-linux unshare), where it creates interfaces with
// iproute2 and reads them back through RealInterfaces and a sysfs mounted
// for that namespace.
func TestRealInterfacesNetns(t *testing.T) {
	cannot := func(why string) {
		if os.Getenv("INFERA_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("INFERA_REQUIRE_SANDBOX=1 but %s", why)
		}
		t.Skip(why)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		cannot("no unshare: " + err.Error())
	}
	ipCmd := "/usr/sbin/ip"
	if _, err := os.Stat(ipCmd); err != nil {
		if ipCmd, err = exec.LookPath("ip"); err != nil {
			cannot("no iproute2 ip: " + err.Error())
		}
	}
	args := []string{"--net", "--mount"}
	if os.Geteuid() != 0 {
		args = append(args, "--map-root-user")
	}
	if out, err := exec.Command(unshare, append(args, "true")...).CombinedOutput(); err != nil {
		cannot("unshare " + strings.Join(args, " ") + " is not possible: " + strings.TrimSpace(string(out)))
	}
	cmd := exec.Command(unshare, append(args, os.Args[0], "-test.run=^TestHelperNetns$", "-test.v", "-test.count=1")...)
	cmd.Env = append(os.Environ(), netnsHelperEnv+"=1", "INFERA_TEST_IP="+ipCmd)
	out, err := cmd.CombinedOutput()
	t.Logf("helper output:\n%s", out)
	require.NoError(t, err)
	assert.Contains(t, string(out), "--- PASS: TestHelperNetns", "the helper ran and passed, not skipped")
}

func TestHelperNetns(t *testing.T) {
	if os.Getenv(netnsHelperEnv) != "1" {
		t.Skip("helper: run by TestRealInterfacesNetns in a new network namespace")
	}
	ipCmd := os.Getenv("INFERA_TEST_IP")
	ip := func(args ...string) error {
		out, err := exec.Command(ipCmd, args...).CombinedOutput()
		if err != nil {
			t.Logf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return err
	}
	// d0: a dummy interface; kernels built without the dummy driver get a
	// veth, which is as virtual (the pod's eth0 is one).
	isVeth := false
	if ip("link", "add", "d0", "type", "dummy") != nil {
		isVeth = true
		require.NoError(t, ip("link", "add", "d0", "type", "veth", "peer", "name", "d0peer"))
		require.NoError(t, ip("link", "set", "d0peer", "up"))
		t.Log("no dummy driver: d0 is a veth")
	}
	require.NoError(t, ip("addr", "add", "10.9.8.7/24", "dev", "d0"))
	require.NoError(t, ip("link", "set", "d0", "up"))
	// cni0: a bridge whose port is a veth, as a CNI bridge is.
	require.NoError(t, ip("link", "add", "cni0", "type", "bridge"))
	require.NoError(t, ip("link", "add", "c0", "type", "veth", "peer", "name", "c0port"))
	require.NoError(t, ip("link", "set", "c0port", "master", "cni0"))
	require.NoError(t, ip("addr", "add", "10.9.9.1/24", "dev", "cni0"))
	require.NoError(t, ip("link", "set", "cni0", "up"))
	// The kernel settles an interface's operational state (which gives
	// IFF_RUNNING) asynchronously, up to a second later under load: wait
	// for the states the assertions below are about.
	waitState := func(name, state string) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, _ := exec.Command(ipCmd, "-o", "link", "show", name).Output()
			if strings.Contains(string(out), "state "+state+" ") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not reach state %s within 10s: %s", name, state, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitState("cni0", "DOWN")
	if isVeth {
		waitState("d0", "UP")
	}

	ifs, err := RealInterfaces()
	require.NoError(t, err)
	var names []string
	byName := map[string]Interface{}
	for _, it := range ifs {
		names = append(names, it.Name)
		byName[it.Name] = it
	}
	t.Logf("interfaces: %+v", ifs)
	// In this namespace too, with a bridge, veths and link-local IPv6.
	TestRealInterfacesMatchesNet(t)
	require.Contains(t, byName, "d0")
	assert.Contains(t, byName["d0"].Addrs, "10.9.8.7")
	assert.True(t, byName["d0"].Up)
	assert.False(t, byName["d0"].Loopback)
	assert.Contains(t, byName["cni0"].Addrs, "10.9.9.1")
	assert.False(t, byName["cni0"].Up, "up, but no carrier: its only port is down")
	assert.True(t, byName["lo"].Loopback)
	assert.False(t, byName["lo"].Up, "lo of a new namespace is down")
	// ifindex order: lo is 1, d0 was made before cni0.
	assert.Equal(t, "lo", names[0])
	assert.Less(t, slices.Index(names, "d0"), slices.Index(names, "cni0"))

	// A sysfs of this namespace: /sys still shows the parent's interfaces.
	sysfs := t.TempDir()
	require.NoError(t, syscall.Mount("sysfs", sysfs, "sysfs", 0, ""))
	t.Cleanup(func() { _ = syscall.Unmount(sysfs, syscall.MNT_DETACH) })
	_, err = os.Stat(filepath.Join(sysfs, "class/net/d0"))
	require.NoError(t, err, "the mounted sysfs is this namespace's")
	_, err = os.Stat(filepath.Join(sysfs, "class/net/d0/device"))
	assert.True(t, os.IsNotExist(err), "d0 has no device link: %v", err)
	assert.False(t, netPhysical(sysfs, "d0"))
	_, err = os.Lstat(filepath.Join(sysfs, "class/net/cni0/lower_c0port"))
	require.NoError(t, err, "the bridge lists its port")
	assert.False(t, netPhysical(sysfs, "cni0"))

	got, why := AdvertiseIP(&Facts{Sysfs: sysfs})
	assert.Empty(t, got)
	assert.Contains(t, why, "d0 10.9.8.7 (virtual)")
	assert.Contains(t, why, "cni0 10.9.9.1 (virtual)")
	assert.Contains(t, why, "every interface here is virtual")
	assert.Equal(t, Skipped, checkAdvertiseIP(&Facts{Sysfs: sysfs}).Status)
}
