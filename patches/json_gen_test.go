package patches

import (
	"testing"

	"github.com/infera/infera-exec/internal/testsupport/jsoncheck"
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
		jsoncheck.RoundTrip(t, i, &rec, appendJSONRecord, decodeJSONRecord)
		var c cacheEntry
		f.Fill(&c)
		jsoncheck.RoundTrip(t, i, &c, appendJSONCacheEntry, decodeJSONCacheEntry)
	}
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
	f.Fuzz(func(t *testing.T, data []byte) { jsoncheck.Stable(t, data, appendJSONRecord, decodeJSONRecord) })
}

func FuzzDecodeCacheEntry(f *testing.F) {
	fuzzSeeds(f, func(r *randfill.Filler) ([]byte, error) {
		var c cacheEntry
		r.Fill(&c)
		return appendJSONCacheEntry(nil, &c)
	})
	f.Fuzz(func(t *testing.T, data []byte) { jsoncheck.Stable(t, data, appendJSONCacheEntry, decodeJSONCacheEntry) })
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
