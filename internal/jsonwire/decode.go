package jsonwire

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of values skipped (unknown keys), as
// encoding/json bounds it: a deep input is an error, not a deep stack.
const maxDepth = 10000

// Reader reads one JSON value. The first error sticks: every later call
// is a no-op returning zero values, so generated decoders check once, at
// Finish.
type Reader struct {
	data    []byte
	pos     int
	err     error
	scratch []byte
}

// NewReader reads data.
func NewReader(data []byte) *Reader { return &Reader{data: data} }

// Err is the first error met, if any.
func (r *Reader) Err() error { return r.err }

// Finish checks that nothing but white space follows the value and
// returns the first error met.
func (r *Reader) Finish() error {
	r.ws()
	if r.err == nil && r.pos < len(r.data) {
		r.fail("data after the top-level value")
	}
	return r.err
}

func (r *Reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("json: offset %d: %s", r.pos, fmt.Sprintf(format, args...))
	}
}

func (r *Reader) ws() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// peek is the next byte after white space; 0 at the end or after an
// error.
func (r *Reader) peek() byte {
	if r.err != nil {
		return 0
	}
	r.ws()
	if r.pos >= len(r.data) {
		return 0
	}
	return r.data[r.pos]
}

func (r *Reader) expect(c byte) bool {
	if r.peek() != c {
		if r.err == nil {
			if r.pos >= len(r.data) {
				r.fail("unexpected end of input, want %q", c)
			} else {
				r.fail("unexpected %q, want %q", r.data[r.pos], c)
			}
		}
		return false
	}
	r.pos++
	return true
}

func (r *Reader) literal(lit string) bool {
	if r.err != nil {
		return false
	}
	if len(r.data)-r.pos < len(lit) || string(r.data[r.pos:r.pos+len(lit)]) != lit {
		r.fail("invalid literal, want %s", lit)
		return false
	}
	r.pos += len(lit)
	return true
}

// Null consumes a null and reports whether there was one. encoding/json
// leaves a string, number, bool or struct alone on null and sets a
// pointer, slice or map to nil; generated decoders do the same.
func (r *Reader) Null() bool {
	if r.peek() != 'n' {
		return false
	}
	return r.literal("null")
}

// BeginObject consumes '{' and reports whether a member follows (false
// for {} and on error). Loop with Next('}').
func (r *Reader) BeginObject() bool {
	if !r.expect('{') {
		return false
	}
	if r.peek() == '}' {
		r.pos++
		return false
	}
	return r.err == nil
}

// BeginArray consumes '[' and reports whether an element follows (false
// for [] and on error). Loop with Next(']').
func (r *Reader) BeginArray() bool {
	if !r.expect('[') {
		return false
	}
	if r.peek() == ']' {
		r.pos++
		return false
	}
	return r.err == nil
}

// Next consumes the separator after a member or element: ',' (another
// follows: true) or end (the container ends: false).
func (r *Reader) Next(end byte) bool {
	switch r.peek() {
	case ',':
		r.pos++
		return true
	case end:
		r.pos++
		return false
	}
	r.expect(end)
	return false
}

// Key reads an object member's name and the ':' after it. The bytes are
// valid until the next call.
func (r *Reader) Key() []byte {
	k := r.str()
	r.expect(':')
	return k
}

// String reads a string.
func (r *Reader) String() string { return string(r.str()) }

// str reads a string: a slice of the input when it holds no escape and
// only valid UTF-8, else unescaped into scratch, invalid UTF-8 and lone
// surrogates replaced by U+FFFD as encoding/json replaces them.
func (r *Reader) str() []byte {
	if !r.expect('"') {
		return nil
	}
	start := r.pos
	for i := start; i < len(r.data); {
		c := r.data[i]
		switch {
		case c == '"':
			r.pos = i + 1
			return r.data[start:i]
		case c == '\\' || c >= utf8.RuneSelf:
			r.pos = i
			return r.strSlow(start)
		case c < 0x20:
			r.pos = i
			r.fail("control character %#x in string", c)
			return nil
		}
		i++
	}
	r.pos = len(r.data)
	r.fail("unterminated string")
	return nil
}

