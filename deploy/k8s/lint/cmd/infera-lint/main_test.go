package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/deploy/k8s/lint"
)

// The seed's Kimi-K3 PD recipe (testdata/seed/PROVENANCE.md): an
// InferaDeployment with a server and a Mooncake prefill and decode.
const kimiPD = "testdata/seed/kimi-k3-optimized-disaggregated.yaml"

// lintRun runs infera-lint with args and stdin, and returns its exit
// status, standard output and standard error.
func lintRun(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func seed(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(data)
}

// fill substitutes the placeholders as the recipe's header tells the
// operator to: node names and the model directories on them.
func fill(s string) string {
	return regexp.MustCompile(`<[A-Z][A-Z0-9_]*>`).ReplaceAllStringFunc(s, func(p string) string {
		switch {
		case strings.HasSuffix(p, "_NODE>") || p == "<NODE>":
			return "node-" + strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(p, "<"), "_NODE>"))
		case strings.HasSuffix(p, "MODEL_DIR>"):
			return "/mnt/models"
		case p == "<MODEL_PATH>":
			return "/models/Qwen3-8B"
		}
		return "filled"
	})
}

// writeTemp writes s to a file of its own and returns its path.
func writeTemp(t *testing.T, name, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	return p
}

// The recipe as the seed ships it fails, naming each placeholder where
// it is; filled in, it passes (its warnings are printed, and fail only
// with -strict).
func TestSeedKimiPD(t *testing.T) {
	code, out, errOut := lintRun(t, "", kimiPD)
	assert.Equal(t, exitFindings, code, "%s%s", out, errOut)
	for _, want := range []string{
		kimiPD + `: document 1 (InferaDeployment kimi-k3-opt-pd): error placeholders: <PREFILL_MODEL_DIR> in spec.services.prefill.extraPodSpec.volumes[1].hostPath.path -- fix: Substitute every <NAME> placeholder`,
		`error placeholders: <DECODE_MODEL_DIR> in spec.services.decode.extraPodSpec.volumes[1].hostPath.path`,
		`error placeholders: <PREFILL_NODE> in spec.services.prefill.extraPodSpec.nodeSelector.kubernetes.io/hostname`,
	} {
		assert.Contains(t, out, want)
	}
	assert.Contains(t, errOut, "3 container(s) through infera-exec: 6 error(s)")

	filled := writeTemp(t, "kimi-pd.yaml", fill(seed(t, kimiPD)))
	code, out, errOut = lintRun(t, "", filled)
	assert.Equal(t, exitClean, code, "%s%s", out, errOut)
	assert.NotContains(t, out, "error ")
	assert.Contains(t, out, `service "prefill": container "main": warn startup-probe: startupProbe allows 3000 s but the worker waits up to 7200 s`)
	assert.Contains(t, errOut, "3 container(s) through infera-exec: 0 error(s)")

	code, _, _ = lintRun(t, "", "-strict", filled)
	assert.Equal(t, exitFindings, code, "-strict: warnings fail")
}

// "-" reads standard input, named <stdin> in the findings.
func TestStdin(t *testing.T) {
	code, out, _ := lintRun(t, seed(t, kimiPD), "-")
	assert.Equal(t, exitFindings, code)
	assert.Contains(t, out, "<stdin>: document 1 (InferaDeployment kimi-k3-opt-pd): error placeholders: <PREFILL_MODEL_DIR>")

	code, out, errOut := lintRun(t, fill(seed(t, kimiPD)), "-")
	assert.Equal(t, exitClean, code, "%s%s", out, errOut)
}

// A Mooncake prefill without --data-parallel-address advertises
// 127.0.0.1 to its decoder: the advertise check of --doctor, with its
// words, on the prefill service only (a kv_consumer does not need it).
func TestMooncakePrefillWithoutAddress(t *testing.T) {
	src := fill(seed(t, kimiPD))
	const addr = `"--data-parallel-address","$(POD_IP)",`
	require.Equal(t, 2, strings.Count(src, addr), "the recipe sets it on the prefill and the decode")
	both := strings.ReplaceAll(src, addr, "")
	code, out, errOut := lintRun(t, both, "-")
	assert.Equal(t, exitFindings, code, "%s%s", out, errOut)
	assert.Contains(t, out, `<stdin>: document 1 (InferaDeployment kimi-k3-opt-pd): service "prefill": container "main": error advertise: --data-parallel-address not set (vLLM then uses 127.0.0.1)`)
	assert.Contains(t, out, "-- fix: Set --data-parallel-address to this pod's routable address")
	assert.NotContains(t, out, `service "decode": container "main": error advertise`, "a Mooncake kv_consumer is told the bootstrap address per request")
	assert.Equal(t, 1, strings.Count(out, "error "), out)
}

