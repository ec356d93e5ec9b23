package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
)

// benchPayload lays out a vLLM-style container: ROCm 7, an interpreter
// whose name decides its version, a payload with several trees.
func benchPayload(b *testing.B) []string {
	b.Helper()
	dir := b.TempDir()
	if err := fixture.ROCm(filepath.Join(dir, "rocm"), 7, "7.1.70100"); err != nil {
		b.Fatal(err)
	}
	for _, d := range []string{"payload/bin", "payload/py310", "payload/py312", "payload/native/rocm7-py310", "payload/native/rocm7-py312/lib", "payload/native/rocm7-py312/bin", "py"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "payload/native/rocm7-py312/CAPABILITIES"), []byte("mooncake hipfile\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "py/python3.12"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	return append(os.Environ(),
		"PAYLOAD_ROOT="+filepath.Join(dir, "payload"),
		"ROCM_PATH="+filepath.Join(dir, "rocm"),
		"INFERA_PYTHON="+filepath.Join(dir, "py/python3.12"),
		"INFERA_REQUIRE_NATIVE=mooncake",
		"INFERA_EXEC_REPORT=off",
		"INFERA_SKIP_ENGINE_PATCHES=1", // BenchmarkEnginePatches measures those
	)
}

// BenchmarkPlan is the whole pass short of exec, in process, without
// engine patches: what every pod start pays before its worker runs (no
// Python is started: the interpreter's name decides).
func BenchmarkPlan(b *testing.B) {
	env := benchPayload(b)
	args := []string{"infera-exec", "--explain", "--json", "true"}
	b.ReportAllocs()
	for b.Loop() {
		if code := run(args, env, io.Discard, io.Discard); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
}

// BenchmarkStartToExec runs the real static binary as a process that
// execs /bin/true, against /bin/true alone: the difference is what the
// shim adds to a container start.
func BenchmarkStartToExec(b *testing.B) {
	env := benchPayload(b)
	bin := shim(b)
	b.Run("true", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("infera-exec+true", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(bin, "/bin/true")
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
}

// BenchmarkEnginePatches measures the whole pre-exec overhead with the
// project's full patch set on a synthetic vLLM-sized install (the test
// tree's patched files plus 2,000 other modules, about 40 MB), run by the
// real binary exec'ing /bin/true, against the two costs it cannot avoid:
// an exec, and one interpreter start.
//
//	first-start: every patch pending, no probe cache: one interpreter run
//	             to locate vllm, then the writes
//	restart:     every patch applied, probe cache valid: no interpreter
//
// Reported: the median wall time per start and the peak RSS of the start
// (the shim, and the interpreter it ran).
func BenchmarkEnginePatches(b *testing.B) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		b.Skip("needs Debian python3")
	}
	bin := shim(b)
	dir := b.TempDir()
	site := filepath.Join(dir, "site")
	if out, err := exec.Command("cp", "-r", "../../patches/testdata/trees/vllm-pending/site-packages", site).CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	filler := strings.Repeat("def f(x):\n    return x  # a line of an engine module, about forty bytes\n", 270)
	for i := 0; i < 2000; i++ {
		p := filepath.Join(site, "vllm", "model_executor", fmt.Sprintf("pkg%02d", i/100), fmt.Sprintf("mod%04d.py", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(filler), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	targets := map[string][]byte{}
	filepath.WalkDir(filepath.Join("../../patches/testdata/trees/vllm-pending/site-packages"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := os.ReadFile(p)
			rel, _ := filepath.Rel("../../patches/testdata/trees/vllm-pending/site-packages", p)
			targets[rel] = data
		}
		return nil
	})
	pyTree := strings.TrimSpace(string(must(exec.Command("/usr/bin/python3", "-c", `import sys; print("py%d%d" % sys.version_info[:2])`).Output())))
	for _, d := range []string{"payload/bin", "payload/" + pyTree} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	state := filepath.Join(dir, "state")
	env := append(os.Environ(),
		"PAYLOAD_ROOT="+filepath.Join(dir, "payload"),
		"ROCM_PATH="+filepath.Join(dir, "none"),
		"INFERA_PYTHON=/usr/bin/python3",
		"PYTHONPATH="+site,
		"INFERA_EXEC_STATE_DIR="+state,
		"INFERA_EXEC_REPORT="+filepath.Join(dir, "report.json"),
		"INFERA_SKIP_ENGINE_PATCHES=",
	)
	restore := func() {
		for rel, data := range targets {
			if err := os.WriteFile(filepath.Join(site, rel), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		os.RemoveAll(state)
	}
	// Peak memory comes from the report (VmHWM of the shim, ru_maxrss of
	// the interpreter it ran): the rusage of a process forked from this
	// large test binary would report the test binary's size.
	start := func(name string, args ...string) (time.Duration, int64) {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		os.Remove(filepath.Join(dir, "report.json"))
		t := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(t)
		if err != nil {
			b.Fatalf("%s: %v: %s", name, err, out)
		}
		var rep struct {
			Resources struct {
				Peak     int64 `json:"peak_rss_kb"`
				Children int64 `json:"children_peak_rss_kb"`
			} `json:"resources"`
		}
		if data, err := os.ReadFile(filepath.Join(dir, "report.json")); err == nil {
			json.Unmarshal(data, &rep)
		}
		return d, max(rep.Resources.Peak, rep.Resources.Children)
	}
	measure := func(b *testing.B, before func(), name string, args ...string) {
		var times []time.Duration
		var peak int64
		for b.Loop() {
			if before != nil {
				b.StopTimer()
				before()
				b.StartTimer()
			}
			d, rss := start(name, args...)
			times = append(times, d)
			peak = max(peak, rss)
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms-median")
		if peak > 0 {
			b.ReportMetric(float64(peak), "peak-RSS-KB")
		}
	}

	b.Run("bare-exec", func(b *testing.B) { measure(b, nil, "/bin/true") })
	b.Run("python-start", func(b *testing.B) { measure(b, nil, "/usr/bin/python3", "-c", "pass") })
	os.RemoveAll(state)
	b.Run("first-start", func(b *testing.B) { measure(b, restore, bin, "/bin/true") })
	// The last first-start left everything applied and the cache written.
	b.Run("restart", func(b *testing.B) { measure(b, nil, bin, "/bin/true") })

	report, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil || !strings.Contains(string(report), `"before": "applied"`) || !strings.Contains(string(report), `"cached": true`) {
		b.Fatalf("the restart runs did not find the patches applied with a cached location: %v", err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
