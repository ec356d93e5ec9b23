package abi_test

import (
	"strings"
	"testing"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/config"
)

// parseFamily is INFERA_ABI_FAMILY as the pass reads it: config's grammar,
// then the family it names.
func parseFamily(s string) (abi.Family, error) {
	c, err := config.ParseFamily(s)
	if err != nil {
		return abi.Family{}, err
	}
	return abi.FromConfig(c), nil
}

func FuzzParseFamily(f *testing.F) {
	for _, s := range []string{
		"rocm7-py312", "rocm6-py310", "py311", "py39", "rocm7", "py3", "py211", "rocm7-py412",
		"ROCM7-PY312", "rocm-py312", "rocm7-py3.12", "rocm07-py3012", "rocm7-py312\n", "", "py3x",
		"rocm10-py314",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fam, err := parseFamily(s)
		if err != nil {
			if !strings.Contains(err.Error(), "INFERA_ABI_FAMILY=") {
				t.Fatalf("ParseFamily(%q): error does not name the variable: %v", s, err)
			}
			if fam.Override != "" || fam.ROCm.Found || fam.ROCm.Major != 0 || fam.Python.Major != 0 || fam.Python.Minor != 0 {
				t.Fatalf("ParseFamily(%q): error with a non-zero family %+v", s, fam)
			}
			return
		}
		if fam.Override != s {
			t.Fatalf("ParseFamily(%q).Override = %q", s, fam.Override)
		}
		if fam.Python.Major != 3 {
			t.Fatalf("ParseFamily(%q): Python major %d accepted", s, fam.Python.Major)
		}
		if fam.ROCm.Found != strings.HasPrefix(s, "rocm") {
			t.Fatalf("ParseFamily(%q): ROCm.Found = %v", s, fam.ROCm.Found)
		}
		if fam.ROCm.Major < 0 || fam.Python.Minor < 0 {
			t.Fatalf("ParseFamily(%q): negative version %+v", s, fam)
		}

		// Round trip: the family's name reads back as the same family, and
		// that name is canonical.
		name := fam.Name()
		again, err := parseFamily(name)
		if err != nil {
			t.Fatalf("ParseFamily(%q).Name() = %q does not parse: %v", s, name, err)
		}
		if again.ROCm.Found != fam.ROCm.Found || again.ROCm.Major != fam.ROCm.Major ||
			again.Python.Major != fam.Python.Major || again.Python.Minor != fam.Python.Minor {
			t.Fatalf("ParseFamily(%q) = %+v; its name %q parses to %+v", s, fam, name, again)
		}
		if again.Name() != name {
			t.Fatalf("name %q is not canonical: reparses to %q", name, again.Name())
		}
		if again.Python.Tree() != fam.Python.Tree() {
			t.Fatalf("tree %q != %q", again.Python.Tree(), fam.Python.Tree())
		}
	})
}