func (r *Reader) strSlow(start int) []byte {
	b := append(r.scratch[:0], r.data[start:r.pos]...)
	defer func() { r.scratch = b[:0] }()
	for r.pos < len(r.data) {
		c := r.data[r.pos]
		switch {
		case c == '"':
			r.pos++
			return b
		case c < 0x20:
			r.fail("control character %#x in string", c)
			return nil
		case c == '\\':
			if r.pos+1 >= len(r.data) {
				r.pos = len(r.data)
				r.fail("unterminated string")
				return nil
			}
			e := r.data[r.pos+1]
			r.pos += 2
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr, ok := r.hex4()
				if !ok {
					return nil
				}
				if utf16.IsSurrogate(rr) {
					// A pair, else the first half alone is U+FFFD and what
					// follows is read on its own.
					if r.pos+1 < len(r.data) && r.data[r.pos] == '\\' && r.data[r.pos+1] == 'u' {
						save := r.pos
						r.pos += 2
						rr2, ok := r.hex4()
						if !ok {
							return nil
						}
						if dec := utf16.DecodeRune(rr, rr2); dec != utf8.RuneError {
							b = utf8.AppendRune(b, dec)
							continue
						}
						r.pos = save
					}
					rr = utf8.RuneError
				}
				b = utf8.AppendRune(b, rr)
			default:
				r.pos -= 2
				r.fail("invalid escape \\%c", e)
				return nil
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			r.pos++
		default:
			rr, size := utf8.DecodeRune(r.data[r.pos:])
			if rr == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, r.data[r.pos:r.pos+size]...)
			}
			r.pos += size
		}
	}
	r.fail("unterminated string")
	return nil
}

func (r *Reader) hex4() (rune, bool) {
	if len(r.data)-r.pos < 4 {
		r.pos = len(r.data)
		r.fail("short \\u escape")
		return 0, false
	}
	var v rune
	for _, c := range r.data[r.pos : r.pos+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			r.fail("invalid \\u escape")
			return 0, false
		}
		v = v<<4 | rune(c)
	}
	r.pos += 4
	return v, true
}

// number reads a JSON number and reports whether it is an integer (no
// fraction, no exponent).
func (r *Reader) number() (lit []byte, integer bool) {
	if r.peek() == 0 {
		r.fail("unexpected end of input, want a number")
		return nil, false
	}
	d := r.data
	start, i := r.pos, r.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	default:
		r.fail("invalid number")
		return nil, false
	}
	integer = true
	if i < len(d) && d[i] == '.' {
		integer = false
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			r.pos = i
			r.fail("invalid number")
			return nil, false
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		integer = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			r.pos = i
			r.fail("invalid number")
			return nil, false
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	r.pos = i
	return d[start:i], integer
}

// integer reads a number that must be written as an integer. The literal
// stays bytes: converted where it is parsed, string(lit) does not escape
// and costs no allocation per number.
func (r *Reader) integer() ([]byte, bool) {
	lit, integer := r.number()
	if r.err != nil {
		return nil, false
	}
	if !integer {
		r.fail("number %s is not an integer", lit)
		return nil, false
	}
	return lit, true
}

// Int reads an integer that fits bits (0: int's size).
func (r *Reader) Int(bits int) int64 {
	lit, ok := r.integer()
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(string(lit), 10, bits)
	if err != nil {
		r.fail("number %s does not fit", lit)
		return 0
	}
	return v
}

// Uint reads a non-negative integer that fits bits (0: uint's size).
func (r *Reader) Uint(bits int) uint64 {
	lit, ok := r.integer()
	if !ok {
		return 0
	}
	v, err := strconv.ParseUint(string(lit), 10, bits)
	if err != nil {
		r.fail("number %s does not fit an unsigned integer", lit)
		return 0
	}
	return v
}

// Bool reads true or false.
func (r *Reader) Bool() bool {
	switch r.peek() {
	case 't':
		return r.literal("true")
	case 'f':
		r.literal("false")
		return false
	}
	if r.err == nil {
		r.fail("want true or false")
	}
	return false
}

// Skip reads any value and drops it (an unknown key's).
func (r *Reader) Skip() { r.skip(0) }

func (r *Reader) skip(depth int) {
	if depth > maxDepth {
		r.fail("nested too deeply")
		return
	}
	switch r.peek() {
	case '{':
		for more := r.BeginObject(); more; more = r.Next('}') {
			r.str()
			r.expect(':')
			r.skip(depth + 1)
		}
	case '[':
		for more := r.BeginArray(); more; more = r.Next(']') {
			r.skip(depth + 1)
		}
	case '"':
		r.str()
	case 't':
		r.literal("true")
	case 'f':
		r.literal("false")
	case 'n':
		r.literal("null")
	case 0:
		if r.err == nil {
			r.fail("unexpected end of input, want a value")
		}
	default:
		r.number()
	}
}
