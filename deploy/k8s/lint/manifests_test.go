package lint

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The examples this module checks, relative to it: deploy/k8s/*.yaml.
const manifestDir = ".."

// exampleFiles are deploy/k8s's own manifests (not this module's
// testdata, which holds the seed's with their placeholders).
func exampleFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	require.NoError(t, err)
	return files
}

func testContext(t *testing.T) Context {
	t.Helper()
	defs, err := patchdef.Builtin()
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, d := range defs {
		ids[d.ID] = true
	}
	return Context{PatchIDs: ids}
}

// filled is a file's content with its template placeholders replaced, as
// the files' headers tell the operator to do before applying.
func filled(data []byte) []byte {
	return regexp.MustCompile(`\bREGISTRY/|:[A-Z][A-Z0-9_]*_TAG\b`).ReplaceAllFunc(data, func(m []byte) []byte {
		if m[0] == ':' {
			return []byte(":v1.0.0")
		}
		return []byte("registry.example.com/")
	})
}

// checkFile runs every check on one file's content.
func checkFile(t *testing.T, name string, data []byte) ([]string, Stats) {
	t.Helper()
	findings, stats, err := Lint(name, data, testContext(t))
	require.NoError(t, err)
	var problems []string
	for _, f := range findings {
		problems = append(problems, f.String())
	}
	return problems, stats
}

func TestManifests(t *testing.T) {
	files := exampleFiles(t)
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	require.Subset(t, names, []string{"vllm-aggregated.yaml", "sglang-pd.yaml", "vllm-image-volume.yaml"})

	var total Stats
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			problems, stats := checkFile(t, f, filled(data))
			for _, p := range problems {
				t.Error(p)
			}
			t.Logf("checked: %+v", stats)
			// Every example runs at least one worker through infera-exec;
			// a file where nothing matched would pass vacuously.
			assert.Positive(t, stats.Engines, "no container runs a worker through infera-exec")
			total.Engines += stats.Engines
			total.Installers += stats.Installers
			total.ImageVols += stats.ImageVols
		})
	}
	assert.Positive(t, total.Installers, "no init container installs the overlay")
	assert.Positive(t, total.ImageVols, "no engine runs from an image volume")
}

// As shipped, the examples' images are templates (REGISTRY/...:X_TAG):
// the check catches every one, so a file applied without replacing them
// fails the check instead of the pull.
func TestPlaceholderImagesAreCaught(t *testing.T) {
	files := exampleFiles(t)
	caught := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		problems, _ := checkFile(t, f, data)
		for _, p := range problems {
			if strings.Contains(p, "still holds the placeholder REGISTRY") {
				caught++
			}
		}
	}
	assert.GreaterOrEqual(t, caught, 6, "every template image of the examples is reported")
	assert.Empty(t, imagePlaceholders("registry.example.com/rocm/vllm:v0.11.0"))
	assert.Empty(t, imagePlaceholders("rocm/vllm@sha256:0123"))
	assert.Equal(t, []string{"REGISTRY", "VLLM_TAG"}, imagePlaceholders("REGISTRY/rocm/vllm:VLLM_TAG"))
	assert.Equal(t, []string{"TAG"}, imagePlaceholders("localhost:5000/infera/overlay:TAG"))
}

// TestNoPlaceholders: no file under deploy/k8s other than this module's
// Go sources (whose tests spell placeholders on purpose) keeps a template
// placeholder such as <NODE>, comments included.
func TestNoPlaceholders(t *testing.T) {
	n := 0
	err := filepath.WalkDir(manifestDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && filepath.Base(p) == "testdata" {
			return filepath.SkipDir // the seed's manifests, placeholders and all
		}
		if err != nil || d.IsDir() {
			return err
		}
		switch filepath.Ext(p) {
		case ".go", ".mod", ".sum":
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		for _, problem := range Placeholders(p, data) {
			t.Error(problem)
		}
		return nil
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 3)
}

// base is a small manifest that passes every check; each case below breaks
// one thing in it.
const base = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: worker
spec:
  selector:
    matchLabels:
      app: worker
  template:
    metadata:
      labels:
        app: worker
    spec:
      enableServiceLinks: false
      initContainers:
        - name: overlay
          image: registry.example.com/infera/overlay:v1
          args: ["/overlay"]
          terminationMessagePolicy: FallbackToLogsOnError
          volumeMounts:
            - name: overlay
              mountPath: /overlay
      containers:
        - name: vllm
          image: registry.example.com/rocm/vllm:v1
          terminationMessagePolicy: FallbackToLogsOnError
          command:
            - /overlay/bin/infera-exec
            - python3
            - -m
            - infera.engine.vllm
            - --model
            - /models/m
          env:
            - name: INFERA_ENGINE_READY_TIMEOUT
              value: "1800"
          ports:
            - name: http
              containerPort: 8000
          startupProbe:
            httpGet:
              path: /health
              port: http
            periodSeconds: 10
            failureThreshold: 192
          readinessProbe:
            httpGet:
              path: /health
              port: http
          volumeMounts:
            - name: overlay
              mountPath: /overlay
              readOnly: true
            - name: dshm
              mountPath: /dev/shm
            - name: models
              mountPath: /models
              readOnly: true
      volumes:
        - name: overlay
          emptyDir: {}
        - name: dshm
          emptyDir:
            medium: Memory
        - name: models
          persistentVolumeClaim:
            claimName: models
---
apiVersion: v1
kind: Service
metadata:
  name: worker
spec:
  selector:
    app: worker
  ports:
    - name: http
      port: 8000
      targetPort: http
`

// TestChecksCatch shows that the check fails for what it is meant to
// catch: each case changes the base manifest in one place.
func TestChecksCatch(t *testing.T) {
	problems, stats := checkFile(t, "base.yaml", []byte(base))
	require.Empty(t, problems, "the base manifest must pass")
	require.Equal(t, Stats{Engines: 1, Installers: 1}, stats)

	const worker = "            - infera.engine.vllm\n"
	cases := []struct {
		name, old, new, want string
	}{
		{"misspelt field", "          volumeMounts:\n            - name: overlay\n              mountPath: /overlay\n      containers:",
			"          volumeMount:\n            - name: overlay\n              mountPath: /overlay\n      containers:", `unknown field "spec.template.spec.initContainers[0].volumeMount"`},
		{"field in the wrong case", "          command:", "          Command:", `unknown field "spec.template.spec.containers[0].Command"`},
		{"duplicate key", "  name: worker\nspec:\n  selector:", "  name: worker\n  name: other\nspec:\n  selector:", `key "name" already set`},
		{"unknown kind", "kind: Deployment", "kind: Deploymnet", `unknown kind "Deploymnet"`},
		{"unknown apiVersion", "apiVersion: apps/v1", "apiVersion: apps/v1beta2", `unknown kind "Deployment" of apiVersion "apps/v1beta2"`},
		{"invalid quantity", "            medium: Memory", "            medium: Memory\n            sizeLimit: 16 GB", "quantities must match"},
		{"unknown infera-exec option", "            - /overlay/bin/infera-exec\n", "            - /overlay/bin/infera-exec\n            - --explian\n", "unknown option --explian"},
		{"infera-exec mode instead of a worker", "            - /overlay/bin/infera-exec\n", "            - /overlay/bin/infera-exec\n            - --version\n", "runs no worker"},
		{"--install with a worker", `args: ["/overlay"]`, `args: ["/overlay", "python3"]`, "--install copies the payload and runs no command"},
		{"install destination not the engine's mount", `args: ["/overlay"]`, `args: ["/payload"]`, "--install /payload: no volume is mounted there"},
		{"an unused volume is harmless", "          emptyDir: {}\n", "          emptyDir: {}\n        - name: other\n          emptyDir: {}\n",
			""}, // no problem expected
		{"engine runs from a volume nobody fills", "            - name: overlay\n              mountPath: /overlay\n              readOnly: true",
			"            - name: other\n              mountPath: /overlay\n              readOnly: true", `volumeMount "other" at /overlay names no volume`},
		{"payload mounted writable", "              mountPath: /overlay\n              readOnly: true", "              mountPath: /overlay", "mount the payload (/overlay) read-only"},
		{"payload root elsewhere", "            - name: INFERA_ENGINE_READY_TIMEOUT\n", "            - name: PAYLOAD_ROOT\n              value: /payload\n            - name: INFERA_ENGINE_READY_TIMEOUT\n", "the payload root /payload (PAYLOAD_ROOT) is not a volume mount"},
		{"undeclared volume", "            - name: dshm\n              mountPath: /dev/shm", "            - name: shm\n              mountPath: /dev/shm", `volumeMount "shm" at /dev/shm names no volume of the pod`},
		{"template placeholder", "  name: worker\nspec:\n  selector:", "  name: worker\n  annotations:\n    node: <NODE>\nspec:\n  selector:", "error placeholders: <NODE> in metadata.annotations.node -- fix: Substitute every <NAME> placeholder"},
		{"unexpanded variable", worker, worker + "            - --host\n            - $(POD_IP)\n", "command refers to $(POD_IP)"},
		{"bad downward field", "          env:\n", "          env:\n            - name: POD_IP\n              valueFrom:\n                fieldRef:\n                  fieldPath: status.podIp\n", `fieldRef "status.podIp" is not a field the downward API offers`},
		{"implied capability not required", worker, worker + "            - --kv-transfer-config\n            - '{\"kv_connector\":\"MooncakeConnector\",\"kv_role\":\"kv_producer\"}'\n", "need mooncake, but INFERA_REQUIRE_NATIVE"},
		{"implied capability not required (SGLang)", worker, "            - infera.engine.sglang\n            - --disaggregation-mode\n            - prefill\n", "need mooncake, but INFERA_REQUIRE_NATIVE"},
		{"mooncake without RDMA wiring", "          env:\n", "          env:\n            - name: INFERA_REQUIRE_NATIVE\n              value: mooncake\n", "error host-network: a Mooncake worker without hostNetwork: true"},
		{"malformed capability list", "          env:\n", "          env:\n            - name: INFERA_REQUIRE_NATIVE\n              value: moon-cake!\n", "infera-exec would refuse its environment"},
		{"malformed ready timeout", `value: "1800"`, `value: "soon"`, "infera-exec would warn: INFERA_ENGINE_READY_TIMEOUT"},
		{"startup probe shorter than the ready timeout", "failureThreshold: 192", "failureThreshold: 60", "startupProbe allows 600 s but the worker waits up to 1800 s"},
		{"startup probe as long as the ready timeout, without a margin", "failureThreshold: 192", "failureThreshold: 180", "warn startup-probe: startupProbe allows 1800 s but the worker waits up to 1800 s for the engine (INFERA_ENGINE_READY_TIMEOUT=1800) -- fix: allow at least 1920 s"},
		{"placeholder image", "image: registry.example.com/rocm/vllm:v1", "image: REGISTRY/rocm/vllm:VLLM_TAG", `image "REGISTRY/rocm/vllm:VLLM_TAG" still holds the placeholder REGISTRY and VLLM_TAG`},
		{"misspelt capability", "          env:\n", "          env:\n            - name: INFERA_REQUIRE_NATIVE\n              value: mooncak\n", `INFERA_REQUIRE_NATIVE names "mooncak", which is no capability infera-exec knows (hipfile, mooncake); did you mean mooncake?`},
		{"unknown required patch", "          env:\n", "          env:\n            - name: INFERA_REQUIRE_PATCHES\n              value: no-such-patch\n", `names "no-such-patch", which is no built-in patch`},
		{"service port that does not exist", "      targetPort: http", "      targetPort: web", `targetPort web is not a container port`},
		{"selector that misses the template", "      labels:\n        app: worker\n", "      labels:\n        app: wroker\n", "does not select the pod template's labels"},
		{"probe on an unnamed port", "              port: http\n            periodSeconds: 10", "              port: metrics\n            periodSeconds: 10", `startupProbe uses port "metrics"`},
		{"infera-exec behind a shell", "            - /overlay/bin/infera-exec\n            - python3\n", "            - /bin/sh\n            - -c\n            - exec /overlay/bin/infera-exec python3\n", "mentions infera-exec but does not run it"},
		{"port name too long", "            - name: http\n              containerPort: 8000", "            - name: http-metrics-port\n              containerPort: 8000", `port name "http-metrics-port": must be no more than 15 characters`},
		{"invalid label value", "        app: worker\n    spec:", "        app: worker!\n    spec:", `spec.template.metadata.labels: Invalid value: "worker!"`},
		{"service name that is no DNS label", "kind: Service\nmetadata:\n  name: worker", "kind: Service\nmetadata:\n  name: worker.v1", `metadata.name "worker.v1"`},
		{"memory request below the limit", "          ports:\n", "          resources:\n            requests: {memory: 1Gi}\n            limits: {memory: 2Gi}\n          ports:\n", "warn memory: requests.memory 1Gi is below limits.memory 2Gi"},
		{"memory request above the limit", "          ports:\n", "          resources:\n            requests: {memory: 3Gi}\n            limits: {memory: 2Gi}\n          ports:\n", "error memory: requests.memory 3Gi is above limits.memory 2Gi"},
		{"service links left on", "      enableServiceLinks: false\n", "", "warn service-links: enableServiceLinks is not false"},
		{"model on no volume", "            - name: models\n              mountPath: /models\n", "            - name: models\n              mountPath: /weights\n", "error model-volume: the model /models/m (--model) is on no volume mount"},
		{"mooncake prefill without its address", worker, worker + "            - --kv-transfer-config\n            - '{\"kv_connector\":\"MooncakeConnector\",\"kv_role\":\"kv_producer\"}'\n", "error advertise: --data-parallel-address not set (vLLM then uses 127.0.0.1)"},
		{"engine without the termination message policy", "          image: registry.example.com/rocm/vllm:v1\n          terminationMessagePolicy: FallbackToLogsOnError\n", "          image: registry.example.com/rocm/vllm:v1\n",
			"set terminationMessagePolicy: FallbackToLogsOnError"},
		{"installer without the termination message policy", "          args: [\"/overlay\"]\n          terminationMessagePolicy: FallbackToLogsOnError\n", "          args: [\"/overlay\"]\n",
			"set terminationMessagePolicy: FallbackToLogsOnError"},
		{"custom termination message path not given to infera-exec", "          terminationMessagePolicy: FallbackToLogsOnError\n          command:", "          terminationMessagePolicy: FallbackToLogsOnError\n          terminationMessagePath: /tmp/why\n          command:",
			"terminationMessagePath /tmp/why, but infera-exec writes /dev/termination-log: set INFERA_EXEC_TERMINATION_LOG=/tmp/why"},
		{"image without a tag", "image: registry.example.com/rocm/vllm:v1", "image: registry.example.com/rocm/vllm", "has no tag or digest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, base, tc.old, "the case must change the base")
			broken := strings.Replace(base, tc.old, tc.new, 1)
			problems, _ := checkFile(t, "broken.yaml", []byte(broken))
			if tc.want == "" {
				assert.Empty(t, problems)
				return
			}
			assert.True(t, containsAny(problems, tc.want), "want a problem containing %q, got:\n%s", tc.want, strings.Join(problems, "\n"))
		})
	}
}

// The image-volume wiring: the engine's payload is the overlay image
// mounted as a volume, and nothing else will do.
func TestImageVolume(t *testing.T) {
	iv := strings.Replace(base, "          emptyDir: {}\n", "          image:\n            reference: registry.example.com/infera/overlay:v1\n            pullPolicy: IfNotPresent\n", 1)
	iv = strings.Replace(iv, "      initContainers:\n        - name: overlay\n          image: registry.example.com/infera/overlay:v1\n          args: [\"/overlay\"]\n          terminationMessagePolicy: FallbackToLogsOnError\n          volumeMounts:\n            - name: overlay\n              mountPath: /overlay\n", "", 1)
	problems, stats := checkFile(t, "iv.yaml", []byte(iv))
	require.Empty(t, problems)
	assert.Equal(t, Stats{Engines: 1, ImageVols: 1}, stats)

	other := strings.Replace(iv, "reference: registry.example.com/infera/overlay:v1", "reference: registry.example.com/tools/busybox:1", 1)
	problems, _ = checkFile(t, "iv.yaml", []byte(other))
	assert.True(t, containsAny(problems, "not the overlay image"), strings.Join(problems, "\n"))

	typo := strings.Replace(iv, "            pullPolicy: IfNotPresent\n", "            pullpolicy: IfNotPresent\n", 1)
	problems, _ = checkFile(t, "iv.yaml", []byte(typo))
	assert.True(t, containsAny(problems, `unknown field "spec.template.spec.volumes[0].image.pullpolicy"`), strings.Join(problems, "\n"))
}

func TestExpand(t *testing.T) {
	vals := map[string]string{"POD_IP": "10.0.0.7"}
	for _, tc := range []struct{ in, out, undef string }{
		{"$(POD_IP)", "10.0.0.7", ""},
		{"--host=$(POD_IP):8998", "--host=10.0.0.7:8998", ""},
		{"$$(POD_IP)", "$(POD_IP)", ""},
		{"$(NODE)", "$(NODE)", "NODE"},
		{"cost $5", "cost $5", ""},
		{"$(unterminated", "$(unterminated", ""},
		{"$", "$", ""},
	} {
		out, undef := expand(tc.in, vals)
		assert.Equal(t, tc.out, out, tc.in)
		if tc.undef == "" {
			assert.Empty(t, undef, tc.in)
		} else {
			assert.Equal(t, []string{tc.undef}, undef, tc.in)
		}
	}
}

func TestOverlayImage(t *testing.T) {
	for ref, want := range map[string]bool{
		"REGISTRY/infera/overlay:OVERLAY_TAG":         true,
		"registry.example.com:5000/infera/overlay:v1": true,
		"infera/overlay@sha256:0123":                  true,
		"registry.example.com/infera/overlay-dev:v1":  false,
		"registry.example.com/other/overlay:v1":       false,
		"registry.example.com/rocm/vllm:v1":           false,
	} {
		assert.Equal(t, want, isOverlayImage(ref), ref)
	}
	assert.False(t, hasTagOrDigest("registry.example.com:5000/rocm/vllm"))
	assert.True(t, hasTagOrDigest("rocm/vllm@sha256:0123"))
}

func containsAny(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// A Job and a LeaderWorkerSet make pods too: the base's pod, under
// either, passes the same checks and fails them the same way.
func TestJobAndLeaderWorkerSet(t *testing.T) {
	pod := base[strings.Index(base, "  template:\n"):strings.Index(base, "---")]
	job := "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: worker\nspec:\n" + pod
	indent := func(s, by string) string {
		var b strings.Builder
		for _, l := range strings.SplitAfter(s, "\n") {
			if strings.TrimSpace(l) != "" {
				b.WriteString(by)
			}
			b.WriteString(l)
		}
		return b.String()
	}
	lws := "apiVersion: leaderworkerset.x-k8s.io/v1\nkind: LeaderWorkerSet\nmetadata:\n  name: worker\nspec:\n  leaderWorkerTemplate:\n    size: 2\n" +
		indent(strings.Replace(pod, "  template:\n", "  workerTemplate:\n", 1), "  ")
	for name, doc := range map[string]string{"job": job, "lws": lws} {
		t.Run(name, func(t *testing.T) {
			problems, stats := checkFile(t, name+".yaml", []byte(doc))
			assert.Empty(t, problems)
			assert.Equal(t, 1, stats.Engines)
			broken := strings.Replace(doc, "            - /models/m\n", "            - /elsewhere/m\n", 1)
			problems, _ = checkFile(t, name+".yaml", []byte(broken))
			assert.True(t, containsAny(problems, "error model-volume: the model /elsewhere/m (--model) is on no volume mount of this container"), strings.Join(problems, "\n"))
		})
	}
}
