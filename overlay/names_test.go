package overlay

import (
	"regexp"
	"slices"
	"testing"
)

// The string matchers against the expressions they replace.
func TestNamesMatchTheirExpressions(t *testing.T) {
	py := regexp.MustCompile(`^py3\d+$`)
	native := regexp.MustCompile(`^rocm\d+-py3\d+$`)
	meta := regexp.MustCompile(`^(.+?)-([^-]+?)(?:-py\d.*)?\.(?:dist|egg)-info$`)
	digits := regexp.MustCompile(`\d+`)
	for _, s := range []string{"", "py3", "py312", "py3x", "py2", "py312 ", "rocm7-py312", "rocm-py312", "rocm7-py3", "rocm7py312", "rocm7-py312-x", "rocm10-py39",
		"numpy-2.3.5.dist-info", "demo_pkg-1.0-py3.12.egg-info", "foo-bar-1.0.dist-info", "foo-.dist-info", "-1.0.dist-info", "foo.dist-info",
		"a-b-c.dist-info", "a-1-py.dist-info", "a-1-py3.dist-info", "a-1-py3-x-y.egg-info", "a-1-pyx.egg-info", "a-b-1-py3.dist-info",
		"a\nb-1.dist-info", "a-1\n.dist-info", "a-1-py3\n.dist-info", "a-b\n-1.dist-info", "foo-1.0.dist-info.x", "x-.egg-info", "--1.dist-info",
		"a--1.dist-info", "a-1-2-py3.dist-info", "a7b22c333"} {
		if got, want := isPyTreeName(s), py.MatchString(s); got != want {
			t.Errorf("isPyTreeName(%q) = %v, expression %v", s, got, want)
		}
		if got, want := isNativeTreeName(s), native.MatchString(s); got != want {
			t.Errorf("isNativeTreeName(%q) = %v, expression %v", s, got, want)
		}
		m := meta.FindStringSubmatch(s)
		name, version, ok := metaDirName(s)
		if (m != nil) != ok || (ok && (m[1] != name || m[2] != version)) {
			t.Errorf("metaDirName(%q) = %q, %q, %v; expression: %q", s, name, version, ok, m)
		}
		if got, want := digitRuns(s), digits.FindAllString(s, -1); !slices.Equal(got, want) {
			t.Errorf("digitRuns(%q) = %q, expression %q", s, got, want)
		}
	}
}
