package preflight

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/infera/infera-exec/internal/rdma"
)

// The rdma check: a prefill/decode worker moves the KV cache over RDMA.
// Without devices (sysfs), without /dev/infiniband in the pod, or with
// devices whose kernel ABI the provider build the worker will use does
// not support (libibverbs then skips them: "Driver ionic does not support
// the kernel ABI of 1 (supports 4 to 4)"), the failure shows up three
// layers away, in the transfer engine, or as a hang.

// AllowTCPVar, set to 1, turns the missing-RDMA error into a warning.
const AllowTCPVar = "INFERA_ALLOW_TCP_KV"

func checkRDMA(in *Facts) Result {
	source := in.Args.RoleFrom
	if !in.Args.PD() {
		return skipped("not a prefill/decode worker")
	}
	inv := in.RDMA
	if inv == nil {
		return skipped("no RDMA inventory was read for the check")
	}
	sysfs, devDir := inv.Sysfs, inv.DevDir
	allowTCP, hostLib := in.AllowTCP, in.HostLibionic
	if hostLib == "" {
		hostLib = "the INFERA_HOST_LIBIONIC path"
	}

	var devs []string
	var usable int
	var badABI []string // "ionic_0, ionic_1: kernel ABI 1, the provider supports 4 to 4"
	badIdx := map[string]int{}
	for _, d := range inv.Devices {
		lo, hi, known := uint32(0), uint32(0), false
		if in.ProviderABI != nil && d.Uverbs != "" {
			lo, hi, known = in.ProviderABI(d.Name)
		}
		devs = append(devs, rdmaDescribe(d, lo, hi, known))
		if d.Uverbs == "" {
			continue
		}
		usable++
		if known && (d.ABI < int(lo) || d.ABI > int(hi)) {
			// One entry per ABI and range, naming every device in it.
			what := fmt.Sprintf("kernel ABI %d, the provider supports %d to %d", d.ABI, lo, hi)
			if i, ok := badIdx[what]; ok {
				badABI[i] = strings.Replace(badABI[i], ": ", ", "+d.Name+": ", 1)
			} else {
				badIdx[what] = len(badABI)
				badABI = append(badABI, d.Name+": "+what)
			}
		}
	}
	var uverbsNodes int
	for _, e := range inv.DevEntries {
		if strings.HasPrefix(e, "uverbs") {
			uverbsNodes++
		}
	}

	// What was seen, whatever the verdict; brief is it without the
	// inventory, for the text line (Result.Brief).
	var seen, brief []string
	ibClass := filepath.Join(sysfs, "class/infiniband")
	switch {
	case len(inv.Devices) == 0:
		seen = append(seen, "no RDMA device in "+ibClass)
		brief = append(brief, seen[0])
	case usable == 0:
		none := fmt.Sprintf("%d RDMA device(s) in %s but none has a verbs device in %s",
			len(inv.Devices), ibClass, filepath.Join(sysfs, "class/infiniband_verbs"))
		seen = append(seen, none+": "+strings.Join(devs, ", "))
		brief = append(brief, none)
	default:
		seen = append(seen, fmt.Sprintf("%d RDMA device(s): %s", len(inv.Devices), strings.Join(devs, ", ")))
	}
	switch {
	case !inv.DevDirFound:
		seen = append(seen, devDir+" is missing")
		brief = append(brief, devDir+" is missing")
	case uverbsNodes == 0:
		seen = append(seen, devDir+" has no uverbs device ("+rdmaEntries(inv.DevEntries)+")")
		brief = append(brief, devDir+" has no uverbs device")
	default:
		seen = append(seen, devDir+": "+rdmaEntries(inv.DevEntries))
	}

	missing := usable == 0 || !inv.DevDirFound || uverbsNodes == 0
	if !missing && len(badABI) == 0 {
		return pass(strings.Join(seen, "; "))
	}

	sev := Error
	if allowTCP {
		sev = Warn
	}
	var why, do []string
	if missing {
		why = append(why, "This is a prefill/decode worker ("+source+"): it moves the "+
			"KV cache over RDMA, there is no TCP fallback that performs, and "+
			"without devices the failure shows up three layers away, in the "+
			"transfer engine or as a hang.")
		do = append(do, "Give the pod the node's RDMA devices: an RDMA device plugin "+
			"resource (e.g. rdma/hca_shared_devices_a), or the host's "+
			"/dev/infiniband mounted into a privileged container, with "+
			"hostNetwork for the node's NICs.")
	}
	if len(badABI) > 0 {
		seen = append([]string{"the provider does not cover " + strings.Join(badABI, "; ")}, seen...)
		var names []string
		for _, b := range badABI {
			n, _, _ := strings.Cut(b, ": ")
			names = append(names, n)
		}
		brief = append([]string{"the provider does not cover the kernel ABI of " + strings.Join(names, ", ")}, brief...)
		why = append(why, "libibverbs skips a device whose kernel ABI its provider "+
			"does not support (\"Driver ionic does not support the kernel ABI of "+
			"...\"), so the worker sees no device and the transfer fails far from "+
			"the cause.")
		do = append(do, "Mount the libionic build that matches the node's ionic "+
			"driver at "+hostLib+" (or set INFERA_HOST_LIBIONIC to "+
			"its path) so infera-exec swaps it in; if one is mounted already, it is "+
			"not the build for this kernel.")
	}
	if allowTCP {
		seen = append(seen, AllowTCPVar+"=1: continuing without RDMA")
		brief = append(brief, AllowTCPVar+"=1: continuing without RDMA")
	} else {
		do = append(do, "Set "+AllowTCPVar+"=1 only to accept a slow TCP transfer on purpose.")
	}
	r := fail(sev, strings.Join(seen, "; "), strings.Join(why, " "), strings.Join(do, " "))
	r.Brief = strings.Join(brief, "; ")
	switch { // the fix in a few words (Result.Line)
	case missing && len(badABI) > 0:
		r.Fix = "give the pod the node's RDMA devices and libionic build"
	case missing:
		r.Fix = "give the pod the node's RDMA devices"
	default:
		r.Fix = "mount the node's libionic build (INFERA_HOST_LIBIONIC)"
	}
	return r
}

// rdmaDescribe is one device for Seen: name, vendor, verbs device, kernel
// ABI and the provider's range.
func rdmaDescribe(d rdma.Device, lo, hi uint32, known bool) string {
	var parts []string
	switch {
	case d.Vendor == "":
		parts = append(parts, "no PCI vendor")
	case rdma.VendorName(d.Vendor) != "":
		parts = append(parts, d.Vendor+" "+rdma.VendorName(d.Vendor))
	default:
		parts = append(parts, "vendor "+d.Vendor)
	}
	if d.Uverbs == "" {
		parts = append(parts, "no verbs device")
	} else {
		parts = append(parts, d.Uverbs, fmt.Sprintf("kernel ABI %d", d.ABI))
		if known {
			parts = append(parts, fmt.Sprintf("provider %d to %d", lo, hi))
		} else {
			parts = append(parts, "provider range unknown")
		}
	}
	return d.Name + " (" + strings.Join(parts, ", ") + ")"
}

func rdmaEntries(entries []string) string {
	if len(entries) == 0 {
		return "empty"
	}
	return strings.Join(entries, " ")
}
