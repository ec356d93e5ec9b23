package report_test

import (
	"io"
	"strings"
	"testing"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/preflight"
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

// TestPrepareTakesEveryStage: every stage's outcome gives its fields on
// a zero value, as Prepare asks of it, and the report encodes the same
// with the encoders Prepare built as without them.
func TestPrepareTakesEveryStage(t *testing.T) {
	r := realisticReport()
	before, err := Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	wait := Prepare(&abi.Outcome{}, &overlay.Outcome{}, &capability.Outcome{}, &launch.Outcome{}, &libionic.Outcome{}, &preflight.Outcome{}, &patches.Outcome{})
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	after, err := Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Fatal("the report encodes differently after Prepare")
	}
}

// panicky is a section whose Fields fails on its zero value.
type panicky struct{ m map[string]*int }

func (p panicky) Fields() []Field       { return []Field{{Key: "x", Value: *p.m["x"]}} }
func (p panicky) WriteText(w io.Writer) {}

// TestPrepareNeverFailsTheStart: a section that panics on its zero value
// is an error for wait, not a crash of the process Prepare runs in.
func TestPrepareNeverFailsTheStart(t *testing.T) {
	err := Prepare(&abi.Outcome{}, panicky{})()
	if err == nil || !strings.Contains(err.Error(), "preparing the report's encoders") {
		t.Fatalf("wait() = %v, want the recovered panic", err)
	}
}
