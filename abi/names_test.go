package abi

import (
	"regexp"
	"slices"
	"testing"
)

// The string matchers against the expressions they replace.
func TestNamesMatchTheirExpressions(t *testing.T) {
	hip := regexp.MustCompile(`^libamdhip64\.so\.(\d+)(?:\.|$)`)
	py := regexp.MustCompile(`^python(\d+)\.(\d+)$`)
	digits := regexp.MustCompile(`\d+`)
	for _, s := range []string{"", "libamdhip64.so", "libamdhip64.so.", "libamdhip64.so.7", "libamdhip64.so.7.1.70100",
		"libamdhip64.so.7x", "libamdhip64.so.x7", "libamdhip64.so.10.", "xlibamdhip64.so.7", "libamdhip64.so.٣",
		"python3.12", "python3", "python3.", "python.12", "python3.12t", "python3.12.1", "python10.0", "pythonx3.1", "3.12",
		"a1b22c333", "7.1.70100", "..."} {
		m := hip.FindStringSubmatch(s)
		major, ok := hipSonameMajor(s)
		if (m != nil) != ok || (ok && m[1] != major) {
			t.Errorf("hipSonameMajor(%q) = %q, %v; expression: %q", s, major, ok, m)
		}
		m = py.FindStringSubmatch(s)
		maj, min, ok := pythonNameVersion(s)
		if (m != nil) != ok || (ok && (m[1] != maj || m[2] != min)) {
			t.Errorf("pythonNameVersion(%q) = %q, %q, %v; expression: %q", s, maj, min, ok, m)
		}
		if got, want := digitRuns(s), digits.FindAllString(s, -1); !slices.Equal(got, want) {
			t.Errorf("digitRuns(%q) = %q, expression: %q", s, got, want)
		}
	}
}
