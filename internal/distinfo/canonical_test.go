package distinfo

import (
	"regexp"
	"strings"
	"testing"
)

// Canonical against the PEP 503 expression it replaces.
func TestCanonicalMatchesPEP503(t *testing.T) {
	sep := regexp.MustCompile(`[-_.]+`)
	for _, s := range []string{"", "numpy", "Demo.Pkg", "demo_pkg", "a--b", "a-_.b", "-a-", "_", "...", "A.B_C-D", "Ünï_Cödé"} {
		if got, want := Canonical(s), strings.ToLower(sep.ReplaceAllString(s, "-")); got != want {
			t.Errorf("Canonical(%q) = %q, want %q", s, got, want)
		}
	}
}
