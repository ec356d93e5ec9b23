package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/preflight"
	"github.com/infera/infera-exec/preflight/rules"
)

// The corpus: every container of the seed's deployments that runs
// infera-exec, written as its argv and environment (downward-API fields
// given values, $(VAR) expanded as the kubelet expands it), with the
// verdict of each check under --doctor and --explain. Each runs in a
// container of its own (the sandbox: /overlay, a fake ROCm 7 at /opt/rocm,
// the model directories at /models, /dev/infiniband, a 16 GiB /dev/shm)
// inside a network namespace shaped like the pod's
// network: "pod" (eth0, a veth, with the Pod IP and the default route) or
// "host" (hostNetwork: a cni0 bridge that sorts first, and nic0, a
// physical NIC with the node's address and the default route). A correct
// manifest must get no refusal and no warning the engine code or the
// seed's own notes contradict; each case's "notes" say why its verdicts
// are right where they are not plain passes.
//
// go test -run Corpus ./cmd/infera-exec/ -args -update-corpus writes the
// verdicts seen into the files: read the diff before committing it.

var (
	updateCorpus = flag.Bool("update-corpus", false, "write the verdicts seen into testdata/corpus")
	showCorpus   = flag.Bool("show-corpus", false, "log what each check saw")
)

type corpusCase struct {
	Source  string            `json:"source"`
	Network string            `json:"network"` // pod or host
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env"`
	Expect  *corpusExpect     `json:"expect,omitempty"`
	Notes   []string          `json:"notes,omitempty"`
}

type corpusExpect struct {
	Doctor  corpusRun `json:"doctor"`
	Explain corpusRun `json:"explain"`
}

// corpusRun is one mode's outcome: the exit status, each check's verdict
// (pass, skipped, or the severity of a failure), and the warnings said
// (their first 72 characters, in order).
type corpusRun struct {
	Exit     int               `json:"exit"`
	Checks   map[string]string `json:"checks"`
	Warnings []string          `json:"warnings"`
}

const corpusDir = "testdata/corpus"

func TestCorpus(t *testing.T) {
	ok, err := canSandbox()
	if err != nil {
		t.Fatal(err)
	}
	_, ipErr := exec.LookPath("ip")
	if !ok || os.Geteuid() != 0 || ipErr != nil {
		if os.Getenv("INFERA_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("INFERA_REQUIRE_SANDBOX=1 but the corpus needs root, namespaces and iproute2 (euid %d, %v)", os.Geteuid(), ipErr)
		}
		t.Skip("the corpus needs root, namespaces and iproute2")
	}
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var cases []corpusCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		var c corpusCase
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&c), f)
		cases = append(cases, c)
	}
	rig := newCorpusRig(t, cases)
	for i, f := range files {
		c := cases[i]
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			// go test -short (make test) runs every third case, a minute
			// less on 2 cores; make test-long runs them all.
			if testing.Short() && !*updateCorpus && i%3 != 0 {
				t.Skip("-short runs every third corpus case; make test-long runs them all")
			}
			got := corpusExpect{Doctor: rig.run(t, c, "--doctor"), Explain: rig.run(t, c, "--explain")}
			if *updateCorpus {
				c.Expect = &got
				var data bytes.Buffer
				enc := json.NewEncoder(&data)
				enc.SetEscapeHTML(false) // <MODEL_PATH> stays readable
				enc.SetIndent("", " ")
				require.NoError(t, enc.Encode(c))
				require.NoError(t, os.WriteFile(f, data.Bytes(), 0o644))
				return
			}
			require.NotNil(t, c.Expect, "%s has no expected verdicts: run with -args -update-corpus and read the diff", f)
			assert.Equal(t, *c.Expect, got, "%s (%s)", c.Source, f)
		})
	}
}

// corpusRig is what every case shares: the payload, the fake ROCm, the
// model directories, sysfs and /dev/infiniband.
type corpusRig struct {
	dir     string
	sandbox string
}

