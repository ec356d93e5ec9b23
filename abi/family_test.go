package abi_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/abi"
)

func TestParseFamily(t *testing.T) {
	for _, tc := range []struct {
		in        string
		rocm      bool
		rocmMajor int
		minor     int
		name      string
	}{
		{in: "rocm7-py312", rocm: true, rocmMajor: 7, minor: 12, name: "rocm7-py312"},
		{in: "rocm6-py310", rocm: true, rocmMajor: 6, minor: 10, name: "rocm6-py310"},
		{in: "py311", minor: 11, name: "py311"},
		{in: "py39", minor: 9, name: "py39"},
		{in: "rocm10-py313", rocm: true, rocmMajor: 10, minor: 13, name: "rocm10-py313"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			f, err := parseFamily(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.in, f.Override)
			assert.Equal(t, tc.rocm, f.ROCm.Found)
			assert.Equal(t, tc.rocmMajor, f.ROCm.Major)
			assert.Equal(t, "INFERA_ABI_FAMILY="+tc.in, f.ROCm.DecidedBy)
			assert.Empty(t, f.ROCm.Searched, "nothing was searched")
			assert.Equal(t, 3, f.Python.Major)
			assert.Equal(t, tc.minor, f.Python.Minor)
			assert.Equal(t, "INFERA_ABI_FAMILY="+tc.in, f.Python.DecidedBy)
			assert.False(t, f.Python.Asked)
			assert.Equal(t, tc.name, f.Name(), "Name gives back what was parsed")
		})
	}
}

func TestParseFamilyRejects(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"", "expected rocmN-py3XX"},
		{"rocm7", "expected rocmN-py3XX"},
		{"rocm-py312", "expected rocmN-py3XX"},
		{"rocm7-py3", "expected rocmN-py3XX"},
		{"py3", "expected rocmN-py3XX"},
		{"py2", "expected rocmN-py3XX"},
		{"python312", "expected rocmN-py3XX"},
		{"rocm7_py312", "expected rocmN-py3XX"},
		{"rocm7-py3.12", "expected rocmN-py3XX"},
		{"ROCM7-PY312", "expected rocmN-py3XX"},
		{" rocm7-py312", "expected rocmN-py3XX"},
		{"rocm7-py312 ", "expected rocmN-py3XX"},
		{"rocm7-py312\n", "expected rocmN-py3XX"},
		{"rocm7-py312-extra", "expected rocmN-py3XX"},
		{"cuda12-py312", "expected rocmN-py3XX"},
		{"py27", "CPython 3 only"},
		{"rocm7-py27", "CPython 3 only"},
		{"py412", "CPython 3 only"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			f, err := parseFamily(tc.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "INFERA_ABI_FAMILY="+strconv.Quote(tc.in), "names the variable and quotes the value")
			assert.Equal(t, abi.Family{}, f)
		})
	}
}

func TestFamilyName(t *testing.T) {
	for _, tc := range []struct {
		f    abi.Family
		want string
	}{
		{abi.Family{ROCm: abi.ROCm{Found: true, Major: 7}, Python: abi.Python{Major: 3, Minor: 12}}, "rocm7-py312"},
		{abi.Family{ROCm: abi.ROCm{Found: true, Major: 10}, Python: abi.Python{Major: 3, Minor: 9}}, "rocm10-py39"},
		{abi.Family{Python: abi.Python{Major: 3, Minor: 11}}, "py311"},
		// Without ROCm the major is ignored even when set.
		{abi.Family{ROCm: abi.ROCm{Major: 7}, Python: abi.Python{Major: 3, Minor: 13}}, "py313"},
	} {
		assert.Equal(t, tc.want, tc.f.Name())
	}
}

func TestParseFamilyRejectsNonCanonical(t *testing.T) {
	for _, s := range []string{"rocm07-py312", "rocm7-py3012", "rocm99999999999999999999-py312", "rocm0-py312"} {
		_, err := parseFamily(s)
		assert.Error(t, err, s)
	}
}
