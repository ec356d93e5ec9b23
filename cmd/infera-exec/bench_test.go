package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
		"INFERA_SKIP_ENGINE_PATCHES=1", // BenchmarkStart measures those
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

// benchRuns is how often BenchmarkStart runs each start.
const benchRuns = 40

// benchProgram builds a small static Go program from source, in dir.
func benchProgram(b *testing.B, dir, name, src string) string {
	b.Helper()
	d := filepath.Join(dir, name+"-src")
	if err := os.MkdirAll(d, 0o755); err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(d, "go.mod"), []byte("module "+name+"\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(d, "main.go"), []byte(src), 0o644)
	out := filepath.Join(dir, name)
	// A module of its own, without internal/sigstart: no entry flag (its
	// symbol is not there to link).
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
	cmd.Dir = d
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build %s: %v\n%s", name, err, o)
	}
	return out
}

// floorSrc is the least a Go shim can do: start, then execve the worker.
const floorSrc = `package main

import (
	"os"
	"syscall"
)

func main() {
	err := syscall.Exec(os.Args[1], os.Args[1:], os.Environ())
	os.Stderr.WriteString("floor: " + err.Error() + "\n")
	os.Exit(127)
}
`

// rssSrc runs a command and prints its peak RSS in KB. Run from this
// small program rather than from the test binary: a child started with
// CLONE_VM inherits its parent's high-water mark across execve, so from
// the test binary every child would report the test binary's size; from
// here it reports at least this program's own (about 1 MB).
const rssSrc = `package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)
}
`

type benchStats struct {
	name             string
	median, min, max time.Duration
	rssKB            int64
}

