package jsonwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var stringCases = []string{
	"", "plain", "<>&", "</script>", "\u2028\u2029", "\x00\x01\x1f\x7f", "\xff", "\xed\xa0\x80", "a\xc3", `"\/`,
	"\b\f\n\r\t", "é日本語🙂", "\ufffd", "\xf4\x90\x80\x80",
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	cases := append([]string(nil), stringCases...)
	for c := range 256 {
		cases = append(cases, string([]byte{byte(c)}), "x"+string([]byte{byte(c)})+"y")
	}
	for r := rune(0); r < 0x3000; r++ {
		cases = append(cases, string(r))
	}
	for _, s := range cases {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(AppendString(nil, s)), "%q", s)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range stringCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, encoding/json %s", s, got, want)
		}
	})
}

func TestAppendFloatMatchesEncodingJSON(t *testing.T) {
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1.5, 0.1, 1e-7, 1e-6, 9.99999e-7, 123456789.125, 1e20, 1e21, 1.5e300, -2.5e-300,
		math.MaxFloat64, math.SmallestNonzeroFloat64, math.MaxFloat32, 1e-45, 3.4e38} {
		want, err := json.Marshal(f)
		require.NoError(t, err)
		got, err := AppendFloat(nil, f, 64)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%g", f)
		want, err = json.Marshal(float32(f))
		if err != nil {
			_, err := AppendFloat(nil, float64(float32(f)), 32)
			assert.Error(t, err, "%g as float32", f)
			continue
		}
		got, err = AppendFloat(nil, float64(float32(f)), 32)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%g as float32", f)
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := AppendFloat(nil, f, 64)
		assert.Error(t, err)
	}
}

type upper string

func (u upper) MarshalJSON() ([]byte, error) { return []byte(` { "u" : "` + string(u) + `" } `), nil }

type text int

func (x text) MarshalText() ([]byte, error) {
	if x < 0 {
		return nil, errors.New("negative")
	}
	return []byte("<" + string(rune('a'+x)) + ">\u2028"), nil
}

func TestAppendAnyMatchesEncodingJSON(t *testing.T) {
	for _, v := range []any{nil, "<s>", true, 1, int64(-1 << 63), int32(7), uint64(math.MaxUint64), uint(3), uint32(4), 0.5, float32(0.1), time.Second,
		time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("", 3600)), []string{"a", "<"}, []string(nil), map[string]any{"b": 1, "a": []int{2}},
		upper("x&y"), text(2), struct{ A int }{1}} {
		want, err := json.Marshal(v)
		require.NoError(t, err)
		got, err := AppendAny(nil, v)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%#v", v)
	}
	_, err := AppendAny(nil, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
	assert.Error(t, err)
	_, err = AppendAny(nil, math.NaN())
	assert.Error(t, err)
}

func TestAppendMarshalersMatchEncodingJSON(t *testing.T) {
	want, _ := json.Marshal(upper("<&>"))
	got, err := AppendMarshalJSON(nil, upper("<&>"))
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
	_, err = AppendMarshalJSON(nil, upper(`"`))
	assert.Error(t, err, "invalid JSON from MarshalJSON")

	want, _ = json.Marshal(text(3))
	got, err = AppendMarshalText(nil, text(3))
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
	_, err = AppendMarshalText(nil, text(-1))
	assert.Error(t, err)
}

// The reader accepts exactly what encoding/json accepts as one value.
func FuzzReaderSkip(f *testing.F) {
	for _, s := range []string{``, ` `, `null`, `nul`, `true`, `truex`, `-0`, `01`, `1.`, `1e`, `1E+5`, `-`, `"\u00e9"`, `"\ud800"`, `"\x"`, "\"\x01\"",
		`[1,2,]`, `[,]`, `{"a":1,}`, `{"a" 1}`, `{1:2}`, `[[[[]]]]`, `{"a":[{"b":null}]} `, `"` + "\xff" + `"`, `[1 2]`, `{} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(data)
		r.Skip()
		err := r.Finish()
		if valid := json.Valid(data); valid != (err == nil) {
			t.Fatalf("%q: encoding/json valid %v, reader error %v", data, valid, err)
		}
	})
}

// A string reads as json.Unmarshal reads it: escapes, surrogate pairs,
// lone surrogates and invalid UTF-8 as U+FFFD.
func FuzzReaderString(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud83d\ude00"`, `"\ud800\u0041"`, `"\udc00"`, `"\ud800\ud800"`, `"\/\b\f\n\r\t\"\\"`, "\"\xff\xed\xa0\x80\"", `"\u0000"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want string
		wantErr := json.Unmarshal(data, &want)
		r := NewReader(data)
		got := r.String()
		err := r.Finish()
		if (wantErr == nil) != (err == nil) {
			t.Fatalf("%q: encoding/json error %v, reader error %v", data, wantErr, err)
		}
		if err == nil && got != want {
			t.Fatalf("%q: got %q, encoding/json %q", data, got, want)
		}
		if err == nil && !utf8.ValidString(got) {
			t.Fatalf("%q: invalid UTF-8 %q", data, got)
		}
	})
}

func TestReaderIntegers(t *testing.T) {
	for _, c := range []struct {
		in   string
		bits int
		want int64
		ok   bool
	}{
		{"127", 8, 127, true}, {"128", 8, 0, false}, {"-128", 8, -128, true}, {"-0", 64, 0, true},
		{"9223372036854775807", 64, math.MaxInt64, true}, {"9223372036854775808", 64, 0, false},
		{"1.0", 64, 0, false}, {"1e3", 64, 0, false}, {"+1", 64, 0, false}, {"01", 64, 0, false}, {`"1"`, 64, 0, false},
	} {
		r := NewReader([]byte(c.in))
		got := r.Int(c.bits)
		err := r.Finish()
		assert.Equal(t, c.ok, err == nil, "%s: %v", c.in, err)
		assert.Equal(t, c.want, got, c.in)
	}
	r := NewReader([]byte("18446744073709551615"))
	assert.Equal(t, uint64(math.MaxUint64), r.Uint(64))
	assert.NoError(t, r.Finish())
	r = NewReader([]byte("-1"))
	r.Uint(64)
	assert.Error(t, r.Finish())
	r = NewReader([]byte("4294967296"))
	r.Uint(32)
	assert.Error(t, r.Finish())
}

// AppendIndent lays out compact JSON as json.Indent does.
func FuzzAppendIndent(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[],"b":{},"c":[1,{"d":"x\"y,{"}]}`, `"s"`, `[[[]],[{}]]`, `{"k:":"v\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var compact bytes.Buffer
		if json.Compact(&compact, data) != nil {
			return
		}
		var want bytes.Buffer
		require.NoError(t, json.Indent(&want, compact.Bytes(), "", "  "))
		if got := AppendIndent(nil, compact.Bytes(), "  "); string(got) != want.String() {
			t.Fatalf("%q: got\n%s\njson.Indent\n%s", compact.Bytes(), got, want.String())
		}
	})
}
