// Package jsonwire writes and reads JSON the way encoding/json does,
// without reflection: the runtime half of the encoders and decoders that
// internal/cmd/jsongen generates for the report and the state files read
// on every restart. Encoding is byte for byte encoding/json's (HTML-safe
// string escaping, its float format, MarshalJSON output compacted);
// decoding is strict JSON, and any malformed input is an error, never a
// panic.
package jsonwire

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string, escaped as encoding/json
// escapes it with HTML escaping on (json.Marshal's default): ", \ and
// control characters; <, > and & as \u003c, \u003e, \u0026; U+2028 and
// U+2029; each byte of invalid UTF-8 as \ufffd.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendFloat appends f as encoding/json formats a float of the given
// size (32 or 64): the shortest decimal that reads back, in exponent form
// only below 1e-6 or from 1e21 on, with a one-digit exponent unpadded.
// NaN and the infinities are errors, as they are for encoding/json.
func AppendFloat(dst []byte, f float64, bits int) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(f, 'g', -1, bits))
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

// AppendTime appends t as its MarshalJSON writes it. That output is a
// quoted RFC 3339 time: nothing in it to compact or escape.
func AppendTime(dst []byte, t time.Time) ([]byte, error) {
	b, err := t.MarshalJSON()
	if err != nil {
		return dst, fmt.Errorf("json: error calling MarshalJSON for type time.Time: %w", err)
	}
	return append(dst, b...), nil
}

// AppendMarshalJSON appends what m's MarshalJSON writes, checked and
// compacted, with <, >, &, U+2028 and U+2029 escaped, as encoding/json
// does with a Marshaler.
func AppendMarshalJSON(dst []byte, m json.Marshaler) ([]byte, error) {
	b, err := m.MarshalJSON()
	if err != nil {
		return dst, fmt.Errorf("json: error calling MarshalJSON for type %T: %w", m, err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return dst, fmt.Errorf("json: error calling MarshalJSON for type %T: %w", m, err)
	}
	out := bytes.NewBuffer(dst)
	json.HTMLEscape(out, compact.Bytes())
	return out.Bytes(), nil
}

// AppendMarshalText appends what m's MarshalText writes, as a JSON
// string.
func AppendMarshalText(dst []byte, m encoding.TextMarshaler) ([]byte, error) {
	b, err := m.MarshalText()
	if err != nil {
		return dst, fmt.Errorf("json: error calling MarshalText for type %T: %w", m, err)
	}
	return AppendString(dst, string(b)), nil
}

// AppendAny appends a dynamically typed value (a log record's attribute):
// the kinds slog produces are written here; any other type is handed to
// encoding/json.
func AppendAny(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return AppendString(dst, x), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case uint64:
		return strconv.AppendUint(dst, x, 10), nil
	case uint:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case uint32:
		return strconv.AppendUint(dst, uint64(x), 10), nil
	case float64:
		return AppendFloat(dst, x, 64)
	case float32:
		return AppendFloat(dst, float64(x), 32)
	case time.Duration:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case time.Time:
		return AppendTime(dst, x)
	case []string:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		for i, s := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, s)
		}
		return append(dst, ']'), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}
