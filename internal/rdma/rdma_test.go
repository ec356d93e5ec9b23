package rdma

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeSysfs lays out an ionic and an mlx5 device as the kernel shows them:
// class/infiniband/<dev>/device/{vendor,device} and
// class/infiniband_verbs/uverbsN/{ibdev,abi_version}. uverbs10 comes after
// uverbs2 (numeric order, not the glob's).
func fakeSysfs(t *testing.T) string {
	t.Helper()
	sys := t.TempDir()
	for _, dev := range []struct{ name, vendor, device, uverbs, abi string }{
		{"ionic_0", "0x1dd8", "0x1002", "uverbs2", "1"},
		{"mlx5_0", "0x15b3", "0x101d", "uverbs10", "1"},
		{"rxe0", "", "", "", ""},
	} {
		d := filepath.Join(sys, "class/infiniband", dev.name, "device")
		require.NoError(t, os.MkdirAll(d, 0o755))
		if dev.vendor != "" {
			require.NoError(t, os.WriteFile(filepath.Join(d, "vendor"), []byte(dev.vendor+"\n"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(d, "device"), []byte(dev.device+"\n"), 0o644))
		}
		if dev.uverbs == "" {
			continue
		}
		u := filepath.Join(sys, "class/infiniband_verbs", dev.uverbs)
		require.NoError(t, os.MkdirAll(u, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(u, "ibdev"), []byte(dev.name+"\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(u, "abi_version"), []byte(dev.abi+"\n"), 0o644))
	}
	// A verbs device whose ABI is unreadable is not one.
	bad := filepath.Join(sys, "class/infiniband_verbs/uverbs3")
	require.NoError(t, os.MkdirAll(bad, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bad, "abi_version"), []byte("x\n"), 0o644))
	return sys
}

func TestRead(t *testing.T) {
	sys := fakeSysfs(t)
	dev := filepath.Join(t.TempDir(), "infiniband")
	inv := Read(sys, dev)
	assert.Equal(t, &Inventory{
		Sysfs: sys,
		Devices: []Device{
			{Name: "ionic_0", Vendor: "0x1dd8", DeviceID: "0x1002", Uverbs: "uverbs2", ABI: 1, Pensando: true},
			{Name: "mlx5_0", Vendor: "0x15b3", DeviceID: "0x101d", Uverbs: "uverbs10", ABI: 1},
			{Name: "rxe0"},
		},
		Uverbs: []Uverbs{{"uverbs2", "ionic_0", 1}, {"uverbs10", "mlx5_0", 1}},
		DevDir: dev,
	}, inv)
	assert.Equal(t, []string{
		"RDMA device ionic_0: vendor 0x1dd8 (AMD Pensando), device 0x1002, uverbs2, kernel ABI 1",
		"RDMA device mlx5_0: vendor 0x15b3, device 0x101d, uverbs10, kernel ABI 1",
		"RDMA device rxe0: vendor , device , no verbs device",
		dev + ": absent (the pod has no RDMA device access)",
	}, inv.Lines())

	require.NoError(t, os.MkdirAll(dev, 0o755))
	for _, e := range []string{"uverbs2", "rdma_cm"} {
		require.NoError(t, os.WriteFile(filepath.Join(dev, e), nil, 0o644))
	}
	inv = Read(sys, dev)
	assert.True(t, inv.DevDirFound)
	assert.Equal(t, []string{"rdma_cm", "uverbs2"}, inv.DevEntries)
	assert.Equal(t, fmt.Sprintf("%s: [rdma_cm uverbs2]", dev), inv.Lines()[3])
}

func TestReadNothing(t *testing.T) {
	sys := t.TempDir()
	inv := Read(sys, filepath.Join(sys, "dev/infiniband"))
	assert.Empty(t, inv.Devices)
	assert.Empty(t, inv.Uverbs)
	assert.False(t, inv.DevDirFound)
	assert.Equal(t, []string{
		"RDMA devices: none under " + sys + "/class/infiniband",
		sys + "/dev/infiniband: absent (the pod has no RDMA device access)",
	}, inv.Lines())
}

func TestVendorName(t *testing.T) {
	assert.Equal(t, "AMD Pensando", VendorName(PensandoVendor))
	assert.Equal(t, "NVIDIA Mellanox", VendorName("0x15B3"))
	assert.Equal(t, "", VendorName("0x1234"))
}