// The InferaDeployment's containers are checked as the operator builds
// the pods: the JSON output names the service and container of each
// finding, and counts the containers started through infera-exec.
func TestInferaDeploymentJSON(t *testing.T) {
	src := strings.Replace(fill(seed(t, kimiPD)), `{name: INFERA_REQUIRE_NATIVE, value: mooncake}`, `{name: INFERA_REQUIRE_NATIVE, value: mooncak}`, 1)
	code, out, _ := lintRun(t, src, "-json", "-")
	assert.Equal(t, exitFindings, code)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, 3, rep.Engines, "server, prefill and decode run through infera-exec")
	assert.Equal(t, 1, rep.Files)
	var errs []lint.Finding
	for _, f := range rep.Findings {
		if f.Severity == lint.Error {
			errs = append(errs, f)
		}
	}
	require.NotEmpty(t, errs)
	f := errs[0]
	assert.Equal(t, "<stdin>", f.File)
	assert.Equal(t, 1, f.Document)
	assert.Equal(t, "InferaDeployment", f.Kind)
	assert.Equal(t, "prefill", f.Service)
	assert.Equal(t, "main", f.Container)
	assert.Contains(t, f.Seen, `INFERA_REQUIRE_NATIVE names "mooncak"`)
}

// The seed's other manifests: the aggregated InferaDeployment on the
// v0.2.2 overlay image (its cp init container is understood as the one
// filling /overlay), and the SGLang PD one, whose <MODEL_DIR> is named.
func TestSeedOthers(t *testing.T) {
	code, out, errOut := lintRun(t, "", "testdata/seed/kimi-k3-vllm.yaml")
	assert.Equal(t, exitClean, code, "%s%s", out, errOut)
	assert.NotContains(t, out, "filled by no init container")
	assert.Contains(t, errOut, "2 container(s) through infera-exec")

	code, out, _ = lintRun(t, "", "testdata/seed/pd-1p1d-mooncake.yaml")
	assert.Equal(t, exitFindings, code)
	assert.Contains(t, out, "error placeholders: <MODEL_DIR> in spec.services.prefill.extraPodSpec.volumes[1].hostPath.path")
	assert.Contains(t, out, `service "prefill": container "main": error placeholders: <MODEL_PATH> in argv[10], the value of --model-path`)

	// Without its init container, the overlay volume is filled by nothing.
	noInit := strings.Replace(fill(seed(t, "testdata/seed/kimi-k3-vllm.yaml")), `command: ["sh","-c","cp -a /payload/. /overlay/"]`, `command: ["sh","-c","true"]`, 1)
	code, out, _ = lintRun(t, noInit, "-")
	assert.Equal(t, exitFindings, code)
	assert.Contains(t, out, `emptyDir "overlay" at the payload root /overlay is filled by no init container`)
}

// Unreadable input is exit 2, whatever the other files hold.
func TestUnreadable(t *testing.T) {
	code, _, errOut := lintRun(t, "", filepath.Join(t.TempDir(), "missing.yaml"))
	assert.Equal(t, exitInput, code)
	assert.Contains(t, errOut, "missing.yaml")

	code, _, errOut = lintRun(t, "kind: [unclosed\n", "-")
	assert.Equal(t, exitInput, code)
	assert.Contains(t, errOut, "<stdin>: document 1 is not YAML")

	code, _, _ = lintRun(t, "kind: [unclosed\n", "-", kimiPD)
	assert.Equal(t, exitInput, code, "an unreadable input outranks findings")

	code, _, errOut = lintRun(t, "")
	assert.Equal(t, exitInput, code, "no input named")
	assert.Contains(t, errOut, "usage: infera-lint")
}

// A clean manifest, a directory of manifests.
func TestClean(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(fill(seed(t, "testdata/seed/kimi-k3-vllm.yaml"))), 0o644))
	code, out, errOut := lintRun(t, "", dir)
	assert.Equal(t, exitClean, code, "%s%s", out, errOut)
	assert.Contains(t, errOut, "1 file(s)")
}
