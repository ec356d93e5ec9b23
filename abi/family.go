package abi

import (
	"fmt"

	"github.com/infera/infera-exec/config"
)

// Family is the container's ABI family.
type Family struct {
	ROCm     ROCm   `json:"rocm"`
	Python   Python `json:"python"`
	Override string `json:"override,omitempty"` // INFERA_ABI_FAMILY, when it replaced detection
	// Detected is, with Override, what the container's HIP runtime and
	// interpreter say, as the family's name ("" when they could not say).
	Detected string `json:"detected,omitempty"`
}

// Name is rocmN-py3XX, or py3XX when the container has no ROCm.
func (f Family) Name() string {
	if !f.ROCm.Found {
		return f.Python.Tree()
	}
	return fmt.Sprintf("rocm%d-%s", f.ROCm.Major, f.Python.Tree())
}

// FromConfig is the family INFERA_ABI_FAMILY names, decided by it.
func FromConfig(c config.Family) Family {
	src := "INFERA_ABI_FAMILY=" + c.Raw
	f := Family{Override: c.Raw, ROCm: ROCm{Found: c.ROCm != 0, Major: c.ROCm, DecidedBy: src}}
	f.Python = Python{Major: c.PyMajor, Minor: c.PyMinor, DecidedBy: src}
	return f
}