// BenchmarkStart is `make bench`: side by side in one run, on a
// real-sized vLLM install with the project's full patch set, fake ROCm 7
// and Debian's python3, each over benchRuns runs:
//
//	bare-exec:    the worker (/bin/true) alone
//	floor:        a minimal static Go program that execs the worker
//	python-start: one interpreter start (python3 -c pass), for scale
//	first-start:  every patch pending, no probe cache, no record
//	python-start, venv: the venv's interpreter alone (python -c pass)
//	first start, python worker: the first start again with the worker
//	              venv/bin/python3 -c pass: the engine located without
//	              starting Python, then the worker's own run
//	restart:      infera-exec with every stage on (preflight, host
//	              provider check, patches, report written), the patches
//	              already applied and recorded, the probe cached
//	Kubernetes restart: a new container from the same image: the engine
//	              install and the interpreter on an overlayfs mount whose
//	              upper layer is new for each run (the files pristine
//	              again, under new inodes and a new device), the state
//	              directory kept (an emptyDir): the recorded patches
//	              written again without planning ("replayed")
//	Kubernetes restart, fresh state: the same without the state directory
//	first start, venv interpreter: the first start with the worker
//	              /bin/true and INFERA_PYTHON the venv's: the probe's
//	              question read without starting Python
//
// The overlay mounts live in a mount namespace of the benchmark's own
// (unshare on a thread it keeps locked; the children forked from it see
// them, and they go with the thread): it needs root and overlayfs.
//
// The runs are interleaved, one of each kind per round in a shuffled
// order, so that a slow moment of a shared machine falls on every kind
// alike and the ratios hold (first starts in rounds of their own,
// after); first starts and
// restarts have installs and state of their own.
// It prints median, min and max wall time, peak RSS, and the overhead
// (time beyond bare-exec) as a ratio to the floor's.
func BenchmarkStart(b *testing.B) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		b.Skip("needs /usr/bin/python3 (Debian python3)")
	}
	bin := shim(b)
	dir := b.TempDir()
	keep := os.Getenv("INFERA_BENCH_KEEP")
	if keep != "" {
		// For profiling by hand: the installs, state and reports stay in
		// this directory; env.sh there sets a restart's environment and
		// pending.sh makes the next start a first start.
		dir = keep
		os.RemoveAll(dir)
		os.MkdirAll(dir, 0o755)
	}
	floor := benchProgram(b, dir, "floor", floorSrc)
	rss := benchProgram(b, dir, "rss", rssSrc)
	if err := fixture.ROCm(filepath.Join(dir, "rocm"), 7, "7.1.70100"); err != nil {
		b.Fatal(err)
	}
	pyTree := strings.TrimSpace(string(must(exec.Command("/usr/bin/python3", "-c", `import sys; print("py%d%d" % sys.version_info[:2])`).Output())))
	for _, d := range []string{"payload/bin", "payload/" + pyTree} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	// install is one engine install with its own state and report.
	type install struct {
		site, state, report string
		targets             map[string][]byte
		env                 []string
	}
	newInstall := func(name string) *install {
		in := &install{site: filepath.Join(dir, name, "site"), state: filepath.Join(dir, name, "state"), report: filepath.Join(dir, name, "report.json")}
		var err error
		if in.targets, err = fixture.EngineInstall("../../patches/testdata/trees/vllm-pending/site-packages", in.site); err != nil {
			b.Fatal(err)
		}
		in.env = append(os.Environ(),
			"PAYLOAD_ROOT="+filepath.Join(dir, "payload"),
			"ROCM_PATH="+filepath.Join(dir, "rocm"),
			"INFERA_PYTHON=/usr/bin/python3",
			"PYTHONPATH="+in.site,
			"INFERA_EXEC_STATE_DIR="+in.state,
			"INFERA_EXEC_REPORT="+in.report,
			"INFERA_SKIP_ENGINE_PATCHES=",
			"INFERA_PREFLIGHT=",
		)
		return in
	}
	first, again := newInstall("first"), newInstall("restart")
	// The restart again, as `vllm serve MODEL` on a local model directory
	// (a real-sized config.json, one shard): the model-dir check and every
	// built-in model rule run. Its own report, read after each run for
	// the rules' times; the worker is still /bin/true, named vllm.
	model, rulesReport := modelDir(b, dir), filepath.Join(dir, "rules-report.json")
	vllmRegistry(b, again.site)
	vllm := filepath.Join(dir, "bin", "vllm")
	os.MkdirAll(filepath.Dir(vllm), 0o755)
	if err := os.Symlink("/bin/true", vllm); err != nil {
		b.Fatal(err)
	}
	rulesEnv := make([]string, 0, len(again.env))
	for _, kv := range again.env {
		if strings.HasPrefix(kv, "INFERA_EXEC_REPORT=") {
			kv = "INFERA_EXEC_REPORT=" + rulesReport
		}
		rulesEnv = append(rulesEnv, kv)
	}
	var rulesMicros []int64
	var rulesCount int
	rulesTime := func() {
		n, us := ruleMicros(b, rulesReport)
		rulesCount = n
		rulesMicros = append(rulesMicros, us)
	}
	// The Kubernetes rows' installs: the site directory an overlay mount
	// over the pristine install, remounted with a new upper layer before
	// each run.
	enterMountNamespace(b)
	k8sInstall := func(name string) *k8sMount {
		in := newInstall(name)
		// The site directory is below the mount's root, as site-packages
		// is in an image: its attributes are the lower layer's until a
		// write copies it up (the root's are the new upper layer's).
		base := filepath.Join(dir, name)
		lower, upper, work, mnt := filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "mnt")
		os.MkdirAll(lower, 0o755)
		os.MkdirAll(mnt, 0o755)
		if err := os.Rename(in.site, filepath.Join(lower, "site")); err != nil {
			b.Fatal(err)
		}
		// The interpreter is the image's too: a copy of it in the lower
		// layer, its standard library reached through lib, so that the
		// probe's answer is taken from the state directory only when its
		// key survives a new mount of the interpreter.
		python := imageInterpreter(b, lower)
		for i, kv := range in.env {
			switch {
			case strings.HasPrefix(kv, "PYTHONPATH="):
				in.env[i] = "PYTHONPATH=" + filepath.Join(mnt, "site")
			case strings.HasPrefix(kv, "INFERA_PYTHON="):
				in.env[i] = "INFERA_PYTHON=" + filepath.Join(mnt, python)
			}
		}
		in.site = mnt
		m := &k8sMount{env: in.env, state: in.state, report: in.report}
		b.Cleanup(func() { unix.Unmount(in.site, unix.MNT_DETACH) }) // before the TempDir's removal
		m.remount = func() {
			unix.Unmount(in.site, unix.MNT_DETACH) // none the first time
			for _, d := range []string{upper, work} {
				os.RemoveAll(d)
				os.MkdirAll(d, 0o755)
			}
			if err := unix.Mount("overlay", in.site, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
				b.Fatalf("the Kubernetes rows need overlayfs: mount %s: %v", in.site, err)
			}
		}
		return m
	}
	k8s, k8sFresh := k8sInstall("k8s"), k8sInstall("k8s-fresh")
	pending := func() {
		if err := fixture.RestoreFiles(first.site, first.targets); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(first.state)
	}
	// A Python worker, venv/bin/python3 -c pass, as an engine image runs
	// one: the import resolver reads where it imports the engine from
	// without starting Python (a venv of its own keeps this machine's
	// dist-packages, whose .pth files run code, out of its sys.path). Its
	// rows include the worker's own Python run; "python-start, venv" is
	// that run alone.
	venv := filepath.Join(dir, "venv")
	if out, err := exec.Command("/usr/bin/python3", "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		b.Fatalf("python3 -m venv: %v: %s", err, out)
	}
	venvPy := filepath.Join(venv, "bin", "python3")
	firstPy := newInstall("first-py")
	pendingPy := func() {
		if err := fixture.RestoreFiles(firstPy.site, firstPy.targets); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(firstPy.state)
	}
	// The first start again with a worker that runs no interpreter by
	// itself (/bin/true) and the venv's interpreter as INFERA_PYTHON: the
	// probe's own question, read without starting Python.
	firstVenv := newInstall("first-venv")
	for i, kv := range firstVenv.env {
		if strings.HasPrefix(kv, "INFERA_PYTHON=") {
			firstVenv.env[i] = "INFERA_PYTHON=" + venvPy
		}
	}
	pendingVenv := func() {
		if err := fixture.RestoreFiles(firstVenv.site, firstVenv.targets); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(firstVenv.state)
	}
	if keep != "" {
		var sh strings.Builder
		for _, kv := range again.env[len(again.env)-8:] {
			k, v, _ := strings.Cut(kv, "=")
			fmt.Fprintf(&sh, "export %s='%s'\n", k, v)
		}
		os.WriteFile(filepath.Join(dir, "env.sh"), []byte(sh.String()), 0o644)
		fixture.RestoreFiles(filepath.Join(dir, "pending"), again.targets)
		os.WriteFile(filepath.Join(dir, "pending.sh"), []byte(fmt.Sprintf("cp -R %s/pending/. %s/ && rm -rf %s\n", dir, again.site, again.state)), 0o755)
	}
	runOnce := func(env []string, name string, args ...string) time.Duration {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		t := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(t)
		if err != nil {
			b.Fatalf("%s: %v: %s", name, err, out)
		}
		return d
	}
	type kind struct {
		name   string
		env    []string
		before func()
		argv   []string
		after  func() // after each timed run, untimed
	}
	kinds := []kind{
		{"bare-exec", again.env, nil, []string{"/bin/true"}, nil},
		{"floor", again.env, nil, []string{floor, "/bin/true"}, nil},
		{"python-start", again.env, nil, []string{"/usr/bin/python3", "-c", "pass"}, nil},
		{"first-start", first.env, pending, []string{bin, "/bin/true"}, nil},
		{"python-start, venv", again.env, nil, []string{venvPy, "-c", "pass"}, nil},
		{"first start, python worker", firstPy.env, pendingPy, []string{bin, venvPy, "-c", "pass"}, nil},
		{"restart", again.env, nil, []string{bin, "/bin/true"}, nil},
		{"restart+model", rulesEnv, nil, []string{bin, vllm, "serve", model, "--kv-cache-dtype", "auto"}, rulesTime},
		{"Kubernetes restart", k8s.env, k8s.remount, []string{bin, "/bin/true"}, nil},
		{"Kubernetes restart, fresh state", k8sFresh.env, func() { k8sFresh.remount(); os.RemoveAll(k8sFresh.state) }, []string{bin, "/bin/true"}, nil},
		{"first start, venv interpreter", firstVenv.env, pendingVenv, []string{bin, "/bin/true"}, nil},
	}
	peak := func(k kind) int64 {
		var kb int64
		for i := 0; i < 3; i++ {
			if k.before != nil {
				k.before()
			}
			cmd := exec.Command(rss, k.argv...)
			cmd.Env = k.env
			out, err := cmd.Output()
			if err != nil {
				b.Fatalf("rss %s: %v", k.name, err)
			}
			var v int64
			fmt.Sscan(string(out), &v)
			kb = max(kb, v)
		}
		return kb
	}

	var rows []benchStats
	for b.Loop() {
		// The restart's install is patched, and its record confirmed by
		// the start after (a run that wrote the files records nothing:
		// its identities are too fresh to vouch for).
		runOnce(again.env, bin, "/bin/true")
		time.Sleep(100 * time.Millisecond)
		runOnce(again.env, bin, "/bin/true")
		// The Kubernetes install's state directory holds the probe's
		// answer, as after the container's first start.
		k8s.remount()
		runOnce(k8s.env, bin, "/bin/true")
		times := make([][]time.Duration, len(kinds))
		rulesMicros = rulesMicros[:0]
		// Each round runs the kinds in an order of its own: a start
		// measured right after the interpreter's (which leaves the most
		// to clean up) is slower by up to a millisecond here, and a fixed
		// order would put that on one row. The seed is fixed, so runs of
		// the benchmark see the same orders.
		shuffle := rand.New(rand.NewPCG(1, 2))
		round := func(only func(kind) bool) {
			for r := 0; r < benchRuns; r++ {
				for _, i := range shuffle.Perm(len(kinds)) {
					k := kinds[i]
					if !only(k) {
						continue
					}
					if k.before != nil {
						k.before()
					}
					times[i] = append(times[i], runOnce(k.env, k.argv[0], k.argv[1:]...))
					if k.after != nil {
						k.after()
					}
				}
			}
		}
		// First starts write and fsync files: their writeback would fall
		// on the restarts measured next to them, so they have rounds of
		// their own.
		round(func(k kind) bool { return k.before == nil })
		round(func(k kind) bool { return k.before != nil })
		rows = rows[:0]
		for i, k := range kinds {
			ts := times[i]
			sort.Slice(ts, func(a, b int) bool { return ts[a] < ts[b] })
			rows = append(rows, benchStats{name: k.name, median: ts[len(ts)/2], min: ts[0], max: ts[len(ts)-1], rssKB: peak(k)})
		}
	}
	data, err := os.ReadFile(again.report)
	if err != nil || !strings.Contains(string(data), `"recorded": true`) || !strings.Contains(string(data), `"cached": true`) {
		b.Fatalf("the restarts did not use the record and the probe cache: %v", err)
	}
	if strings.Contains(string(data), `"pending"`) || !strings.Contains(string(data), `"state": "applied"`) {
		b.Fatalf("the restarts did not find the patches applied")
	}
	if data, err := os.ReadFile(first.report); err != nil || !strings.Contains(string(data), `"action": "applied"`) {
		b.Fatalf("the first starts did not apply the patches: %v", err)
	}
	if data, err := os.ReadFile(firstPy.report); err != nil || !strings.Contains(string(data), `"action": "applied"`) || !strings.Contains(string(data), `"located": "without starting Python`) {
		b.Fatalf("the first starts with a Python worker did not apply the patches with the engine located without Python: %v", err)
	}
	if data, err := os.ReadFile(firstVenv.report); err != nil || !strings.Contains(string(data), `"action": "applied"`) || !strings.Contains(string(data), `"located": "without starting Python`) {
		b.Fatalf("the first starts with /bin/true and the venv's interpreter did not apply the patches with the engine located without Python: %v", err)
	}
	if data, err := os.ReadFile(k8s.report); err != nil || !strings.Contains(string(data), `"action": "applied"`) || !strings.Contains(string(data), `"cached": true`) || !strings.Contains(string(data), `"replayed": true`) {
		b.Fatalf("the Kubernetes restarts did not write the recorded patches with the probe's answer from the state directory: %v", err)
	}
	if data, err := os.ReadFile(k8sFresh.report); err != nil || !strings.Contains(string(data), `"action": "applied"`) || strings.Contains(string(data), `"cached": true`) || strings.Contains(string(data), `"replayed": true`) {
		b.Fatalf("the Kubernetes restarts with fresh state did not apply the patches after a probe: %v", err)
	}
	bare, fl := rows[0].median, rows[1].median
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }
	fmt.Printf("\n%-31s %9s %9s %9s %12s %14s %9s\n", "start", "median ms", "min ms", "max ms", "overhead ms", "overhead/floor", "peak RSS")
	for _, r := range rows {
		over := r.median - bare
		ratio := "-"
		if r.name != "bare-exec" && fl > bare {
			ratio = fmt.Sprintf("%.2f", float64(over)/float64(fl-bare))
		}
		fmt.Printf("%-31s %9s %9s %9s %12s %14s %7.1fMB\n", r.name, ms(r.median), ms(r.min), ms(r.max), ms(over), ratio, float64(r.rssKB)/1024)
		b.ReportMetric(float64(r.median.Microseconds())/1000, strings.NewReplacer(" ", "-", ",", "").Replace(strings.ToLower(r.name))+"-ms")
	}
	fmt.Printf("first start over one interpreter start: %s ms; with a Python worker, over that worker's own run: %s ms\n",
		ms(rows[3].median-rows[2].median), ms(rows[5].median-rows[4].median))
	sort.Slice(rulesMicros, func(a, b int) bool { return rulesMicros[a] < rulesMicros[b] })
	fmt.Printf("model rules in restart+model (%d rules, their took_us in the report): median %d µs, min %d, max %d; restart+model over restart: %s ms\n",
		rulesCount, rulesMicros[len(rulesMicros)/2], rulesMicros[0], rulesMicros[len(rulesMicros)-1], ms(rows[7].median-rows[6].median))
	b.ReportMetric(float64(rulesMicros[len(rulesMicros)/2]), "rules-us")
	ratio := func(a, b time.Duration) string { return fmt.Sprintf("%.2f", float64(a)/float64(b)) }
	// Issue #25's ratio goals are retired (docs/performance.md keeps
	// their figures); the ratios stay for comparison, and one guard: the
	// first start on the plain venv layout within two interpreter starts.
	fmt.Printf("ratios: first start / python3 -c pass %s (%s with the venv's interpreter, the engine located without Python); with a Python worker, first start over the worker's run / its run %s; Kubernetes restart, fresh state / python3 -c pass %s; Kubernetes restart / python3 -c pass %s; restart overhead / floor overhead %s\n",
		ratio(rows[3].median, rows[2].median), ratio(rows[10].median, rows[2].median), ratio(rows[5].median-rows[4].median, rows[4].median), ratio(rows[9].median, rows[2].median), ratio(rows[8].median, rows[2].median), ratio(rows[6].median-bare, fl-bare))
	guard := "held"
	if rows[10].median > 2*rows[2].median {
		guard = "NOT HELD"
	}
	fmt.Printf("guard: first start on the plain venv layout / python3 -c pass %s (<= 2: %s)\n", ratio(rows[10].median, rows[2].median), guard)
	var rep struct {
		Timings []struct {
			Step   string `json:"step"`
			Micros int64  `json:"us"`
		} `json:"timings"`
	}
	json.Unmarshal(data, &rep)
	fmt.Printf("last restart, by step (µs):")
	for _, t := range rep.Timings {
		fmt.Printf(" %s %d", t.Step, t.Micros)
	}
	fmt.Println()
	fi, _ := os.Stat(bin)
	fmt.Printf("binary: %.1f MB; %d runs each, interleaved; install: %d .py files, %d MB\n", float64(fi.Size())/(1<<20), benchRuns, fixture.EngineFiles, fixture.EngineBytes>>20)
}

