package ipaddr

import (
	"net/netip"
	"testing"
)

// same holds Parse to net/netip.ParseAddr: the same texts are addresses,
// and they read and print the same.
func same(t *testing.T, s string) {
	t.Helper()
	want, werr := netip.ParseAddr(s)
	got, err := Parse(s)
	if (err == nil) != (werr == nil) {
		t.Fatalf("Parse(%q): error %v, net/netip says %v", s, err, werr)
	}
	if err != nil {
		return
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"String", got.String(), want.String()},
		{"Is4", got.Is4(), want.Is4()},
		{"Is4In6", got.Is4In6(), want.Is4In6()},
		{"Unmap", got.Unmap().String(), want.Unmap().String()},
		{"IsLoopback", got.IsLoopback(), want.IsLoopback()},
		{"IsUnspecified", got.IsUnspecified(), want.IsUnspecified()},
		{"IsUnspecified of Unmap", got.Unmap().IsUnspecified(), want.Unmap().IsUnspecified()},
		{"WithZone", got.WithZone("").String(), want.WithZone("").String()},
		{"IsPrivate4", got.Unmap().IsPrivate4(), want.Unmap().Is4() && (netip.MustParsePrefix("10.0.0.0/8").Contains(want.Unmap()) ||
			netip.MustParsePrefix("172.16.0.0/12").Contains(want.Unmap()) || netip.MustParsePrefix("192.168.0.0/16").Contains(want.Unmap()))},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%q: %s = %v, net/netip says %v", s, c.what, c.got, c.want)
		}
	}
	if back, err := Parse(got.String()); err != nil || back != got {
		t.Errorf("%q: String %q reads back as %v (%v)", s, got.String(), back, err)
	}
}

var seeds = []string{
	"", "1.2.3.4", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", "1..2.3", "1.2.3.4%eth0",
	"127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "172.32.0.1", "192.168.1.1", "192.169.1.1", "11.0.0.1",
	"::", "::1", "::%eth0", "::1%lo", "1::", "1::2", "::ffff:1.2.3.4", "::ffff:10.0.0.1", "::ffff:127.0.0.1%z", "::1.2.3.4",
	"1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "1:0:0:2:0:0:0:3", "1:0:0:2:0:0:3:4",
	"fe80::1%eth0", "FE80::ABCD", "12345::", "1:::2", "1::2::3", ":1", "1:", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:1.2.3.4",
	"::ffff:1.2.3.04", "%eth0", "1.2.3.4%", "fe80::1%", "0:0:0:0:0:ffff:0102:0304", "2001:db8::ff00:42:8329", "x", "1.2.3.-4",
	"::ffff:0.0.0.0", "0.0.0.0.", "::1.2.3.4:5",
}

func TestParseAgreesWithNetip(t *testing.T) {
	for _, s := range seeds {
		same(t, s)
	}
}

func TestFromBytes(t *testing.T) {
	if got := From4([4]byte{10, 0, 0, 7}); got.String() != "10.0.0.7" || !got.IsPrivate4() {
		t.Errorf("From4: %v", got)
	}
	b := [16]byte{0: 0xfe, 1: 0x80, 15: 1}
	if got, want := From16(b).String(), netip.AddrFrom16(b).String(); got != want {
		t.Errorf("From16: %q, net/netip says %q", got, want)
	}
	m := [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 15: 9}
	if got, want := From16(m).Unmap().String(), netip.AddrFrom16(m).Unmap().String(); got != want {
		t.Errorf("From16 mapped: %q, net/netip says %q", got, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { same(t, s) })
}

// FuzzFrom16 holds formatting of any sixteen bytes to net/netip's.
func FuzzFrom16(f *testing.F) {
	f.Add([]byte{0xfe, 0x80, 15: 1})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) < 16 {
			return
		}
		b := [16]byte(raw[:16])
		if got, want := From16(b).String(), netip.AddrFrom16(b).String(); got != want {
			t.Fatalf("%x: %q, net/netip says %q", b, got, want)
		}
		if got, want := From16(b).Unmap().String(), netip.AddrFrom16(b).Unmap().String(); got != want {
			t.Fatalf("%x unmapped: %q, net/netip says %q", b, got, want)
		}
	})
}
