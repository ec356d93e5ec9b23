package patches

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/randfill"
)

// The record and the probe cache are written byte for byte as
// encoding/json writes them, and read back as json.Unmarshal reads the
// same bytes, for values filled at random.
func TestGeneratedJSONMatchesEncodingJSON(t *testing.T) {
	f := randfill.New(3)
	for i := range 2000 {
		var rec record
		f.Fill(&rec)
		roundTrip(t, i, &rec, appendJSONRecord, decodeJSONRecord)
		var c cacheEntry
		f.Fill(&c)
		roundTrip(t, i, &c, appendJSONCacheEntry, decodeJSONCacheEntry)
	}
}

func roundTrip[T any](t *testing.T, i int, v *T, enc func([]byte, *T) ([]byte, error), dec func([]byte, *T) error) {
	t.Helper()
	want, err := json.Marshal(v)
	require.NoError(t, err)
	got, err := enc(nil, v)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "value %d: encoding", i)
	var fromJSON, fromGen T
	require.NoError(t, json.Unmarshal(got, &fromJSON))
	require.NoError(t, dec(got, &fromGen), "value %d: %s", i, got)
	require.True(t, reflect.DeepEqual(fromJSON, fromGen), "value %d: decoding %s\njson.Unmarshal: %#v\ngenerated:      %#v", i, got, fromJSON, fromGen)
}

// Whatever the bytes, decoding never panics, and what it accepts is
// stable: encoded and decoded again, it is the same.
func FuzzDecodeRecord(f *testing.F) {
	fuzzSeeds(f, func(r *randfill.Filler) ([]byte, error) {
		var rec record
		r.Fill(&rec)
		return appendJSONRecord(nil, &rec)
	})
	rec := benchRecord()
	b, _ := appendJSONRecord(nil, &rec)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzStable(t, data, appendJSONRecord, decodeJSONRecord) })
}

func FuzzDecodeCacheEntry(f *testing.F) {
	fuzzSeeds(f, func(r *randfill.Filler) ([]byte, error) {
		var c cacheEntry
		r.Fill(&c)
		return appendJSONCacheEntry(nil, &c)
	})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzStable(t, data, appendJSONCacheEntry, decodeJSONCacheEntry) })
}

func fuzzSeeds(f *testing.F, gen func(*randfill.Filler) ([]byte, error)) {
	r := randfill.New(4)
	for range 8 {
		b, err := gen(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{``, `null`, `{}`, `[]`, `{"version":1}`, `{"files":[{"id":{"dev":-1}}]}`, `{"results":[{"edits":[null,{"state":null}]}]}`,
		`{"location":{"packages":{"a":{},"a":null}}}`, `{"key":"\ud800\u0041\"x"}`, `{"x":[[[[{}]]]]} `, `{"version":"1"}x`, `{"version":"1",}`} {
		f.Add([]byte(s))
	}
}

func fuzzStable[T any](t *testing.T, data []byte, enc func([]byte, *T) ([]byte, error), dec func([]byte, *T) error) {
	var v T
	if dec(data, &v) != nil {
		return
	}
	b1, err := enc(nil, &v)
	if err != nil {
		t.Fatalf("accepted %q, cannot encode it: %v", data, err)
	}
	var v2 T
	if err := dec(b1, &v2); err != nil {
		t.Fatalf("accepted %q, rejects its encoding %q: %v", data, b1, err)
	}
	// v and v2 may differ ([] and omitempty's nil); from v2 on, the
	// round trip is a fixed point.
	b2, _ := enc(nil, &v2)
	if string(b1) != string(b2) {
		t.Fatalf("accepted %q: encodings differ\n%s\n%s", data, b1, b2)
	}
	var v3 T
	if err := dec(b2, &v3); err != nil || !reflect.DeepEqual(v2, v3) {
		t.Fatalf("accepted %q: decoded %#v, then %#v (%v)", data, v2, v3, err)
	}
}
