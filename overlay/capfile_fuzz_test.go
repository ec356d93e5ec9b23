package overlay

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/infera/infera-exec/config"
)

func checkSet(t *testing.T, what string, s []string) {
	t.Helper()
	for i, n := range s {
		if !config.CapabilityName(n) {
			t.Fatalf("%s: %q is not a valid capability name", what, n)
		}
		if i > 0 && s[i-1] >= n {
			t.Fatalf("%s: not sorted and unique: %q", what, s)
		}
	}
	if !sort.StringsAreSorted(s) {
		t.Fatalf("%s: not sorted: %q", what, s)
	}
}

func FuzzParseCapabilities(f *testing.F) {
	for _, s := range []string{
		"mooncake hipfile\n", "mooncake\thipfile", "mooncake hipfile\r\n", "mooncake\nhipfile\n",
		"", "\n", "Moon$cake", "mooncake ais", "mooncake mooncake", "a.b-c_d 0x",
		"mooncaké", "\u00a0mooncake\u2003hipfile", "\xff\xfe",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		set, notes := parseCapabilities(content)
		if set == nil {
			t.Fatalf("parseCapabilities(%q) returned a nil Set", content)
		}
		checkSet(t, "parseCapabilities("+strings.ReplaceAll(content, "\n", `\n`)+")", set)

		words := strings.Fields(content)
		inContent := make(map[string]bool, len(words))
		for _, w := range words {
			inContent[w] = true
		}
		valid := 0
		for _, w := range words {
			if config.CapabilityName(w) {
				valid++
				if !slices.Contains(set, w) {
					t.Fatalf("parseCapabilities(%q): valid word %q missing from %q", content, w, set)
				}
			}
		}
		for _, n := range set {
			if !inContent[n] {
				t.Fatalf("parseCapabilities(%q): %q is not a word of the content", content, n)
			}
		}
		// Every dropped word and every unknown name gets a note.
		dropped := len(words) - valid
		unknown := 0
		for _, w := range words {
			if config.CapabilityName(w) && config.Capabilities[w] == "" {
				unknown++
			}
		}
		if len(notes) < dropped+unknown {
			t.Fatalf("parseCapabilities(%q): %d notes for %d dropped and %d unknown words: %q", content, len(notes), dropped, unknown, notes)
		}
		if strings.Contains(content, "\r") && !containsNote(notes, "CRLF") {
			t.Fatalf("parseCapabilities(%q): no CRLF note: %q", content, notes)
		}
		if strings.Contains(content, "\t") && !containsNote(notes, "tabs") {
			t.Fatalf("parseCapabilities(%q): no tab note: %q", content, notes)
		}
		for _, n := range notes {
			if n == "" {
				t.Fatalf("parseCapabilities(%q): empty note", content)
			}
		}
		// Parsing the canonical rendering gives the same set, without notes
		// about the format.
		if len(set) > 0 {
			again, notes2 := parseCapabilities(strings.Join(set, " ") + "\n")
			if strings.Join(again, " ") != strings.Join(set, " ") {
				t.Fatalf("parseCapabilities(%q) = %q, canonical re-parse = %q", content, set, again)
			}
			for _, n := range notes2 {
				if !strings.HasPrefix(n, "unknown capability") {
					t.Fatalf("canonical re-parse of %q has note %q", set, n)
				}
			}
		}
	})
}

func containsNote(notes []string, sub string) bool {
	for _, n := range notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}
