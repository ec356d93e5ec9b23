// Package jsoncheck holds generated JSON code to encoding/json's answers,
// for the tests of every package with a json_gen.go. Tests only.
package jsoncheck

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// Encoder and Decoder are the shapes of the generated functions.
type (
	Encoder[T any] func([]byte, *T) ([]byte, error)
	Decoder[T any] func([]byte, *T) error
)

// Encoding checks that enc writes what json.Marshal writes for v (value
// i of a run), and fails where it fails; refused says json.Marshal
// refused v.
func Encoding[T any](t testing.TB, i int, v *T, enc Encoder[T]) (refused bool) {
	t.Helper()
	_, refused = encoding(t, i, v, enc)
	return refused
}

// encoding is Encoding, also returning what was written.
func encoding[T any](t testing.TB, i int, v *T, enc Encoder[T]) ([]byte, bool) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	got, err := enc(nil, v)
	if wantErr != nil {
		require.Error(t, err, "value %d: encoding/json failed (%v), the generated encoder did not", i, wantErr)
		return nil, true
	}
	require.NoError(t, err, "value %d", i)
	require.Equal(t, string(want), string(got), "value %d: encoding", i)
	return got, false
}

// Decoding checks that dec reads data as json.Unmarshal does.
func Decoding[T any](t testing.TB, i int, data []byte, dec Decoder[T]) {
	t.Helper()
	var fromJSON, fromGen T
	require.NoError(t, json.Unmarshal(data, &fromJSON))
	require.NoError(t, dec(data, &fromGen), "value %d: %s", i, data)
	require.True(t, reflect.DeepEqual(fromJSON, fromGen), "value %d: decoding %s\njson.Unmarshal: %#v\ngenerated:      %#v", i, data, fromJSON, fromGen)
}

// RoundTrip is Encoding and then Decoding of what was written.
func RoundTrip[T any](t testing.TB, i int, v *T, enc Encoder[T], dec Decoder[T]) {
	t.Helper()
	if data, refused := encoding(t, i, v, enc); !refused {
		Decoding(t, i, data, dec)
	}
}

// Stable is the fuzz property of a decoder: whatever the bytes, it does
// not panic, and what it accepts encodes to bytes it accepts again, whose
// encoding is the same bytes (the round trip is then a fixed point).
func Stable[T any](t testing.TB, data []byte, enc Encoder[T], dec Decoder[T]) {
	t.Helper()
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
}
