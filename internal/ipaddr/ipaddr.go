// Package ipaddr answers "which IP address does this text or these bytes
// name": parsing and formatting as net/netip does, for the preflight's
// advertise-address checks. It exists because importing net/netip costs
// every start about half a millisecond (its interning of zones sets up
// runtime cleanups at package init), and a start needs only this much.
// Tests hold it to net/netip's answers.
package ipaddr

import (
	"errors"
	"strconv"
)

// Addr is an IPv4 or IPv6 address, with an IPv6 zone. The zero Addr is
// not valid. Two Addrs are == when they name the same address (IPv4 and
// its IPv4-mapped IPv6 form are different Addrs, as in net/netip).
type Addr struct {
	ip   [16]byte // IPv4 in the last four, after the IPv4-mapped prefix
	kind uint8    // 0: invalid, 4 or 6
	zone string
}

var mappedPrefix = [12]byte{10: 0xff, 11: 0xff}

// From4 is the IPv4 address of four bytes.
func From4(b [4]byte) Addr {
	a := Addr{kind: 4}
	copy(a.ip[:12], mappedPrefix[:])
	copy(a.ip[12:], b[:])
	return a
}

// From16 is the IPv6 address of sixteen bytes (IPv4-mapped ones stay
// IPv6: see Unmap).
func From16(b [16]byte) Addr { return Addr{ip: b, kind: 6} }

// IsValid reports whether a is an address (not the zero Addr).
func (a Addr) IsValid() bool { return a.kind != 0 }

// Is4 reports whether a is an IPv4 address.
func (a Addr) Is4() bool { return a.kind == 4 }

// Is4In6 reports whether a is an IPv4-mapped IPv6 address.
func (a Addr) Is4In6() bool { return a.kind == 6 && [12]byte(a.ip[:12]) == mappedPrefix }

// Unmap is the IPv4 address of an IPv4-mapped IPv6 one (its zone
// dropped); any other a unchanged.
func (a Addr) Unmap() Addr {
	if a.Is4In6() {
		a.kind, a.zone = 4, ""
	}
	return a
}

// WithZone is a with the IPv6 zone z ("" removes it); IPv4 has none.
func (a Addr) WithZone(z string) Addr {
	if a.kind == 6 {
		a.zone = z
	}
	return a
}

// IsUnspecified reports whether a is 0.0.0.0 or :: (without a zone).
func (a Addr) IsUnspecified() bool {
	return a == From4([4]byte{}) || a == From16([16]byte{})
}

// IsLoopback reports whether a is in 127.0.0.0/8 or is ::1 (any zone);
// an IPv4-mapped address by its IPv4 one.
func (a Addr) IsLoopback() bool {
	a = a.Unmap()
	switch a.kind {
	case 4:
		return a.ip[12] == 127
	case 6:
		return a.ip == [16]byte{15: 1}
	}
	return false
}

// IsPrivate4 reports whether a is an IPv4 address of the private ranges
// of RFC 1918: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16.
func (a Addr) IsPrivate4() bool {
	if a.kind != 4 {
		return false
	}
	b0, b1 := a.ip[12], a.ip[13]
	return b0 == 10 || b0 == 172 && b1&0xf0 == 16 || b0 == 192 && b1 == 168
}

// String is a as net/netip writes it: dotted decimal, RFC 5952 for IPv6
// (the first longest run of two or more zero fields as "::"), an
// IPv4-mapped address as ::ffff:a.b.c.d, then %zone.
func (a Addr) String() string {
	switch a.kind {
	case 0:
		return "invalid IP"
	case 4:
		return string(appendV4(nil, a.ip[12:]))
	}
	var b []byte
	if a.Is4In6() {
		b = appendV4(append(b, "::ffff:"...), a.ip[12:])
	} else {
		// The longest run of zero fields, at least two long.
		start, n := -1, 1
		for i := 0; i < 8; {
			j := i
			for j < 8 && a.ip[2*j] == 0 && a.ip[2*j+1] == 0 {
				j++
			}
			if j-i > n {
				start, n = i, j-i
			}
			i = j + 1
		}
		for i := 0; i < 8; i++ {
			if i == start {
				b = append(b, "::"...)
				i += n - 1
				continue
			}
			if i > 0 && i != start+n {
				b = append(b, ':')
			}
			b = strconv.AppendUint(b, uint64(a.ip[2*i])<<8|uint64(a.ip[2*i+1]), 16)
		}
	}
	if a.zone != "" {
		b = append(append(b, '%'), a.zone...)
	}
	return string(b)
}

