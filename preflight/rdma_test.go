package preflight

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/rdma"
	"github.com/infera/infera-exec/internal/workerargs"
)

type rdmaFakeDev struct {
	name, vendor string
	uverbs       string // "" for none
	abi          int
}

// rdmaFake builds a sysfs tree (class/infiniband/<dev>/device/vendor,
// class/infiniband_verbs/uverbsN/{abi_version,ibdev}) and a /dev/infiniband
// with the given entries; devEntries nil means no such directory.
func rdmaFake(t *testing.T, devs []rdmaFakeDev, devEntries []string) (sysfs, devDir string) {
	t.Helper()
	sysfs = t.TempDir()
	for _, d := range devs {
		dir := filepath.Join(sysfs, "class/infiniband", d.name, "device")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		if d.vendor != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "vendor"), []byte(d.vendor+"\n"), 0o644))
		}
		if d.uverbs != "" {
			u := filepath.Join(sysfs, "class/infiniband_verbs", d.uverbs)
			require.NoError(t, os.MkdirAll(u, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(u, "abi_version"), []byte(strconv.Itoa(d.abi)+"\n"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(u, "ibdev"), []byte(d.name+"\n"), 0o644))
		}
	}
	devDir = filepath.Join(t.TempDir(), "infiniband")
	if devEntries != nil {
		require.NoError(t, os.MkdirAll(devDir, 0o755))
		for _, e := range devEntries {
			require.NoError(t, os.WriteFile(filepath.Join(devDir, e), nil, 0o644))
		}
	}
	return sysfs, devDir
}

func rdmaProvider(lo, hi uint32) func(string) (uint32, uint32, bool) {
	return func(ibdev string) (uint32, uint32, bool) { return lo, hi, true }
}

var rdmaIonic = []rdmaFakeDev{
	{"ionic_0", "0x1dd8", "uverbs0", 1},
	{"ionic_1", "0x1dd8", "uverbs1", 1},
}

