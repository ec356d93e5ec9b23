package capability

import (
	"testing"

	"github.com/infera/infera-exec/internal/testsupport/jsoncheck"
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
		jsoncheck.RoundTrip(t, i, &c, appendJSONLoadCache, decodeJSONLoadCache)
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
	f.Fuzz(func(t *testing.T, data []byte) { jsoncheck.Stable(t, data, appendJSONLoadCache, decodeJSONLoadCache) })
}
