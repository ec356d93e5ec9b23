package digest

import (
	"strings"
	"testing"
)

// String and Bytes agree, across the buffer's boundary too.
func TestStringIsBytes(t *testing.T) {
	for _, n := range []int{0, 1, 16<<10 - 1, 16 << 10, 16<<10 + 1, 100_000} {
		s := strings.Repeat("abcdefghij", n/10+1)[:n]
		if got, want := String(s), Bytes([]byte(s)); got != want {
			t.Errorf("%d bytes: String %s, Bytes %s", n, got, want)
		}
	}
	if got := String(""); got != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("String(\"\") = %s", got)
	}
}
