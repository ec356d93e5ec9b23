package report_test

import (
	"fmt"
	"time"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/elfload"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/rdma"
	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/preflight"
	. "github.com/infera/infera-exec/report"
)

// realisticReport is sampleReport with every section a real restart of
// a vLLM pod fills: about the size of a real report file.
func realisticReport() *Report {
	r := sampleReport()
	r.Config = &config.Config{
		PayloadRoot: "/overlay", PayloadRootFrom: "default", Python: "python3", PythonTimeout: "10s",
		RequireNative: config.Requirement{Raw: "auto", Auto: true, Names: []string{"mooncake"}, Sources: map[string]string{"mooncake": "--kv-transfer-config"}},
		ReadyTimeout:  5400, ReadyTimeoutFrom: "INFERA_ENGINE_READY_TIMEOUT", ReadyTimeoutSet: true,
		Chdir: "/", HostLibionic: "/host/lib/libionic.so.1", RDMAProvider: "ionic", Sysfs: "/sys",
		PreflightShmMin: 1 << 30, PreflightNofileMin: 65536, ROCmRoots: []string{"/opt/rocm"},
		StartDir: "/", PreflightTimeout: "5s",
	}
	fam := abi.Family{
		ROCm: abi.ROCm{Found: true, Major: 7, Searched: []string{"/opt/rocm/lib"}, Library: "/opt/rocm/lib/libamdhip64.so",
			Chain:  []string{"/opt/rocm/lib/libamdhip64.so", "/opt/rocm/lib/libamdhip64.so.7", "/opt/rocm/lib/libamdhip64.so.7.0.60400"},
			Soname: "libamdhip64.so.7", DecidedBy: "SONAME libamdhip64.so.7"},
		Python: abi.Python{Interpreter: "python3", Path: "/usr/bin/python3", Chain: []string{"/usr/bin/python3", "/usr/bin/python3.12"}, Major: 3, Minor: 12, DecidedBy: "interpreter name python3.12"},
	}
	native := overlay.NativeTree{Name: "rocm7-py312", Dir: "/overlay/native/rocm7-py312", Declared: []string{"deepep", "mooncake", "rixl"},
		Evidence: map[string][]string{"deepep": {"lib/libdeepep.so*"}, "mooncake": {"lib/python3.12/site-packages/mooncake/*.so"}, "rixl": {"lib/librixl.so*"}}}
	evidence := []capability.Evidence{
		{Capability: "mooncake", Globs: []string{"lib/python3.12/site-packages/mooncake/*.so"}, Found: map[string][]string{"lib/python3.12/site-packages/mooncake/*.so": {"lib/python3.12/site-packages/mooncake/engine.so"}}, Granted: true},
		{Capability: "rixl", Globs: []string{"lib/librixl.so*"}, Missing: []string{"lib/librixl.so*"}},
	}
	payload := &overlay.Payload{Root: "/overlay", ManifestFile: "/overlay/payload.toml", PyTrees: []string{"py311", "py312"}, NativeTrees: []overlay.NativeTree{native}, Bin: "/overlay/bin"}
	trees := &overlay.Selection{
		Family: "rocm7-py312", PyTree: "/overlay/py312", Native: &native, Bin: "/overlay/bin",
		PythonPath:  []string{"/overlay/py312", "/overlay/native/rocm7-py312/lib/python3.12/site-packages"},
		LibraryPath: []string{"/overlay/native/rocm7-py312/lib"}, Path: []string{"/overlay/bin"},
		Considered: []overlay.Candidate{
			{Name: "py312", Kind: "python", Dir: "/overlay/py312", Matched: true, Chosen: true, Why: "python = 3.12"},
			{Name: "rocm7-py312", Kind: "native", Dir: "/overlay/native/rocm7-py312", Matched: true, Chosen: true, Why: "rocm 7, python 3.12"},
			{Name: "rocm6-py312", Kind: "native", Dir: "/overlay/native/rocm6-py312", Why: "rocm 6 <> 7"},
		},
	}
	caps := &capability.Outcome{Tree: "rocm7-py312", Provided: capability.Set{"deepep", "mooncake"}, Evidence: evidence,
		Implied:     []capability.Implication{{Capability: "mooncake", Source: "--kv-transfer-config MooncakeConnector"}},
		Requirement: r.Config.RequireNative, Required: capability.Set{"mooncake"},
		Loads: &capability.LoadVerdict{Tree: "/overlay/native/rocm7-py312", Root: "/", Checked: 214, Cached: true}}
	ionic := &libionic.Outcome{
		Swap: &libionic.Result{State: libionic.Unchanged, Route: "provider-dir", Summary: "host libionic already in place", Host: "/host/lib/libionic.so.1",
			HostSHA256: "9f2c1e7d4b5a6c3e8f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6", HostABI: &libionic.ABIRange{Min: 1, Max: 1}, ContainerABI: &libionic.ABIRange{Min: 1, Max: 1},
			Kernel: []rdma.Uverbs{{Name: "uverbs0", IBDev: "ionic_0", ABI: 1}, {Name: "uverbs1", IBDev: "ionic_1", ABI: 1}},
			Container: &libionic.Container{Libibverbs: "libibverbs.so.1", LibibverbsFile: "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0", LibDir: "/usr/lib/x86_64-linux-gnu",
				LibDirs: []string{"/usr/lib/x86_64-linux-gnu"}, ConfigDir: "/etc/libibverbs.d", ProviderDir: "/usr/lib/x86_64-linux-gnu/libibverbs", PABI: 34,
				SonameLink: "/usr/lib/x86_64-linux-gnu/libionic.so.1", ProviderLink: "/usr/lib/x86_64-linux-gnu/libibverbs/libionic-rdmav34.so"},
			Checks: []elfload.Check{{Name: "loads", OK: true, Detail: "every DT_NEEDED resolves"}, {Name: "private abi", OK: true, Detail: "IBVERBS_PRIVATE_34"}},
			Env:    map[string]string{"IBV_DRIVERS": "ionic"}},
		RDMA: &rdma.Inventory{Sysfs: "/sys", Devices: []rdma.Device{{Name: "ionic_0", Vendor: "0x1dd8", DeviceID: "0x1002", Uverbs: "uverbs0", ABI: 1, Pensando: true}, {Name: "ionic_1", Vendor: "0x1dd8", DeviceID: "0x1002", Uverbs: "uverbs1", ABI: 1, Pensando: true}},
			Uverbs: []rdma.Uverbs{{Name: "uverbs0", IBDev: "ionic_0", ABI: 1}, {Name: "uverbs1", IBDev: "ionic_1", ABI: 1}}, DevDir: "/dev/infiniband", DevDirFound: true, DevEntries: []string{"uverbs0", "uverbs1", "rdma_cm"}},
	}
	pre := &preflight.Outcome{State: preflight.Passed, Summary: "9 checks passed", AdvertiseIP: "10.0.3.17"}
	for i, name := range []string{"shm", "nofile", "memlock", "kv-transport", "model-path", "hf-cache", "devices", "advertise-ip", "ports"} {
		pre.Checks = append(pre.Checks, preflight.Result{Name: name, Status: "ok", Seen: fmt.Sprintf("%s: fine <%d>", name, i), TookMicros: int64(17 * (i + 1))})
	}
	loc := &patches.Location{Interpreter: "/usr/bin/python3", SysPath: []string{"", "/overlay/py312", "/usr/lib/python312.zip", "/usr/lib/python3.12", "/usr/local/lib/python3.12/dist-packages"},
		Packages: map[string]patches.Package{
			"vllm":  {Name: "vllm", Found: true, Dir: "/usr/local/lib/python3.12/dist-packages/vllm", Dirs: []string{"/usr/local/lib/python3.12/dist-packages/vllm"}, Version: "0.11.0+rocm700", VersionFrom: "vllm-0.11.0+rocm700.dist-info"},
			"torch": {Name: "torch", Found: true, Dir: "/usr/local/lib/python3.12/dist-packages/torch", Version: "2.9.0+rocm7.0"},
			"aiter": {Name: "aiter", Why: "not installed"},
		}, Cached: true, Took: "212µs"}
	pat := &patches.Outcome{State: patches.StepNone, Summary: "6 patches in force", Location: loc, Notes: []string{"all recorded"}}
	for i := 0; i < 6; i++ {
		pat.Results = append(pat.Results, patches.Result{ID: fmt.Sprintf("vllm-fix-%d", i), Summary: "keep the \"rocm\" path & <fast> one", Source: "builtin", Package: "vllm", Version: ">=0.10", Required: i == 0,
			State: patchdef.Applied, Before: patchdef.Applied, Action: "none", Recorded: true,
			Edits: []patches.EditResult{{File: fmt.Sprintf("vllm/model_executor/layers/fix%d.py", i), Path: fmt.Sprintf("/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/fix%d.py", i),
				Evaluation: patchdef.Evaluation{State: patchdef.Applied, Anchors: 0, Replacement: 1}, SHA256After: "3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}}})
	}
	l := execOf(r)
	r.Sections = []Section{&abi.Outcome{Family: fam}, &overlay.Outcome{Payload: payload, Selection: trees, From: "default"}, caps, ionic, pre, pat, l}
	l.Init = config.InitChild
	for i := 0; i < 14; i++ {
		r.Log = append(r.Log, logging.Entry{Time: time.Date(2025, 1, 2, 3, 4, 5, i*1000, time.UTC), Level: "info", Message: fmt.Sprintf("step %d: done in %dµs", i, i*31), Attrs: map[string]any{"family": "rocm7-py312"}})
	}
	for _, s := range []string{"config", "interpreter", "abi", "payload", "capabilities", "environment", "command", "libionic", "preflight", "patches", "limits"} {
		r.Timings = append(r.Timings, Timing{Step: s, Micros: 123})
	}
	r.Resources = &Resources{PeakRSSKB: 9120, ChildrenPeakRSSKB: 0}
	return r
}
