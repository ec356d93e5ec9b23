package capability

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/randfill"
)

// The load-verdict cache is written byte for byte as encoding/json
// writes it, and read back as json.Unmarshal reads the same bytes, for
// values filled at random.
func TestGeneratedJSONMatchesEncodingJSON(t *testing.T) {
	f := randfill.New(5)
	for i := range 3000 {
		var c loadCache
		f.Fill(&c)
		want, err := json.Marshal(&c)
		require.NoError(t, err)
		got, err := appendJSONLoadCache(nil, &c)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "value %d: encoding", i)
		var fromJSON, fromGen loadCache
		require.NoError(t, json.Unmarshal(got, &fromJSON))
		require.NoError(t, decodeJSONLoadCache(got, &fromGen), "value %d: %s", i, got)
		require.True(t, reflect.DeepEqual(fromJSON, fromGen), "value %d: decoding %s", i, got)
	}
}

// Whatever the bytes, decoding never panics, and what it accepts is
// stable: encoded and decoded again, it is the same.
func FuzzDecodeLoadCache(f *testing.F) {
	r := randfill.New(6)
	for range 8 {
		var c loadCache
		r.Fill(&c)
		b, err := appendJSONLoadCache(nil, &c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{``, `null`, `{}`, `{"consulted":{"/a":{"ino":1},"/a":{"dev":2}}}`, `{"verdict":{"failed":{"x":null,"y":[]}}}`,
		`{"index":{"mode":4294967296}}`, `{"version":1e3}`, `{"key":"\u00zz"}`, `{"verdict":{"checked":-0}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v loadCache
		if decodeJSONLoadCache(data, &v) != nil {
			return
		}
		b1, err := appendJSONLoadCache(nil, &v)
		if err != nil {
			t.Fatalf("accepted %q, cannot encode it: %v", data, err)
		}
		var v2 loadCache
		if err := decodeJSONLoadCache(b1, &v2); err != nil {
			t.Fatalf("accepted %q, rejects its encoding %q: %v", data, b1, err)
		}
		// v and v2 may differ ([] and omitempty's nil); from v2 on,
		// the round trip is a fixed point.
		b2, _ := appendJSONLoadCache(nil, &v2)
		if string(b1) != string(b2) {
			t.Fatalf("accepted %q: encodings differ\n%s\n%s", data, b1, b2)
		}
		var v3 loadCache
		if err := decodeJSONLoadCache(b2, &v3); err != nil || !reflect.DeepEqual(v2, v3) {
			t.Fatalf("accepted %q: decoded %#v, then %#v (%v)", data, v2, v3, err)
		}
	})
}
