package abi

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"
)

// Family is the container's ABI family.
type Family struct {
	ROCm     ROCm   `json:"rocm"`
	Python   Python `json:"python"`
	Override string `json:"override,omitempty"` // INFERA_ABI_FAMILY, when it replaced detection
}

// Name is rocmN-py3XX, or py3XX when the container has no ROCm.
func (f Family) Name() string {
	if !f.ROCm.Found {
		return f.Python.Tree()
	}
	return fmt.Sprintf("rocm%d-%s", f.ROCm.Major, f.Python.Tree())
}

// No leading zeros and at most three digits, so the name round-trips and no
// number overflows.
var familyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(?:rocm([1-9]\d{0,2})-)?py(\d)([1-9]\d{0,2}|0)$`) })

// ParseFamily parses an INFERA_ABI_FAMILY value such as rocm7-py312 or py311.
func ParseFamily(s string) (Family, error) {
	m := familyRE().FindStringSubmatch(s)
	if m == nil {
		return Family{}, fmt.Errorf("INFERA_ABI_FAMILY=%q: expected rocmN-py3XX (e.g. rocm7-py312) or py3XX", s)
	}
	f := Family{Override: s}
	src := "INFERA_ABI_FAMILY=" + s
	if m[1] != "" {
		major, _ := strconv.Atoi(m[1])
		f.ROCm = ROCm{Found: true, Major: major, DecidedBy: src}
	} else {
		f.ROCm = ROCm{DecidedBy: src}
	}
	f.Python = Python{Major: atoi(m[2]), Minor: atoi(m[3]), DecidedBy: src}
	if f.Python.Major != 3 {
		return Family{}, fmt.Errorf("INFERA_ABI_FAMILY=%q: payload trees are built for CPython 3 only", s)
	}
	return f, nil
}
