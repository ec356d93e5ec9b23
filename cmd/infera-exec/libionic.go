package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/report"
)

// libionicDetail is the report's record of the host-provider step and of
// the RDMA devices the container can see.
type libionicDetail struct {
	Swap *libionic.Result    `json:"swap"`
	RDMA *libionic.Inventory `json:"rdma"`
}

// hostLibionic swaps the host's RDMA provider in when the host mounts it,
// and records the container's RDMA devices either way.
func (p *pass) hostLibionic(ctx context.Context) error {
	var fallbacks []string
	if p.cfg.StateDir != "" {
		fallbacks = append(fallbacks, filepath.Join(p.cfg.StateDir, "rdma"))
	}
	for _, r := range report.DefaultPaths {
		fallbacks = append(fallbacks, filepath.Join(filepath.Dir(r), "rdma"))
	}
	fallbacks = append(fallbacks, "/dev/shm/infera-exec-rdma")

	// The host mount and sysfs are read below without a deadline: a
	// host path on a filesystem that does not answer is not used.
	for _, g := range []struct{ what, path string }{{"the host provider", p.cfg.HostLibionic}, {"sysfs (SYSFS_PATH)", p.cfg.Sysfs}} {
		if _, err := p.probe.Answers(g.path); err != nil {
			res := &libionic.Result{State: "unanswered", Summary: fmt.Sprintf("%s %v; the container's provider is used, RDMA devices not read", g.what, err)}
			p.ionic = res
			p.log.Warn("host libionic: " + res.Summary)
			p.rep.Stages = append(p.rep.Stages, report.Stage{Name: "host libionic", State: res.State, Summary: res.Summary, Detail: libionicDetail{Swap: res}})
			return nil
		}
	}
	res := libionic.Swap(ctx, libionic.Options{
		Host:         p.cfg.HostLibionic,
		Name:         p.cfg.RDMAProvider,
		Root:         "/",
		Sysfs:        p.cfg.Sysfs,
		FallbackDirs: fallbacks,
		DryRun:       p.dry,
	})
	p.ionic = res
	inv := libionic.ReadInventory(p.cfg.Sysfs, "/dev/infiniband")
	st := report.Stage{Name: "host libionic", State: res.State, Summary: res.Summary, Detail: libionicDetail{res, inv}}

	switch res.State {
	case "not-mounted":
		p.log.Debug(res.Summary)
	case "replaced":
		// The line operators grep for, one per file.
		for _, f := range res.Replaced {
			p.log.Info(fmt.Sprintf("replaced %s with the host libionic build", f))
		}
		for _, f := range res.Created {
			p.log.Info(fmt.Sprintf("created %s for the host libionic build", f))
		}
	case "unchanged", "planned", "fallback":
		p.log.Info("host libionic: " + res.Summary)
	default: // refused, no-route
		p.log.Warn("host libionic: " + res.Summary)
	}
	for _, n := range res.Notes {
		p.log.Info("host libionic: " + n)
	}
	if res.Env != nil {
		drivers := res.Env["RDMAV_DRIVERS"]
		if old := p.env.Value("RDMAV_DRIVERS"); old != "" {
			drivers += ":" + old
		}
		p.env.Set("RDMAV_DRIVERS", drivers)
		p.env.PrependPaths("LD_LIBRARY_PATH", res.LibraryPath)
	}

	for _, c := range res.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		st.Lines = append(st.Lines, fmt.Sprintf("%s %s: %s", mark, c.Name, c.Detail))
	}
	if res.HostABI != nil || res.ContainerABI != nil {
		st.Lines = append(st.Lines, fmt.Sprintf("provider kernel ABI range: host build %s, container's %s", res.HostABI, res.ContainerABI))
	}
	st.Lines = append(st.Lines, rdmaLines(inv)...)
	p.rep.Stages = append(p.rep.Stages, st)
	return nil
}

// rdmaLines is the RDMA section of --explain.
func rdmaLines(inv *libionic.Inventory) []string {
	var out []string
	if len(inv.Devices) == 0 {
		out = append(out, fmt.Sprintf("RDMA devices: none under %s/class/infiniband", inv.Sysfs))
	}
	for _, d := range inv.Devices {
		vendor := d.Vendor
		if d.Pensando {
			vendor += " (AMD Pensando)"
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
