package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/rdma"
	"github.com/infera/infera-exec/report"
)

// libionicDetail is the report's record of the host-provider step and of
// the RDMA devices the container can see.
type libionicDetail struct {
	Swap *libionic.Result `json:"swap"`
	RDMA *rdma.Inventory  `json:"rdma"`
}

// hostLibionic reads the container's RDMA devices (once: preflight gets
// the same inventory), swaps the host's RDMA provider in when the host
// mounts it, and records both.
func (p *pass) hostLibionic(ctx context.Context) error {
	var fallbacks []string
	if p.cfg.StateDir != "" {
		fallbacks = append(fallbacks, filepath.Join(p.cfg.StateDir, "rdma"))
	}
	for _, r := range report.DefaultPaths {
		fallbacks = append(fallbacks, filepath.Join(filepath.Dir(r), "rdma"))
	}
	fallbacks = append(fallbacks, "/dev/shm/infera-exec-rdma")

	inv := rdma.Read(p.cfg.Sysfs, rdma.DevDir)
	p.rdma = inv
	res := libionic.Swap(ctx, libionic.Options{
		Host:         p.cfg.HostLibionic,
		Name:         p.cfg.RDMAProvider,
		Root:         "/",
		RDMA:         inv,
		FallbackDirs: fallbacks,
		DryRun:       p.dry,
	})
	p.ionic = res
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
	st.Lines = append(st.Lines, inv.Lines()...)
	p.rep.Stages = append(p.rep.Stages, st)
	return nil
}