// modelDir is a local model directory as vLLM loads one: a real-sized
// config.json (a Llama-3.1-8B's, with an fp8 quantization_config) and a
// shard.
func modelDir(b *testing.B, dir string) string {
	b.Helper()
	m := filepath.Join(dir, "model")
	os.MkdirAll(m, 0o755)
	cfg := `{
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0", "use_cache": true, "vocab_size": 128256,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
    "weight_block_size": [128, 128]}
}`
	if err := os.WriteFile(filepath.Join(m, "config.json"), []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m, "model.safetensors"), make([]byte, 4096), 0o644); err != nil {
		b.Fatal(err)
	}
	return m
}

// vllmRegistry writes a vLLM model registry into an install, for the
// architecture rule to read: 301 entries of the shape vLLM's
// model_executor/models/registry.py writes (`"Name": ("module", "Class"),`),
// 23 KB.
func vllmRegistry(b *testing.B, site string) {
	b.Helper()
	var r strings.Builder
	r.WriteString("# model registry\nimport importlib\n\n_TEXT_GENERATION_MODELS = {\n")
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&r, "    \"Model%dForCausalLM\": (\"model%d\", \"Model%dForCausalLM\"),  # family %d\n", i, i, i, i)
		if i == 150 {
			r.WriteString("    \"LlamaForCausalLM\": (\"llama\", \"LlamaForCausalLM\"),\n")
		}
	}
	r.WriteString("}\n")
	p := filepath.Join(site, "vllm", "model_executor", "models", "registry.py")
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(r.String()), 0o644); err != nil {
		b.Fatal(err)
	}
}

