package preflight

import (
	"net"
	"testing"
)

// hostOfHostPort against net.SplitHostPort, which it stands in for.
func TestHostOfHostPortMatchesNet(t *testing.T) {
	for _, s := range []string{"", ":", ":80", "host:80", "host", "10.0.0.1:5000", "[::1]:80", "[::1]", "::1", "[::1]:", "[::1]x:80",
		"[a]:b:c", "a:b:c", "h[ost:80", "ho]st:80", "[h]:8]0", "[[h]]:80", "[fe80::1%eth0]:29500", "node-0.svc:29500"} {
		h, _, err := net.SplitHostPort(s)
		got, ok := hostOfHostPort(s)
		if ok != (err == nil) || (ok && got != h) {
			t.Errorf("hostOfHostPort(%q) = %q, %v; net.SplitHostPort: %q, %v", s, got, ok, h, err)
		}
	}
}

// RealInterfaces against package net on this machine's interfaces.
func TestRealInterfacesMatchesNet(t *testing.T) {
	got, err := RealInterfaces()
	if err != nil {
		t.Fatal(err)
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ifs) {
		t.Fatalf("RealInterfaces: %d interfaces, net: %d", len(got), len(ifs))
	}
	byName := map[string]net.Interface{}
	for _, ifi := range ifs {
		byName[ifi.Name] = ifi
	}
	for _, it := range got {
		ifi, ok := byName[it.Name]
		if !ok {
			t.Errorf("%s: not in net.Interfaces", it.Name)
			continue
		}
		if it.Up != (ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagRunning != 0) || it.Loopback != (ifi.Flags&net.FlagLoopback != 0) {
			t.Errorf("%s: up %v loopback %v; net flags %v", it.Name, it.Up, it.Loopback, ifi.Flags)
		}
		addrs, _ := ifi.Addrs()
		var want []string
		for _, a := range addrs {
			want = append(want, a.(*net.IPNet).IP.String())
		}
		if len(want) != len(it.Addrs) {
			t.Errorf("%s: addresses %q, net %q", it.Name, it.Addrs, want)
			continue
		}
		for i := range want {
			if want[i] != it.Addrs[i] {
				t.Errorf("%s: addresses %q, net %q", it.Name, it.Addrs, want)
			}
		}
	}
}
