package patches

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches/patchdef"
)

// benchMinor is the CPython minor the benchmarks' runs know, as every
// start does (the ABI family's): without one the importer would look for
// extension modules of any CPython tag, by a glob and a regular
// expression per name, which no start does.
const benchMinor = 11

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
		for _, r := range applySet(set, loc, options{PyMinor: benchMinor}) {
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
	applySet(set, loc, options{PyMinor: benchMinor})
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range applySet(set, loc, options{DryRun: true, PyMinor: benchMinor}) {
			if r.Package == "vllm" && r.State != patchdef.Applied && r.State != patchdef.NotApplicable {
				b.Fatalf("%s: %s: %s", r.ID, r.State, r.Why)
			}
		}
	}
}

// scalingTree is n definitions, each editing a module of its own (about
// 34 KB, 600 lines, one anchor) of package demo.
func scalingTree(b *testing.B, n int) (map[string]string, *patchdef.Set, *Location) {
	b.Helper()
	site := b.TempDir()
	dir := filepath.Join(site, "demo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	files := map[string]string{}
	set := &patchdef.Set{}
	for i := range n {
		var src strings.Builder
		for l := range 600 {
			fmt.Fprintf(&src, "    value_%d = compute(%d, key=\"line %d of module %d\")\n", l, l, l, i)
			if l == 300 {
				fmt.Fprintf(&src, "def fixed_%d(x):\n    return x + %d\n", i, i)
			}
		}
		name := fmt.Sprintf("m%03d.py", i)
		p := filepath.Join(dir, name)
		files[p] = src.String()
		if err := os.WriteFile(p, []byte(files[p]), 0o644); err != nil {
			b.Fatal(err)
		}
		d := &patchdef.Definition{ID: fmt.Sprintf("demo-fix-%03d", i), Summary: "scaling", Package: "demo", Distribution: "demo",
			Edits: []patchdef.Edit{{File: name, Count: 1,
				Anchor:      fmt.Sprintf("def fixed_%d(x):\n    return x + %d\n", i, i),
				Replacement: fmt.Sprintf("def fixed_%d(x):\n    # infera-exec(demo-fix-%03d)\n    return x + %d + 1\n", i, i, i)}}}
		if err := d.Validate(); err != nil {
			b.Fatal(err)
		}
		set.Defs = append(set.Defs, d)
	}
	return files, set, &Location{Packages: map[string]Package{"demo": {Name: "demo", Found: true, Dir: dir, Dirs: []string{dir}, Version: "1.0"}}}
}

// BenchmarkScaling is the patch work for 1, 10 and 100 definitions, each
// with a file of its own: pending (planned, written, read back) and
// applied (planned only, a restart without a record). ns/def should stay
// flat: the work is linear in the number of definitions and files.
func BenchmarkScaling(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("pending/defs=%d", n), func(b *testing.B) {
			files, set, loc := scalingTree(b, n)
			for b.Loop() {
				b.StopTimer()
				for p, s := range files {
					if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				for _, r := range applySet(set, loc, options{PyMinor: benchMinor}) {
					if r.State != patchdef.Applied || r.Action != "applied" {
						b.Fatalf("%s: %s %s: %s", r.ID, r.State, r.Action, r.Why)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/def")
		})
		b.Run(fmt.Sprintf("applied/defs=%d", n), func(b *testing.B) {
			_, set, loc := scalingTree(b, n)
			applySet(set, loc, options{PyMinor: benchMinor})
			for b.Loop() {
				for _, r := range applySet(set, loc, options{DryRun: true, PyMinor: benchMinor}) {
					if r.State != patchdef.Applied {
						b.Fatalf("%s: %s: %s", r.ID, r.State, r.Why)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/def")
		})
	}
}
