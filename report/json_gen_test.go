package report

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/jsoncheck"
	"github.com/infera/infera-exec/internal/testsupport/randfill"
)

// The generated encoder writes what encoding/json writes, byte for byte,
// for reports with every field filled at random (nil and empty slices,
// maps and pointers, strings that need escaping, extreme integers, times,
// log attributes of every kind), and fails where it fails.
func TestGeneratedEncodingMatchesEncodingJSON(t *testing.T) {
	f := randfill.New(1)
	f.BadTimes = true
	failures := 0
	for i := range 3000 {
		var r Report
		f.Fill(&r)
		if jsoncheck.Encoding(t, i, &r, appendJSONReport) {
			failures++
		}
	}
	assert.NotZero(t, failures, "no value was refused: the error path went untested")
}

// The report file is what json.MarshalIndent wrote before, and a
// newline: for the realistic report and for random ones.
func TestMarshalIsMarshalIndent(t *testing.T) {
	check := func(r *Report) {
		t.Helper()
		want, err := json.MarshalIndent(redacted(r), "", "  ")
		if err != nil {
			_, err := Marshal(r)
			require.Error(t, err)
			return
		}
		got, err := Marshal(r)
		require.NoError(t, err)
		require.Equal(t, string(want)+"\n", string(got))
	}
	check(realisticReport())
	check(sampleReport())
	check(&Report{})
	f := randfill.New(2)
	for range 500 {
		var r Report
		f.Fill(&r)
		check(&r)
	}
}
