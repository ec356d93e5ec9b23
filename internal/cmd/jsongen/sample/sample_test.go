package sample

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/jsoncheck"
	"github.com/infera/infera-exec/internal/testsupport/randfill"
)

// The generated encoder writes what encoding/json writes, and fails
// where it fails (a time past year 9999, MarshalJSON output that is not
// JSON, a float that is not finite).
func TestEncodingMatchesEncodingJSON(t *testing.T) {
	f := randfill.New(7)
	f.BadTimes = true
	failures := 0
	for i := range 5000 {
		var v All
		f.Fill(&v)
		if jsoncheck.Encoding(t, i, &v, appendJSONAll) {
			failures++
		}
	}
	assert.NotZero(t, failures)
	assert.Less(t, failures, 4000, "most values encode")
}

func TestDecodingMatchesEncodingJSON(t *testing.T) {
	f := randfill.New(8)
	for i := range 5000 {
		var v Decodable
		f.Fill(&v)
		jsoncheck.RoundTrip(t, i, &v, appendJSONDecodable, decodeJSONDecodable)
	}
}

// What encoding/json does with null, unknown keys and white space, the
// decoder does too; malformed input is an error.
func TestDecodingEdges(t *testing.T) {
	for _, in := range []string{
		`null`, ` { } `, `{"s":null,"b":null,"i":null,"l":null,"m":null,"p":null,"ps":null,"name":null}`,
		`{"unknown":{"deep":[1,2,{"x":null}]},"s":"\u003c\ud83d\ude00"}`, `{"l":[],"m":{},"items":[],"ptrs":[null,{}]}`,
		`{"mk":{"a":{"name":"x"},"a":{"count":2}}}`, `{"p":"x","p":"y"}`, `{"i8":-128,"u8":255,"u64":18446744073709551615}`,
	} {
		var want, got Decodable
		require.NoError(t, json.Unmarshal([]byte(in), &want), in)
		require.NoError(t, decodeJSONDecodable([]byte(in), &got), in)
		assert.True(t, reflect.DeepEqual(want, got), "%s\njson.Unmarshal %#v\ngenerated      %#v", in, want, got)
	}
	for _, in := range []string{``, `[]`, `{"s":1}`, `{"i8":128}`, `{"u8":-1}`, `{"i":1.5}`, `{"b":"true"}`, `{"l":{}}`, `{"s":"x"`, `{"s":"x"}}`,
		`{"s":"x",}`, `{"s" "x"}`, "{\"s\":\"\x01\"}", `{"unknown":[1,]}`} {
		var got Decodable
		assert.Error(t, decodeJSONDecodable([]byte(in), &got), in)
	}
}