func TestRDMA(t *testing.T) {
	pd := advSGLang("--host", "10.1.2.3")
	for _, tc := range []struct {
		name     string
		argv     []string
		devs     []rdmaFakeDev
		entries  []string
		env      map[string]string
		provider func(string) (uint32, uint32, bool)
		status   Status
		sev      Severity
		seen     []string
		why, do  []string
	}{
		{name: "aggregated", argv: []string{"python3", "-m", "infera.engine.vllm", "--model", "/m"},
			status: Skipped, seen: []string{"not a prefill/decode worker"}},
		{name: "passing", argv: pd, devs: rdmaIonic, entries: []string{"rdma_cm", "uverbs0", "uverbs1"},
			provider: rdmaProvider(1, 1), status: Pass,
			seen: []string{"2 RDMA device(s): ionic_0 (0x1dd8 AMD Pensando, uverbs0, kernel ABI 1, provider 1 to 1), ionic_1 (0x1dd8 AMD Pensando, uverbs1, kernel ABI 1, provider 1 to 1)",
				": rdma_cm uverbs0 uverbs1"}},
		{name: "range unknown", argv: advVLLM(), devs: rdmaIonic[:1], entries: []string{"uverbs0"},
			status: Pass, seen: []string{"ionic_0 (0x1dd8 AMD Pensando, uverbs0, kernel ABI 1, provider range unknown)"}},
		{name: "provider does not know the device", argv: pd, devs: rdmaIonic[:1], entries: []string{"uverbs0"},
			provider: func(string) (uint32, uint32, bool) { return 0, 0, false },
			status:   Pass, seen: []string{"provider range unknown"}},
		{name: "no devices", argv: pd, entries: []string{"rdma_cm"},
			status: Fail, sev: Error,
			seen: []string{"no RDMA device in ", "class/infiniband", "has no uverbs device (rdma_cm)"},
			why:  []string{"(--disaggregation-mode prefill)", "no TCP fallback that performs", "three layers away"},
			do:   []string{"RDMA device plugin", "Set INFERA_ALLOW_TCP_KV=1 only to accept"}},
		{name: "no /dev/infiniband", argv: pd, devs: rdmaIonic, provider: rdmaProvider(1, 1),
			status: Fail, sev: Error, seen: []string{"2 RDMA device(s)", "infiniband is missing"},
			why: []string{"no TCP fallback"}},
		{name: "empty /dev/infiniband", argv: pd, devs: rdmaIonic, entries: []string{},
			status: Fail, sev: Error, seen: []string{"has no uverbs device (empty)"}},
		{name: "device without a verbs device", argv: pd, devs: []rdmaFakeDev{{name: "ionic_0", vendor: "0x1dd8"}},
			entries: []string{"uverbs0"}, status: Fail, sev: Error,
			seen: []string{"1 RDMA device(s) in ", "but none has a verbs device", "ionic_0 (0x1dd8 AMD Pensando, no verbs device)"}},
		{name: "TCP allowed", argv: pd, env: map[string]string{"INFERA_ALLOW_TCP_KV": "1"},
			status: Fail, sev: Warn, seen: []string{"no RDMA device", "infiniband is missing", "INFERA_ALLOW_TCP_KV=1: continuing without RDMA"}},
		{name: "TCP allowed only by 1", argv: pd, env: map[string]string{"INFERA_ALLOW_TCP_KV": "true"},
			status: Fail, sev: Error},
		{name: "ABI outside the provider range", argv: pd,
			devs:    []rdmaFakeDev{{"ionic_0", "0x1dd8", "uverbs0", 1}, {"ionic_1", "0x1dd8", "uverbs1", 4}},
			entries: []string{"uverbs0", "uverbs1"}, provider: rdmaProvider(4, 4),
			status: Fail, sev: Error,
			seen: []string{"the provider does not cover ionic_0: kernel ABI 1, the provider supports 4 to 4;",
				"ionic_1 (0x1dd8 AMD Pensando, uverbs1, kernel ABI 4, provider 4 to 4)"},
			why: []string{"does not support the kernel ABI"},
			do:  []string{"/host-libionic/libionic.so", "INFERA_HOST_LIBIONIC"}},
		{name: "ABI outside the range, devices grouped", argv: pd,
			devs: []rdmaFakeDev{{"ionic_0", "0x1dd8", "uverbs0", 1}, {"ionic_1", "0x1dd8", "uverbs1", 2},
				{"ionic_2", "0x1dd8", "uverbs2", 1}, {"ionic_3", "0x1dd8", "uverbs3", 3}},
			entries: []string{"uverbs0", "uverbs1", "uverbs2", "uverbs3"}, provider: rdmaProvider(3, 4),
			status: Fail, sev: Error,
			seen: []string{"the provider does not cover ionic_0, ionic_2: kernel ABI 1, the provider supports 3 to 4; ionic_1: kernel ABI 2, the provider supports 3 to 4; 4 RDMA device(s)"}},
		{name: "ABI outside the range, TCP allowed", argv: pd, devs: rdmaIonic[:1], entries: []string{"uverbs0"},
			env: map[string]string{"INFERA_ALLOW_TCP_KV": "1"}, provider: rdmaProvider(4, 6),
			status: Fail, sev: Warn, seen: []string{"kernel ABI 1, the provider supports 4 to 6"}},
		{name: "other vendors", argv: pd,
			devs:    []rdmaFakeDev{{"mlx5_0", "0x15b3", "uverbs0", 1}, {"rxe0", "", "uverbs1", 1}, {"x_0", "0xabcd", "uverbs2", 1}},
			entries: []string{"uverbs0", "uverbs1", "uverbs2"}, status: Pass,
			seen: []string{"mlx5_0 (0x15b3 NVIDIA Mellanox,", "rxe0 (no PCI vendor,", "x_0 (vendor 0xabcd,"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sysfs, devDir := rdmaFake(t, tc.devs, tc.entries)
			r := checkRDMA(&Facts{Args: workerargs.Parse(tc.argv), Env: tc.env, HostLibionic: config.DefaultHostLibionic, AllowTCP: tc.env["INFERA_ALLOW_TCP_KV"] == "1", Sysfs: sysfs, RDMA: rdma.Read(sysfs, devDir), ProviderABI: tc.provider})
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
			if r.Status == Fail {
				assert.NotEmpty(t, r.Why)
				assert.NotEmpty(t, r.Do)
			}
		})
	}
}

// The check looks at the run's inventory and reads nothing itself: without
// one it has nothing to look at, even with devices in sysfs.
func TestRDMAWithoutInventory(t *testing.T) {
	sysfs, _ := rdmaFake(t, rdmaIonic, []string{"uverbs0"})
	r := checkRDMA(&Facts{Args: workerargs.Parse(advSGLang("--host", "10.1.2.3")), Sysfs: sysfs})
	assert.Equal(t, Skipped, r.Status)
	assert.Equal(t, "no RDMA inventory was read for the check", r.Seen)
}