// ruleMicros is how many model rules a start's report lists and how long
// they took together (their took_us), failing when none ran: the row
// would then measure nothing.
func ruleMicros(b *testing.B, report string) (int, int64) {
	b.Helper()
	data, err := os.ReadFile(report)
	if err != nil {
		b.Fatal(err)
	}
	var rep struct {
		Preflight struct {
			Checks []struct {
				Status string `json:"status"`
				Rule   string `json:"rule"`
				Micros int64  `json:"took_us"`
			} `json:"checks"`
		} `json:"preflight"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		b.Fatal(err)
	}
	n, evaluated := 0, 0
	var us int64
	for _, c := range rep.Preflight.Checks {
		if c.Rule == "" {
			continue
		}
		n++
		us += c.Micros
		if c.Status != "skipped" {
			evaluated++
		}
	}
	if evaluated == 0 {
		b.Fatalf("no model rule was evaluated in %s", report)
	}
	return n, us
}

// imageInterpreter copies Debian's interpreter into root
// (fixture.PythonPrefix) and returns its path inside root.
func imageInterpreter(b *testing.B, root string) string {
	real, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		b.Fatalf("the Kubernetes rows need Debian's python3: %v", err)
	}
	exe, err := fixture.PythonPrefix(real, root)
	if err != nil {
		b.Fatal(err)
	}
	rel, _ := filepath.Rel(root, exe)
	return rel
}

// k8sMount is an engine install on an overlayfs mount: lower, the
// pristine install; a new upper layer for each run (remount).
type k8sMount struct {
	env           []string
	state, report string
	remount       func()
}

// enterMountNamespace moves the benchmark's thread, for good, into a
// mount namespace of its own, where mounts do not propagate back: the
// commands it starts (forked from that thread) see its overlay mounts,
// which go when the thread ends with the benchmark.
func enterMountNamespace(b *testing.B) {
	runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		b.Fatalf("the Kubernetes rows need a mount namespace of their own (root): %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		b.Fatalf("mount --make-rprivate /: %v", err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
