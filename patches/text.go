package patches

import "strings"

// text counts the occurrences of many multi-line strings in one file
// content without scanning the content once per string: the content is
// split into lines once, and each string is looked up by its first
// complete line, then compared in place. Anchors and replacements are
// blocks of whole lines, so this is one pass over the file for all of
// them; a string without a complete line (an upstream marker such as a
// name) is counted directly.
type text struct {
	s     string
	lines map[string][]int // line content (without '\n') -> offsets of its starts, ascending
}

func newText(s string) *text { return &text{s: s} }

func (t *text) index() {
	t.lines = make(map[string][]int, strings.Count(t.s, "\n")+1)
	for start := 0; start < len(t.s); {
		end := strings.IndexByte(t.s[start:], '\n')
		if end < 0 {
			end = len(t.s) - start
		}
		line := t.s[start : start+end]
		t.lines[line] = append(t.lines[line], start)
		start += end + 1
	}
}

// count is strings.Count(t.s, needle): non-overlapping occurrences, found
// from the left.
func (t *text) count(needle string) int {
	// The first complete line of needle: after its first '\n', up to the
	// next one.
	i := strings.IndexByte(needle, '\n')
	if i < 0 || needle == "" {
		return strings.Count(t.s, needle)
	}
	j := strings.IndexByte(needle[i+1:], '\n')
	if j < 0 {
		return strings.Count(t.s, needle)
	}
	if t.lines == nil {
		t.index()
	}
	key, off := needle[i+1:i+1+j], i+1
	n, next := 0, 0
	for _, p := range t.lines[key] {
		start := p - off
		if start < next || start < 0 || start+len(needle) > len(t.s) {
			continue
		}
		if t.s[start:start+len(needle)] == needle {
			n++
			next = start + len(needle)
		}
	}
	return n
}
