package preflight

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/workerargs"
)

// BenchmarkRules is the cost the model rules add to a start whose model
// directory is local: config.json decoded, every built-in rule evaluated
// (the model directory itself is read by the model-dir check either way).
func BenchmarkRules(b *testing.B) {
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": {"model_type": "kimi_linear"}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("x"), 0o644)
	rs, err := LoadRules("")
	if err != nil {
		b.Fatal(err)
	}
	args := workerargs.Parse([]string{"python3", "-m", "infera.engine.vllm", "--model", dir, "--kv-cache-dtype", "auto"})
	view, err := inspectModel(dir)
	var acc fsprobe.Access
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		f := &Facts{Args: args, Env: map[string]string{}, Sysfs: "/sys", CgroupRoot: "/sys/fs/cgroup", Rules: rs}
		f.model = &modelAnswer{path: dir, view: view, acc: acc}
		if rs := runRules(f, nil); len(rs) != 5 {
			b.Fatal(rs)
		}
	}
}
