package plan

import (
	"strings"

	"github.com/infera/infera-exec/patches/patchdef"
)

// needles is every string a run's definitions look for in an engine
// file (anchors, replacements, upstream and legacy markers, guard texts),
// indexed by each one's first complete line: the text between its first
// and second '\n'. Anchors and replacements are blocks of whole lines, so
// wherever such a needle occurs in a file, that line is a complete line
// of the file. One pass over a file's lines, with one map lookup for each
// line whose length some key has, then finds every occurrence of every
// needle (see text.scan); there is no per-needle search of the content
// and no index of its lines. A needle without a complete line (a marker
// such as a name) is counted with strings.Count, once per content (see
// text.counts).
type needles struct {
	byKey map[string][]needleAt // first complete line -> the needles that have it
	lens  []bool                // lens[n]: some key is n bytes long
}

// needleAt is one string, with where its first complete line starts in it.
type needleAt struct {
	s   string
	off int
}

// keyOf is needle's first complete line and its offset; ok false when it
// has none.
func keyOf(s string) (key string, off int, ok bool) {
	i := strings.IndexByte(s, '\n')
	if i < 0 {
		return "", 0, false
	}
	j := strings.IndexByte(s[i+1:], '\n')
	if j < 0 {
		return "", 0, false
	}
	return s[i+1 : i+1+j], i + 1, true
}

// needlesOf gathers what the definitions of set look for.
func needlesOf(set *patchdef.Set) *needles {
	n := &needles{byKey: map[string][]needleAt{}}
	guards := func(gs []patchdef.Guard) {
		for i := range gs {
			n.add(gs[i].Contains)
			for _, c := range gs[i].ContainsAny {
				n.add(c)
			}
		}
	}
	for _, d := range set.Defs {
		guards(d.Guards)
		for _, v := range d.EditSets() {
			guards(v.Guards)
			for i := range v.Edits {
				e := &v.Edits[i]
				n.add(e.Anchor)
				n.add(e.Replacement)
				n.add(e.Upstream)
				n.add(e.LegacyMarker)
			}
		}
	}
	return n
}

// add puts s in the set, once; a string without a complete line is left
// out (it is counted directly).
func (n *needles) add(s string) {
	key, off, ok := keyOf(s)
	if !ok {
		return
	}
	for _, x := range n.byKey[key] {
		if x.s == s {
			return
		}
	}
	n.byKey[key] = append(n.byKey[key], needleAt{s, off})
	if len(key) >= len(n.lens) {
		n.lens = append(n.lens, make([]bool, len(key)+1-len(n.lens))...)
	}
	n.lens[len(key)] = true
}

// has reports whether s is in the set.
func (n *needles) has(s string) bool {
	if n == nil {
		return false
	}
	key, _, ok := keyOf(s)
	if !ok {
		return false
	}
	for _, x := range n.byKey[key] {
		if x.s == s {
			return true
		}
	}
	return false
}

// text answers count and replaceAll for one file content. The first
// question about a needle of the run's set scans the content once for
// all of them; a needle outside the set (a test's, or none when the set
// is nil) is found by a scan of its own.
type text struct {
	s       string
	set     *needles
	scanned bool
	at      map[string][]int32 // needle -> every start of it, overlapping ones too, ascending
	// counts is strings.Count of each needle without a complete line
	// asked about: the variants and guards of a definition, and
	// AsWritten's re-plan, ask about the same markers in the same content.
	counts map[string]int
}

func newText(s string, set *needles) *text { return &text{s: s, set: set} }

// scan walks the content's lines once, and notes every place where a
// needle of set occurs. Offsets fit in int32: sources are read with a
// bound far below 2 GiB (source.MaxBytes).
func (t *text) scan(set *needles) {
	if t.at == nil {
		t.at = map[string][]int32{}
	}
	s := t.s
	for start := 0; start < len(s); {
		end := strings.IndexByte(s[start:], '\n')
		if end < 0 {
			break // a last line without '\n' is no needle's complete line
		}
		if end < len(set.lens) && set.lens[end] {
			for _, x := range set.byKey[s[start:start+end]] {
				p := start - x.off
				if p >= 0 && p+len(x.s) <= len(s) && s[p:p+len(x.s)] == x.s {
					t.at[x.s] = append(t.at[x.s], int32(p))
				}
			}
		}
		start += end + 1
	}
}

// starts lists where needle occurs, overlapping occurrences too; ok false
// when it has no complete line.
func (t *text) starts(needle string) (at []int32, ok bool) {
	if t.set.has(needle) {
		if !t.scanned {
			t.scan(t.set)
			t.scanned = true
		}
		return t.at[needle], true
	}
	if at, ok := t.at[needle]; ok {
		return at, true
	}
	one := &needles{byKey: map[string][]needleAt{}}
	one.add(needle)
	if len(one.byKey) == 0 {
		return nil, false
	}
	t.scan(one)
	if _, ok := t.at[needle]; !ok {
		t.at[needle] = nil // looked for: not there
	}
	return t.at[needle], true
}

// count is strings.Count(t.s, needle): non-overlapping occurrences, found
// from the left.
func (t *text) count(needle string) int {
	n, _ := t.find(needle, false)
	return n
}

// all lists the starts of needle's non-overlapping occurrences from the
// left (a patchdef.Finder of the content).
func (t *text) all(needle string) []int {
	n, at := t.find(needle, true)
	if n == 0 || at != nil {
		return at
	}
	return patchdef.Find(t.s)(needle)
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
	all, ok := t.starts(needle)
	if !ok || needle == "" {
		n, ok := t.counts[needle]
		if !ok {
			n = strings.Count(t.s, needle)
			if t.counts == nil {
				t.counts = map[string]int{}
			}
			t.counts[needle] = n
		}
		return n, nil
	}
	n, next := 0, 0
	var at []int
	for _, p := range all {
		if int(p) < next {
			continue
		}
		n++
		next = int(p) + len(needle)
		if list {
			at = append(at, int(p))
		}
	}
	return n, at
}
