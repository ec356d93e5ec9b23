package patchdef

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// An edit's site is the place in a file that the fix is about: where its
// anchor stands, or once the anchor is gone (ours, the v0.2.2 script's or
// upstream's fix), the place between the lines that stand there in every
// form. Markers (upstream, legacy_marker) decide an edit only where they
// occur inside one of its sites, never because their text is somewhere
// else in the file: upstream's own code may carry the same text in
// another function (SGLang v0.5.16's early-send path has the v0.2.2
// script's line of the chunk-wait-event fix).
//
// The lines that stand at the site in every form are the edit's context:
// by default the whole lines that the anchor and the replacement share at
// their start (head) and at their end (tail). A site is then the text
// from the end of an occurrence of the head to the next occurrence of the
// tail, at most SiteLines lines (and so the SiteLines lines after a head
// whose tail a script rewrote, and before a tail whose head it rewrote);
// with a head only, the SiteLines lines after it; with a tail only, the
// SiteLines lines before it. An
// edit whose anchor and replacement share no line, or whose fix upstream
// made elsewhere in the same function or class, names its site with site:
// text on the line that opens a Python block (a def or class line, or its
// first part), and the site is that whole block: the line and every line
// after it indented deeper (blank lines and closing brackets included).

// defaultSiteLines is how far a site reaches from its context when the
// definition does not say (site_lines): room for the changed lines of
// the edit and for a v0.2.2 script's or upstream's version of them.
const defaultSiteLines = 12

// Context returns the edit's head and tail: the text that stands before
// and after the changed lines at its site in every form (see above).
func (e *Edit) Context() (head, tail string) {
	if e.Site != "" {
		return e.Site, ""
	}
	a, r := lines(e.Anchor), lines(e.Replacement)
	h := 0
	for h < len(a) && h < len(r) && a[h] == r[h] && strings.HasSuffix(a[h], "\n") {
		h++
	}
	t := 0
	for t < len(a)-h && t < len(r)-h && a[len(a)-1-t] == r[len(r)-1-t] {
		t++
	}
	return strings.Join(a[:h], ""), strings.Join(a[len(a)-t:], "")
}

// siteLines is how many lines a site spans beyond its context.
func (e *Edit) siteLines() int {
	if e.SiteLines > 0 {
		return e.SiteLines
	}
	return defaultSiteLines + max(strings.Count(e.Anchor, "\n"), strings.Count(e.Replacement, "\n"))
}

// lines splits s after each '\n'; a last line without one is a line too.
func lines(s string) []string {
	out := strings.SplitAfter(s, "\n")
	if len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// span is a byte range [from, to) of a content.
type span struct{ from, to int }

func (s span) holds(p, n int) bool { return p >= s.from && p+n <= s.to }

// sites lists where e's context stands in content (see above): nil when
// the edit has no context (then no marker can decide it).
func (e *Edit) sites(content string, find Finder) []span {
	head, tail := e.Context()
	n := e.siteLines()
	var out []span
	switch {
	case e.Site != "":
		for _, p := range find(e.Site) {
			out = append(out, block(content, p))
		}
	case head != "" && tail != "":
		// From each head to the next tail, or n lines when the tail is
		// gone; and up to each tail from the head before it, or n lines
		// when the head is gone (a script that rewrote one of them).
		heads, tails := find(head), find(tail)
		for _, h := range heads {
			from := h + len(head)
			to := forward(content, from, n)
			if i := sort.SearchInts(tails, from); i < len(tails) && tails[i] < to {
				to = tails[i]
			}
			out = append(out, span{from, to})
		}
		for _, t := range tails {
			from := backward(content, t, n)
			for _, h := range heads {
				if e := h + len(head); e <= t && e > from {
					from = e
				}
			}
			out = append(out, span{from, t})
		}
	case head != "":
		for _, h := range find(head) {
			from := h + len(head)
			out = append(out, span{from, forward(content, from, n)})
		}
	case tail != "":
		for _, t := range find(tail) {
			out = append(out, span{backward(content, t, n), t})
		}
	}
	slices.SortFunc(out, func(a, b span) int { return cmp.Or(cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to)) })
	return slices.Compact(out) // a head's span and its tail's are one site
}