func newCorpusRig(t *testing.T, cases []corpusCase) *corpusRig {
	bin := shim(t)
	sb, err := exec.LookPath("sandbox")
	require.NoError(t, err)
	r := &corpusRig{dir: t.TempDir(), sandbox: sb}
	// The payload as the overlay image installs it: the binary, the
	// pure-Python trees and the ROCm 7 native trees (mooncake, hipfile),
	// with an index written before it listed the payload's INFERA_* names
	// (a v0.2.2-era payload: the built-in list stands in).
	payload := filepath.Join(r.dir, "payload")
	require.NoError(t, fixture.CopyFile(bin, filepath.Join(payload, "bin", "infera-exec"), 0o755))
	for minor := 9; minor <= 14; minor++ {
		require.NoError(t, os.MkdirAll(filepath.Join(payload, fmt.Sprintf("py3%d", minor), "infera"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(payload, fmt.Sprintf("py3%d", minor), "infera", "__init__.py"), nil, 0o644))
		native := filepath.Join(payload, "native", fmt.Sprintf("rocm7-py3%d", minor))
		require.NoError(t, fixture.SharedObject(filepath.Join(native, "lib", "libinfera_native.so.1"), "libinfera_native.so.1"))
		require.NoError(t, os.WriteFile(filepath.Join(native, "CAPABILITIES"), []byte("mooncake hipfile\n"), 0o644))
	}
	_, err = overlay.WriteIndex(payload)
	require.NoError(t, err)
	require.NoError(t, fixture.ROCm(filepath.Join(r.dir, "rocm"), 7, "7.1.70100"))
	// Every /models/... path a command names, with one shard.
	models := filepath.Join(r.dir, "models")
	require.NoError(t, os.MkdirAll(models, 0o755))
	for _, c := range cases {
		for _, a := range c.Argv {
			if rel, ok := strings.CutPrefix(a, "/models/"); ok && rel != "" && !strings.ContainsAny(rel, "<>") {
				d := filepath.Join(models, rel)
				require.NoError(t, os.MkdirAll(d, 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(d, "model-00001-of-00001.safetensors"), make([]byte, 1<<16), 0o644))
			}
		}
	}
	// sysfs: one ionic RDMA device, and nic0 physical (its device link).
	sys := filepath.Join(r.dir, "rig", "sys")
	require.NoError(t, fixture.FakeSysfs(sys, "ionic_0", 1, "0x1dd8", "0x1002"))
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "class/net/nic0/device"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(r.dir, "devib"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "devib", "uverbs0"), nil, 0o644))
	for d := r.dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	return r
}

// corpusNetworks set up the network namespace of each shape: addresses,
// the default route, and (for the NIC the advertise-ip check may choose)
// a carrier before infera-exec starts.
var corpusNetworks = map[string]string{
	"pod": "ip link set lo up && ip link add eth0 type veth peer name peer0 && ip addr add 10.42.1.23/24 dev eth0 && " +
		"ip link set eth0 up && ip link set peer0 up && ip route add default via 10.42.1.1 dev eth0",
	"host": "ip link set lo up && ip link add cni0 type bridge && ip addr add 10.42.0.1/24 dev cni0 && ip link set cni0 up && " +
		"ip link add nic0 type veth peer name peer0 && ip addr add 10.1.2.3/24 dev nic0 && ip link set nic0 up && ip link set peer0 up && " +
		"ip route add default via 10.1.2.1 dev nic0 && " +
		`i=0 && until ip -o link show nic0 | grep -q "state UP"; do i=$((i+1)); [ $i -lt 200 ] || exit 9; sleep 0.05; done`,
}

