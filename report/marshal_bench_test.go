package report_test

import (
	"testing"

	. "github.com/infera/infera-exec/report"
)

// BenchmarkMarshal is the report file's encoding on every start.
func BenchmarkMarshal(b *testing.B) {
	r := realisticReport()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(r); err != nil {
			b.Fatal(err)
		}
	}
}