// block is the Python block whose opening line holds offset p: from
// that line's start to the first later line that is indented no deeper
// and is not blank or a closing bracket.
func block(content string, p int) span {
	start := strings.LastIndexByte(content[:p], '\n') + 1
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " \t")) }
	end := strings.IndexByte(content[p:], '\n')
	if end < 0 {
		return span{start, len(content)}
	}
	own := indent(content[start:])
	q := p + end + 1
	for q < len(content) {
		e := strings.IndexByte(content[q:], '\n')
		next := len(content)
		if e >= 0 {
			next = q + e + 1
		}
		line := strings.TrimRight(content[q:next], "\n")
		body := strings.TrimLeft(line, " \t")
		if body != "" && indent(line) <= own && !strings.ContainsAny(body[:1], ")]}") {
			break
		}
		q = next
	}
	return span{start, q}
}

// forward is the offset n lines after from (or the end of content).
func forward(content string, from, n int) int {
	p := from
	for range n {
		i := strings.IndexByte(content[p:], '\n')
		if i < 0 {
			return len(content)
		}
		p += i + 1
	}
	return p
}

// backward is the offset of the start of the n-th line before to.
func backward(content string, to, n int) int {
	p := to
	for range n {
		if p == 0 {
			return 0
		}
		i := strings.LastIndexByte(content[:p-1], '\n')
		p = i + 1
	}
	return p
}

// Finder lists where needle occurs in a content: the starts of its
// non-overlapping occurrences, from the left, ascending (what
// strings.Index finds again and again).
type Finder func(needle string) []int

// Find is the Finder of content by the strings package.
func Find(content string) Finder {
	return func(needle string) []int {
		var at []int
		if needle == "" {
			return nil
		}
		for p := 0; ; {
			i := strings.Index(content[p:], needle)
			if i < 0 {
				return at
			}
			at = append(at, p+i)
			p += i + len(needle)
		}
	}
}

// LineRange is a range of lines of a file, 1-based and inclusive, with
// what stands there for the edit.
type LineRange struct {
	From  int    `json:"from"`
	To    int    `json:"to"`
	Found string `json:"found"` // anchor, replacement, legacy, upstream, context
}

func (r LineRange) String() string {
	if r.From == r.To {
		return fmt.Sprintf("%d (%s)", r.From, r.Found)
	}
	return fmt.Sprintf("%d-%d (%s)", r.From, r.To, r.Found)
}

// lineOf is the 1-based line of offset p.
func lineOf(content string, p int) int {
	return strings.Count(content[:min(p, len(content))], "\n") + 1
}

// rangeOf is the lines of content[p:p+n].
func rangeOf(content string, p, n int, found string) LineRange {
	end := p + n
	if n > 0 && end <= len(content) && content[end-1] == '\n' {
		end-- // the line a block ends on is its last '\n''s
	}
	return LineRange{From: lineOf(content, p), To: lineOf(content, max(end, p)), Found: found}
}

// Ambiguous lists the markers of e (upstream, legacy_marker, and our
// replacement) that occur in content outside every site of e, each as
// "<key> at line N". On a pristine file, where the edit is pending, such a
// marker is text upstream has elsewhere: it decides nothing here, but a
// marker that can match where the fix is not is a definition to fix
// (a longer marker, one with its indentation, or a narrower site).
func (e *Edit) Ambiguous(content string) []string {
	find := Find(content)
	out := e.StrayMarkers(content, find)
	for _, p := range find(e.Replacement) {
		out = append(out, fmt.Sprintf("replacement at line %d", lineOf(content, p)))
	}
	return out
}

// StrayMarkers is Ambiguous of the upstream and legacy markers alone,
// which any file may be asked about: our replacement elsewhere is a
// state (partial), not a flaw of the definition.
func (e *Edit) StrayMarkers(content string, find Finder) []string {
	if e.Upstream == "" && e.LegacyMarker == "" {
		return nil
	}
	if find == nil {
		find = Find(content)
	}
	sites := e.sites(content, find)
	repls := find(e.Replacement)
	var out []string
	for _, m := range []struct{ key, text string }{{"upstream", e.Upstream}, {"legacy_marker", e.LegacyMarker}} {
		if m.text == "" {
			continue
		}
	next:
		for _, p := range outside(find(m.text), len(m.text), repls, len(e.Replacement)) {
			for _, s := range sites {
				if s.holds(p, len(m.text)) {
					continue next
				}
			}
			out = append(out, fmt.Sprintf("%s at line %d", m.key, lineOf(content, p)))
		}
	}
	return out
}
