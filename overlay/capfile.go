package overlay

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"unicode"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/boundedread"
)

// parseCapabilities reads the content of a CAPABILITIES file: the names,
// sorted, and notes. The format is one line of space-separated names; tabs, several lines and CRLF endings are accepted
// because editors and heredocs produce them, but each deviation gets a note
// so the payload can be fixed. Words that are not capability names are
// dropped with a note; unknown but well-formed names are kept with a note.
func parseCapabilities(content string) ([]string, []string) {
	var notes []string
	if strings.Contains(content, "\r") {
		notes = append(notes, "has CRLF line endings")
	}
	if strings.ContainsFunc(content, func(r rune) bool { return unicode.IsSpace(r) && r != ' ' && r != '\n' && r != '\r' }) {
		notes = append(notes, "separates names with tabs or other whitespace (expected spaces)")
	}
	lines := 0
	for _, l := range strings.Split(strings.ReplaceAll(content, "\r", ""), "\n") {
		if strings.TrimSpace(l) != "" {
			lines++
		}
	}
	if lines > 1 {
		notes = append(notes, fmt.Sprintf("spans %d lines (expected one line)", lines))
	}
	names := []string{}
	for _, w := range strings.Fields(content) {
		switch {
		case !config.CapabilityName(w):
			notes = append(notes, fmt.Sprintf("ignored %q: not a capability name (lower-case letters, digits, '_', '.', '-')", w))
		case config.Capabilities[w] == "":
			notes = append(notes, fmt.Sprintf("unknown capability %q kept (known: %s)", w, strings.Join(config.KnownCapabilities(), ", ")))
			names = append(names, w)
		default:
			names = append(names, w)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), notes
}

// readCapabilities reads and parses a CAPABILITIES file. A missing file is not an
// error: the tree then declares no capabilities.
func readCapabilities(path string) (set []string, notes []string, exists bool, err error) {
	data, err := boundedread.File(path, boundedread.SmallText)
	if errors.Is(err, fs.ErrNotExist) {
		return []string{}, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("read capabilities: %w", boundedread.Reason(err))
	}
	set, notes = parseCapabilities(string(data))
	if len(set) == 0 && len(notes) == 0 {
		notes = append(notes, "is empty: the tree declares no capabilities")
	}
	return set, notes, true, nil
}
