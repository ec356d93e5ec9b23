package plan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches/patchdef"
)

// BenchmarkFindNeedles compares, on the largest module of the bench
// install (355 KB), the one pass over its lines for every string the
// built-in definitions look for with strings.Count per string.
func BenchmarkFindNeedles(b *testing.B) {
	site := b.TempDir()
	targets, err := fixture.EngineInstall("../testdata/trees/vllm-pending/site-packages", site)
	if err != nil {
		b.Fatal(err)
	}
	defs, err := patchdef.Builtin()
	if err != nil {
		b.Fatal(err)
	}
	set, err := patchdef.Merge(defs, nil)
	if err != nil {
		b.Fatal(err)
	}
	var content string
	for rel := range targets {
		if strings.HasSuffix(rel, "gpu_model_runner.py") {
			data, err := os.ReadFile(filepath.Join(site, rel))
			if err != nil {
				b.Fatal(err)
			}
			content = string(data)
		}
	}
	if len(content) < 100<<10 {
		b.Fatalf("gpu_model_runner.py not found or small (%d bytes)", len(content))
	}
	nd := needlesOf(set)
	var all []string
	for _, xs := range nd.byKey {
		for _, x := range xs {
			all = append(all, x.s)
		}
	}
	b.Logf("%d needles with a complete line", len(all))
	b.Run("one-pass", func(b *testing.B) {
		for b.Loop() {
			tx := newText(content, nd)
			for _, s := range all {
				tx.count(s)
			}
		}
	})
	b.Run("strings.Count", func(b *testing.B) {
		for b.Loop() {
			for _, s := range all {
				strings.Count(content, s)
			}
		}
	})
}