func appendV4(b []byte, v []byte) []byte {
	for i, x := range v[:4] {
		if i > 0 {
			b = append(b, '.')
		}
		b = strconv.AppendUint(b, uint64(x), 10)
	}
	return b
}

var errSyntax = errors.New("not an IP address")

// Parse reads an IPv4 address in dotted decimal (no leading zeros) or an
// IPv6 address (with "::", an embedded IPv4 address at its end and a
// %zone), accepting what net/netip.ParseAddr accepts.
func Parse(s string) (Addr, error) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.':
			b, ok := parse4(s)
			if !ok {
				return Addr{}, &ParseError{s}
			}
			return From4(b), nil
		case ':':
			return parse6(s)
		case '%':
			return Addr{}, &ParseError{s}
		}
	}
	return Addr{}, &ParseError{s}
}

// ParseError is text that is not an address.
type ParseError struct{ Text string }

func (e *ParseError) Error() string { return strconv.Quote(e.Text) + ": " + errSyntax.Error() }
func (e *ParseError) Unwrap() error { return errSyntax }

func parse4(s string) (b [4]byte, ok bool) {
	field, val, digits := 0, 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 {
				return b, false // a leading zero
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return b, false
			}
		case c == '.':
			if digits == 0 || field == 3 {
				return b, false
			}
			b[field] = byte(val)
			field, val, digits = field+1, 0, 0
		default:
			return b, false
		}
	}
	if field != 3 || digits == 0 {
		return b, false
	}
	b[3] = byte(val)
	return b, true
}

func parse6(in string) (Addr, error) {
	s, zone := in, ""
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			s, zone = s[:i], s[i+1:]
			if zone == "" {
				return Addr{}, &ParseError{in}
			}
			break
		}
	}
	var ip [16]byte
	ellipsis := -1 // where "::" stands, in bytes
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		ellipsis, s = 0, s[2:]
		if s == "" {
			return From16(ip).WithZone(zone), nil
		}
	}
	i := 0
	for i < 16 {
		off, acc := 0, 0
		for ; off < len(s); off++ {
			c := s[off]
			var d int
			switch {
			case c >= '0' && c <= '9':
				d = int(c - '0')
			case c >= 'a' && c <= 'f':
				d = int(c-'a') + 10
			case c >= 'A' && c <= 'F':
				d = int(c-'A') + 10
			default:
				goto end
			}
			if off > 3 {
				return Addr{}, &ParseError{in} // more than 4 hex digits
			}
			acc = acc<<4 | d
		}
	end:
		if off == 0 {
			return Addr{}, &ParseError{in}
		}
		if off < len(s) && s[off] == '.' {
			// An embedded IPv4 address, the last 4 bytes.
			if ellipsis < 0 && i != 12 || i+4 > 16 {
				return Addr{}, &ParseError{in}
			}
			v4, ok := parse4(s)
			if !ok {
				return Addr{}, &ParseError{in}
			}
			copy(ip[i:], v4[:])
			i += 4
			s = ""
			break
		}
		ip[i], ip[i+1] = byte(acc>>8), byte(acc)
		i += 2
		s = s[off:]
		if s == "" {
			break
		}
		if s[0] != ':' || len(s) == 1 {
			return Addr{}, &ParseError{in}
		}
		s = s[1:]
		if s[0] == ':' {
			if ellipsis >= 0 {
				return Addr{}, &ParseError{in} // a second "::"
			}
			ellipsis, s = i, s[1:]
			if s == "" {
				break
			}
		}
	}
	if s != "" {
		return Addr{}, &ParseError{in}
	}
	if i < 16 {
		if ellipsis < 0 {
			return Addr{}, &ParseError{in}
		}
		n := 16 - i
		copy(ip[ellipsis+n:], ip[ellipsis:i])
		clear(ip[ellipsis : ellipsis+n])
	} else if ellipsis >= 0 {
		return Addr{}, &ParseError{in} // "::" that stands for no field
	}
	return From16(ip).WithZone(zone), nil
}