func (r *corpusRig) run(t *testing.T, c corpusCase, mode string) corpusRun {
	setup, ok := corpusNetworks[c.Network]
	require.True(t, ok, "network %q is not pod or host", c.Network)
	args := []string{"--net", "sh", "-c", setup + ` && exec "$@"`, "sh", r.sandbox,
		"-fakedev", "-tmpfs", "/dev/shm:size=16g",
		"-bind", filepath.Join(r.dir, "payload") + ":/overlay:ro",
		"-bind", filepath.Join(r.dir, "rocm") + ":/opt/rocm:ro",
		"-bind", filepath.Join(r.dir, "models") + ":/models:ro",
		"-bind", filepath.Join(r.dir, "rig") + ":/rig:ro",
		"-bind", filepath.Join(r.dir, "devib") + ":/dev/infiniband:ro",
		"--", "/overlay/bin/infera-exec", mode, "--json"}
	cmd := exec.Command("unshare", append(args, c.Argv...)...)
	// The container's environment: the spec's, and what the image and
	// the rig give (PATH, where sysfs is).
	cmd.Env = []string{"PATH=" + filepath.Dir(r.sandbox) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SYSFS_PATH=/rig/sys", "HOME=/root"}
	// A node gives pods a high open-file limit; where the machine running
	// the tests has a lower hard limit (and no right to raise it), the
	// nofile check is held to that limit, so its verdict stays the
	// manifest's, not this machine's.
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Max < 65536 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("INFERA_PREFLIGHT_NOFILE_MIN=%d", lim.Max))
	}
	for k, v := range c.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.ProcessState == nil || (err != nil && cmd.ProcessState.ExitCode() < 0) {
		t.Fatalf("%s: %v\n%s", mode, err, stderr.String())
	}
	run := corpusRun{Exit: cmd.ProcessState.ExitCode(), Checks: map[string]string{}, Warnings: []string{}}
	var out struct {
		Checks    []struct{ Name, Status, Severity, Seen string } `json:"checks"`
		Preflight *struct {
			Checks []struct{ Name, Status, Severity, Seen string } `json:"checks"`
		} `json:"preflight"`
		Log []struct{ Level, Msg string } `json:"log"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("%s: exit %d, not JSON: %v\nstdout: %s\nstderr: %s", mode, run.Exit, err, stdout.String(), stderr.String())
	}
	checks := out.Checks
	if out.Preflight != nil {
		checks = out.Preflight.Checks
	}
	for _, ch := range checks {
		v := ch.Status
		if v == "fail" {
			v = ch.Severity
		}
		run.Checks[ch.Name] = v
		if *showCorpus {
			t.Logf("%s %-12s %-7s %s", mode, ch.Name, v, ch.Seen)
		}
	}
	// --doctor says its warnings on stderr; --explain in the plan's log.
	for _, line := range strings.Split(stderr.String(), "\n") {
		if w, ok := strings.CutPrefix(line, "infera-exec: warning: "); ok {
			run.Warnings = append(run.Warnings, corpusShort(w))
		}
	}
	for _, l := range out.Log {
		if l.Level == "warn" || l.Level == "error" {
			run.Warnings = append(run.Warnings, corpusShort(l.Msg))
		}
	}
	return run
}

func corpusShort(s string) string {
	if len(s) > 72 {
		return s[:72]
	}
	return s
}

// The corpus covers what it claims: one file per container of the seed's
// deployments, every check named in every expectation.
func TestCorpusShape(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.json"))
	require.NoError(t, err)
	assert.Len(t, files, 61)
	// Every check and every built-in model rule has a verdict.
	want := preflight.Names()
	for _, r := range rules.Builtin() {
		want = append(want, r.ID)
	}
	sort.Strings(want)
	sources := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		var c corpusCase
		require.NoError(t, json.Unmarshal(data, &c), f)
		sources[strings.SplitN(c.Source, ":", 2)[0]] = true
		if c.Expect == nil {
			continue
		}
		for _, run := range []corpusRun{c.Expect.Doctor, c.Expect.Explain} {
			var names []string
			for n := range run.Checks {
				names = append(names, n)
			}
			sort.Strings(names)
			assert.Equal(t, want, names, f)
		}
	}
	assert.Len(t, sources, 21, "manifests")
}
