// Package randfill fills values of any Go type at random, reaching the
// corners a JSON encoder must get right: nil and empty slices and maps,
// nil pointers, strings that need escaping (HTML characters, U+2028,
// control bytes, invalid UTF-8), extreme integers, times. Tests only:
// the generated JSON code is checked against encoding/json with it.
package randfill

import (
	"math"
	"math/rand/v2"
	"reflect"
	"time"
)

// Strings are the pieces random strings are made of.
var Strings = []string{
	"", "a", "vllm", "<>&", "</script>", "\u2028", "\u2029", "\x00", "\x01", "\x1f", "\x7f", "\xff",
	"\xed\xa0\x80", "a\xc3", "\"", "\\", "/", "é", "日本語", "🙂", "\b\f\n\r\t", "key with spaces", "\ufffd",
}

var times = []time.Time{
	{},
	time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC),
	time.Date(1999, 12, 31, 23, 59, 59, 1000, time.FixedZone("X", -(7*3600+30*60))),
	time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
	time.Unix(0, 0),
}

// Filler makes random values from a seed.
type Filler struct {
	rng *rand.Rand
	// BadTimes: now and then a time encoding/json refuses (year 10000),
	// to check that errors are returned alike.
	BadTimes bool
}

// New is a filler with its own seed: the same seed, the same values.
func New(seed uint64) *Filler {
	return &Filler{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Fill sets *ptr to a random value.
func (f *Filler) Fill(ptr any) {
	f.value(reflect.ValueOf(ptr).Elem(), 0)
}

// String is a random string of up to three pieces.
func (f *Filler) String() string {
	s := ""
	for range f.rng.IntN(4) {
		s += Strings[f.rng.IntN(len(Strings))]
	}
	return s
}

var timeType = reflect.TypeFor[time.Time]()

func (f *Filler) value(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(f.String())
	case reflect.Bool:
		v.SetBool(f.rng.IntN(2) == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := v.Type().Bits()
		switch f.rng.IntN(5) {
		case 0:
			v.SetInt(0)
		case 1:
			v.SetInt(-1 << (bits - 1))
		case 2:
			v.SetInt(1<<(bits-1) - 1)
		default:
			v.SetInt(f.rng.Int64() >> (64 - bits))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		bits := v.Type().Bits()
		switch f.rng.IntN(4) {
		case 0:
			v.SetUint(0)
		case 1:
			v.SetUint(math.MaxUint64 >> (64 - bits))
		default:
			v.SetUint(f.rng.Uint64() >> (64 - bits))
		}
	case reflect.Float32, reflect.Float64:
		v.SetFloat(f.float())
	case reflect.Pointer:
		if depth > 6 || f.rng.IntN(3) == 0 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		f.value(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		switch n := f.rng.IntN(5); {
		case depth > 6 || n == 0:
			v.SetZero()
		case n == 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := range n - 1 {
				f.value(s.Index(i), depth+1)
			}
			v.Set(s)
		}
	case reflect.Array:
		for i := range v.Len() {
			f.value(v.Index(i), depth+1)
		}
	case reflect.Map:
		switch n := f.rng.IntN(5); {
		case depth > 6 || n == 0:
			v.SetZero()
		default:
			m := reflect.MakeMap(v.Type())
			for range n - 1 {
				k := reflect.New(v.Type().Key()).Elem()
				f.value(k, depth+1)
				e := reflect.New(v.Type().Elem()).Elem()
				f.value(e, depth+1)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Struct:
		if v.Type() == timeType {
			t := times[f.rng.IntN(len(times))]
			if f.rng.IntN(8) == 0 {
				t = time.Now() // with a monotonic reading
			}
			if f.BadTimes && f.rng.IntN(40) == 0 {
				t = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
			}
			v.Set(reflect.ValueOf(t))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.value(v.Field(i), depth+1)
			}
		}
	case reflect.Interface:
		if v.NumMethod() > 0 || f.rng.IntN(6) == 0 {
			v.SetZero()
			return
		}
		var x any
		switch f.rng.IntN(10) {
		case 0:
			x = f.String()
		case 1:
			x = f.rng.Int64()
		case 2:
			x = f.float()
		case 3:
			x = f.rng.IntN(2) == 1
		case 4:
			x = time.Duration(f.rng.Int64())
		case 5:
			x = []string{f.String()}
		case 6:
			x = times[f.rng.IntN(len(times))]
		case 7:
			x = map[string]any{f.String(): f.rng.Uint64()} // no fast path: encoding/json's
		case 8:
			x = float32(f.float())
		default:
			x = uint64(f.rng.Uint64())
		}
		v.Set(reflect.ValueOf(x))
	}
}

func (f *Filler) float() float64 {
	floats := []float64{0, 1, -1.5, 1e-7, 1e-6, 123456789.125, 1e20, 1e21, -2.5e-300, math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1}
	if f.rng.IntN(3) == 0 {
		return f.rng.NormFloat64() * math.Pow(10, float64(f.rng.IntN(50)-25))
	}
	return floats[f.rng.IntN(len(floats))]
}
