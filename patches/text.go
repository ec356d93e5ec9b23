package patches

import "strings"

// text counts the occurrences of many multi-line strings in one file
// content without scanning the content once per string with a substring
// search: the content's lines are found once and grouped by length, and
// each string is looked up by its first complete line, among the lines of
// that length alone, then compared in place. Anchors and replacements are
// blocks of whole lines, so the content is read once for all of them, and
// no map of the file's lines is built (a 355 KB module has 8,000 lines; a
// patch asks for a few dozen). A string without a complete line (an
// upstream marker such as a name) is counted directly.
type text struct {
	s      string
	starts []int32              // offset of each line's start, ascending; nil until needed
	byLen  []int32              // line numbers grouped by line length (bucket), ascending within a group
	bucket [maxBucket + 2]int32 // byLen[bucket[k]:bucket[k+1]] are the lines of length k (maxBucket: that or longer)
	found  map[string][]int32   // complete line -> offsets of its starts, for the lines asked for
}

// maxBucket is the longest line length with a group of its own; longer
// lines (rare in source) share the last group.
const maxBucket = 255

func newText(s string) *text { return &text{s: s} }

// lineStarts finds every line start once, and groups the lines by length
// (a counting sort: two passes over the line starts). Offsets fit in
// int32: sources are read with a bound far below 2 GiB (maxSourceBytes).
func (t *text) lineStarts() []int32 {
	if t.starts != nil {
		return t.starts
	}
	// Counted first (a vectorised scan) so that the slice is allocated
	// once, at its size: source lines are often shorter than any guess.
	t.starts = make([]int32, 0, strings.Count(t.s, "\n")+1)
	for start := 0; start < len(t.s); {
		t.starts = append(t.starts, int32(start))
		end := strings.IndexByte(t.s[start:], '\n')
		if end < 0 {
			break
		}
		start += end + 1
	}
	var count [maxBucket + 2]int32
	for i := range t.starts {
		count[min(t.lineLen(i), maxBucket)+1]++
	}
	for k := 1; k < len(count); k++ {
		count[k] += count[k-1]
	}
	t.bucket = count
	t.byLen = make([]int32, len(t.starts))
	for i := range t.starts {
		k := min(t.lineLen(i), maxBucket)
		t.byLen[count[k]] = int32(i)
		count[k]++
	}
	return t.starts
}

// lineLen is the length of line i without its '\n'.
func (t *text) lineLen(i int) int {
	end := len(t.s) // the last line, unless a '\n' ends it
	if i+1 < len(t.starts) {
		end = int(t.starts[i+1]) - 1
	} else if t.s[end-1] == '\n' {
		end--
	}
	return end - int(t.starts[i])
}

// lineAt is where the complete line key starts, each time it occurs, in
// ascending order.
func (t *text) lineAt(key string) []int32 {
	if at, ok := t.found[key]; ok {
		return at
	}
	t.lineStarts()
	k := min(len(key), maxBucket)
	var at []int32
	for _, i := range t.byLen[t.bucket[k]:t.bucket[k+1]] {
		p := int(t.starts[i])
		if t.lineLen(int(i)) == len(key) && t.s[p:p+len(key)] == key {
			at = append(at, int32(p))
		}
	}
	if t.found == nil {
		t.found = map[string][]int32{}
	}
	t.found[key] = at
	return at
}

// count is strings.Count(t.s, needle): non-overlapping occurrences, found
// from the left.
func (t *text) count(needle string) int {
	n, _ := t.find(needle, false)
	return n
}

// replaceAll is strings.ReplaceAll(t.s, old, new).
func (t *text) replaceAll(old, new string) string {
	n, at := t.find(old, true)
	if n == 0 || old == "" || at == nil {
		return strings.ReplaceAll(t.s, old, new)
	}
	var b strings.Builder
	b.Grow(len(t.s) + n*(len(new)-len(old)))
	prev := 0
	for _, p := range at {
		b.WriteString(t.s[prev:p])
		b.WriteString(new)
		prev = p + len(old)
	}
	b.WriteString(t.s[prev:])
	return b.String()
}

// find counts needle's non-overlapping occurrences from the left, and
// lists where they start when asked to and needle has a complete line
// (nil otherwise: the caller falls back to the strings package).
func (t *text) find(needle string, list bool) (int, []int) {
	// The first complete line of needle: after its first '\n', up to the
	// next one.
	i := strings.IndexByte(needle, '\n')
	if i < 0 || needle == "" {
		return strings.Count(t.s, needle), nil
	}
	j := strings.IndexByte(needle[i+1:], '\n')
	if j < 0 {
		return strings.Count(t.s, needle), nil
	}
	key, off := needle[i+1:i+1+j], i+1
	n, next := 0, 0
	var at []int
	for _, p := range t.lineAt(key) {
		start := int(p) - off
		if start < next || start < 0 || start+len(needle) > len(t.s) {
			continue
		}
		if t.s[start:start+len(needle)] == needle {
			n++
			next = start + len(needle)
			if list {
				at = append(at, start)
			}
		}
	}
	return n, at
}
