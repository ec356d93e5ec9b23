package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRequirement(t *testing.T) {
	tests := []struct {
		raw   string
		all   bool
		names []string
	}{
		{raw: "1", all: true},
		{raw: "true", all: true},
		{raw: "TRUE", all: true},
		{raw: "True", all: true},
		{raw: "all", all: true},
		{raw: "ALL", all: true},
		{raw: " all ", all: true},
		{raw: ""},
		{raw: "  "},
		{raw: "0"},
		{raw: "false"},
		{raw: "FALSE"},
		{raw: "none"},
		{raw: "None"},
		{raw: ","},
		{raw: "mooncake", names: []string{"mooncake"}},
		{raw: "mooncake,hipfile", names: []string{"hipfile", "mooncake"}},
		{raw: "mooncake hipfile", names: []string{"hipfile", "mooncake"}},
		{raw: " mooncake , hipfile ", names: []string{"hipfile", "mooncake"}},
		{raw: "mooncake,,hipfile,", names: []string{"hipfile", "mooncake"}},
		{raw: "mooncake\thipfile", names: []string{"hipfile", "mooncake"}},
		{raw: "MoonCake,HIPFILE", names: []string{"hipfile", "mooncake"}},
		{raw: "mooncake,mooncake", names: []string{"mooncake"}},
		{raw: "ais", names: []string{"ais"}},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			r, err := ParseRequirement(tt.raw)
			require.NoError(t, err)
			assert.Equal(t, tt.raw, r.Raw)
			assert.Equal(t, tt.all, r.All)
			if tt.names == nil {
				assert.Empty(t, r.Names)
			} else {
				assert.Equal(t, tt.names, r.Names)
			}
			assert.Equal(t, !tt.all && len(tt.names) == 0, r.None())
		})
	}
}

func TestParseRequirementErrors(t *testing.T) {
	tests := []struct {
		raw, bad string
	}{
		{"mooncake;rm -rf", "mooncake;rm"},
		{"mooncake,$(reboot)", "$(reboot)"},
		{"-rf", "-rf"},
		{"yes", ""},
		{"mooncake/hipfile", "mooncake/hipfile"},
		{"mooncake\nhipfile", "mooncake\nhipfile"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			r, err := ParseRequirement(tt.raw)
			if tt.bad == "" {
				// "yes" is a switch value: on, the tree and all it declares.
				require.NoError(t, err)
				assert.True(t, r.All)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "INFERA_REQUIRE_NATIVE="+quote(tt.raw), "names the value")
			assert.Contains(t, err.Error(), quote(tt.bad)+" is not a capability name", "names the bad word")
			assert.Contains(t, err.Error(), `"mooncake,hipfile"`, "shows an example")
			assert.Equal(t, Requirement{}, r)
		})
	}
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(s, "\n", `\n`) + `"`
}

func TestRequirementString(t *testing.T) {
	assert.Equal(t, "the native tree and all it declares", Requirement{All: true}.String())
	assert.Equal(t, "nothing", Requirement{}.String())
	assert.Equal(t, "hipfile mooncake", Requirement{Names: []string{"hipfile", "mooncake"}}.String())
}

func FuzzParseRequirement(f *testing.F) {
	for _, s := range []string{
		"1", "true", "all", "TRUE", "", "0", "false", "none", "mooncake,hipfile", "mooncake hipfile",
		" mooncake , hipfile ", "mooncake;rm -rf", ",", "MoonCake", "mooncake\thipfile", "\u212aais",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := ParseRequirement(raw)
		if err != nil {
			if !strings.Contains(err.Error(), "INFERA_REQUIRE_NATIVE=") {
				t.Fatalf("ParseRequirement(%q): error does not name the variable: %v", raw, err)
			}
			if r.All || len(r.Names) > 0 || r.Raw != "" {
				t.Fatalf("ParseRequirement(%q): error with a non-zero requirement %+v", raw, r)
			}
			return
		}
		if r.Raw != raw {
			t.Fatalf("ParseRequirement(%q).Raw = %q", raw, r.Raw)
		}
		if r.All && len(r.Names) > 0 {
			t.Fatalf("ParseRequirement(%q): both All and names %q", raw, r.Names)
		}
		for i, n := range r.Names {
			if !CapabilityName(n) || i > 0 && r.Names[i-1] >= n {
				t.Fatalf("ParseRequirement(%q): names not valid, sorted and distinct: %q", raw, r.Names)
			}
		}
		if r.None() != (!r.All && len(r.Names) == 0) {
			t.Fatalf("ParseRequirement(%q): None() = %v for %+v", raw, r.None(), r)
		}
		// A list of names re-parses to the same names. (A single name that
		// is also a keyword, as in "0," or "all,", reads as the keyword
		// when written alone.)
		if len(r.Names) > 0 {
			joined := strings.Join(r.Names, ",")
			again, err := ParseRequirement(joined)
			if err != nil {
				t.Fatalf("re-parse of %q: %v", r.Names, err)
			}
			switch joined {
			case "1", "true", "yes", "on", "all", "0", "false", "no", "off", "none":
			default:
				if again.All || strings.Join(again.Names, ",") != joined {
					t.Fatalf("re-parse of %q gave %+v", r.Names, again)
				}
			}
		}
	})
}
