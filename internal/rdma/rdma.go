// Package rdma answers which RDMA devices this container can see: the
// devices in sysfs with their PCI vendor and device ids, the kernel verbs
// devices with the ABI each kernel driver speaks to userspace providers,
// and the device nodes in /dev/infiniband. A run reads it once (Read) and
// hands the same Inventory to every step that asks.
package rdma

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/infera/infera-exec/internal/boundedread"
)

// DevDir is where the pod's RDMA device nodes are.
const DevDir = "/dev/infiniband"

// PensandoVendor is the PCI vendor id of AMD Pensando NICs (ionic).
const PensandoVendor = "0x1dd8"

// vendors names the PCI vendors of RDMA NICs.
var vendors = map[string]string{
	PensandoVendor: "AMD Pensando",
	"0x15b3":       "NVIDIA Mellanox",
	"0x14e4":       "Broadcom",
	"0x8086":       "Intel",
}

// VendorName is the maker of an RDMA NIC by PCI vendor id (any case), ""
// for one not known here.
func VendorName(id string) string { return vendors[strings.ToLower(id)] }

// Uverbs is one kernel verbs device: the ABI the kernel driver speaks to
// userspace providers.
type Uverbs struct {
	Name  string `json:"name"`  // uverbs0
	IBDev string `json:"ibdev"` // ionic_0
	ABI   int    `json:"abi_version"`
}

// Device is an RDMA device as sysfs shows it.
type Device struct {
	Name     string `json:"name"`             // ionic_0, mlx5_0
	Vendor   string `json:"vendor,omitempty"` // PCI vendor id, 0x1dd8 for Pensando
	DeviceID string `json:"device,omitempty"` // PCI device id
	Uverbs   string `json:"uverbs,omitempty"` // its verbs device, uverbs0
	ABI      int    `json:"abi_version,omitempty"`
	Pensando bool   `json:"pensando"`
}

// Inventory is what an operator used to probe by hand with ctypes, since
// ibv_devices is not in these images.
type Inventory struct {
	Sysfs       string   `json:"sysfs"`
	Devices     []Device `json:"devices"`
	Uverbs      []Uverbs `json:"uverbs"`
	DevDir      string   `json:"dev_dir"` // /dev/infiniband
	DevDirFound bool     `json:"dev_dir_present"`
	DevEntries  []string `json:"dev_entries,omitempty"` // uverbs0, rdma_cm, ...
}

// Read reads <sysfs>/class/infiniband, <sysfs>/class/infiniband_verbs
// (as libibverbs reads them) and devDir. Missing directories mean no
// devices: an inventory is always returned.
func Read(sysfs, devDir string) *Inventory {
	inv := &Inventory{Sysfs: sysfs, DevDir: devDir}
	inv.Uverbs = readUverbs(sysfs)
	byDev := map[string]Uverbs{}
	for _, u := range inv.Uverbs {
		byDev[u.IBDev] = u
	}
	entries, _ := os.ReadDir(filepath.Join(sysfs, "class/infiniband"))
	for _, e := range entries {
		d := Device{Name: e.Name()}
		base := filepath.Join(sysfs, "class/infiniband", e.Name(), "device")
		d.Vendor = readTrim(filepath.Join(base, "vendor"))
		d.DeviceID = readTrim(filepath.Join(base, "device"))
		d.Pensando = strings.EqualFold(d.Vendor, PensandoVendor)
		if u, ok := byDev[d.Name]; ok {
			d.Uverbs, d.ABI = u.Name, u.ABI
		}
		inv.Devices = append(inv.Devices, d)
	}
	if fi, err := os.Stat(devDir); err == nil && fi.IsDir() {
		inv.DevDirFound = true
		des, _ := os.ReadDir(devDir)
		for _, e := range des {
			inv.DevEntries = append(inv.DevEntries, e.Name())
		}
	}
	return inv
}

// Lines is the inventory for --explain: one line per device, then the
// device directory.
func (inv *Inventory) Lines() []string {
	var out []string
	if len(inv.Devices) == 0 {
		out = append(out, fmt.Sprintf("RDMA devices: none under %s/class/infiniband", inv.Sysfs))
	}
	for _, d := range inv.Devices {
		vendor := d.Vendor
		if d.Pensando {
			vendor += " (" + VendorName(PensandoVendor) + ")"
		}
		abi := "no verbs device"
		if d.Uverbs != "" {
			abi = fmt.Sprintf("%s, kernel ABI %d", d.Uverbs, d.ABI)
		}
		out = append(out, fmt.Sprintf("RDMA device %s: vendor %s, device %s, %s", d.Name, vendor, d.DeviceID, abi))
	}
	if inv.DevDirFound {
		out = append(out, fmt.Sprintf("%s: %v", inv.DevDir, inv.DevEntries))
	} else {
		out = append(out, inv.DevDir+": absent (the pod has no RDMA device access)")
	}
	return out
}

// readUverbs lists <sysfs>/class/infiniband_verbs/uverbs*: the kernel
// ABI of each verbs device and the RDMA device it belongs to.
func readUverbs(sysfs string) []Uverbs {
	matches, _ := filepath.Glob(filepath.Join(sysfs, "class/infiniband_verbs/uverbs*"))
	sort.Slice(matches, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(matches[i]), "uverbs"))
		b, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(matches[j]), "uverbs"))
		return a < b
	})
	var out []Uverbs
	for _, m := range matches {
		abi, err := strconv.Atoi(readTrim(filepath.Join(m, "abi_version")))
		if err != nil {
			continue
		}
		out = append(out, Uverbs{Name: filepath.Base(m), IBDev: readTrim(filepath.Join(m, "ibdev")), ABI: abi})
	}
	return out
}

func readTrim(p string) string {
	// sysfs attributes are a few bytes; a planted FIFO or a huge file in a
	// SYSFS_PATH fixture must not hang or bloat the start.
	b, err := boundedread.File(p, 4096)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
