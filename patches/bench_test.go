package patches

import (
	"testing"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches/patchdef"
)

// benchEngine is the real-sized vLLM install of `make bench` (see
// fixture.EngineInstall), located offline, with the built-in set.
func benchEngine(b *testing.B) (string, map[string][]byte, *patchdef.Set, *Location) {
	b.Helper()
	site := b.TempDir()
	targets, err := fixture.EngineInstall("testdata/trees/vllm-pending/site-packages", site)
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
	loc, err := LocateOffline(site, set.Packages())
	if err != nil {
		b.Fatal(err)
	}
	return site, targets, set, loc
}

// BenchmarkApplyPending is a first start's patch work: every patch
// pending, each file read, evaluated, written crash-safely and read back.
func BenchmarkApplyPending(b *testing.B) {
	site, targets, set, loc := benchEngine(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if err := fixture.RestoreFiles(site, targets); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, r := range applySet(set, loc, options{}) {
			if r.Action == "failed" || (r.Package == "vllm" && r.State != patchdef.Applied && r.State != patchdef.NotApplicable) {
				b.Fatalf("%s: %s %s: %s", r.ID, r.State, r.Action, r.Why)
			}
		}
	}
}

// BenchmarkEvaluateApplied is a restart without a record: every patch
// already applied, each file read and evaluated, nothing written.
func BenchmarkEvaluateApplied(b *testing.B) {
	_, _, set, loc := benchEngine(b)
	applySet(set, loc, options{})
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range applySet(set, loc, options{DryRun: true}) {
			if r.Package == "vllm" && r.State != patchdef.Applied && r.State != patchdef.NotApplicable {
				b.Fatalf("%s: %s: %s", r.ID, r.State, r.Why)
			}
		}
	}
}
