package pyimport

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// pySpace is str.isspace for one character: Go's unicode.IsSpace (the
// ASCII white space, NEL, NBSP and the Zs, Zl and Zp characters) and the
// four information separators U+001C to U+001F, which Python counts
// (their bidirectional class is B or S) and Go does not.
func pySpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// pyRStrip is str.rstrip() with no argument; pyStrip is str.strip().
func pyRStrip(s string) string { return strings.TrimRightFunc(s, pySpace) }
func pyStrip(s string) string  { return strings.TrimFunc(s, pySpace) }

// pthLines are the lines of a .pth file as site.addpackage of CPython
// version ("3.X") reads them, its bytes that are not ASCII decoded as k
// says (see pthCodec), each line without its line ending:
//
//   - up to 3.12, through a text stream with universal newlines: lines
//     end at \n, \r\n or a bare \r. Bytes outside ASCII are read as
//     UTF-8 in the UTF-8 Mode of 3.10 (a BOM kept, as a character of
//     the first line); otherwise in the locale's encoding, which is an
//     error (the start fails, or the encoding is not known here);
//   - from 3.13, the bytes decoded as utf-8-sig (a UTF-8 BOM dropped), and
//     str.splitlines: lines end also at \v, \f, U+001C to U+001E, NEL,
//     U+2028 and U+2029. Bytes that are not UTF-8 are decoded in the
//     locale's encoding instead, which is an error.
func pthLines(data []byte, version string, k pthCodec) ([]string, error) {
	text := string(data)
	if !versionAtLeast(version, 13) {
		for i := 0; i < len(data); i++ {
			if data[i] >= 0x80 {
				if _, err := k.decode(version, i, utf8.Valid(data)); err != nil {
					return nil, err
				}
				break
			}
		}
		return splitLines(text, func(r rune) bool { return r == '\n' || r == '\r' }), nil
	}
	text = strings.TrimPrefix(text, "\ufeff")
	if !utf8.ValidString(text) {
		_, err := k.decode(version, 0, false)
		return nil, err
	}
	return splitLines(text, func(r rune) bool {
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			return true
		}
		return false
	}), nil
}

// splitLines is str.splitlines with the line boundaries brk (\r\n is one
// boundary): no empty last line for a text that ends with one.
func splitLines(text string, brk func(rune) bool) []string {
	var out []string
	start := 0
	for i, r := range text {
		if i < start || !brk(r) {
			continue
		}
		out = append(out, text[start:i])
		start = i + utf8.RuneLen(r)
		if r == '\r' && strings.HasPrefix(text[start:], "\n") {
			start++
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// pyNameLess orders file names as Python's sorted() orders the str that
// os.listdir gives for them: by code point, a name decoded as UTF-8 with
// surrogateescape (each byte that is not part of a valid UTF-8 sequence
// becomes U+DC80 to U+DCFF). For names in valid UTF-8 this is their byte
// order; a name with such a byte sorts it below U+E000 and the
// characters beyond U+FFFF, which its bytes (0x80 and up) would not.
func pyNameLess(a, b string) bool {
	for a != "" && b != "" {
		ra, na := pyRune(a)
		rb, nb := pyRune(b)
		if ra != rb {
			return ra < rb
		}
		a, b = a[na:], b[nb:]
	}
	return a == "" && b != ""
}

// pyRune is the first character of s as surrogateescape decodes it, and
// its length in bytes.
func pyRune(s string) (rune, int) {
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n <= 1 {
		return 0xdc00 + rune(s[0]), 1
	}
	return r, n
}

// normpath is posixpath.normpath: "." and empty components dropped, ".."
// taken against the component before it (none above the root), and the
// leading slashes kept as POSIX allows: exactly two stay two (a path may
// mean something else there), three or more become one.
func normpath(p string) string {
	if p == "" {
		return "."
	}
	lead := 0
	if strings.HasPrefix(p, "/") {
		lead = 1
		if strings.HasPrefix(p, "//") && !strings.HasPrefix(p, "///") {
			lead = 2
		}
	}
	var comps []string
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "" || c == ".":
		case c != ".." || lead == 0 && len(comps) == 0 || len(comps) > 0 && comps[len(comps)-1] == "..":
			comps = append(comps, c)
		case len(comps) > 0:
			comps = comps[:len(comps)-1]
		}
	}
	out := strings.Repeat("/", lead) + strings.Join(comps, "/")
	if out == "" {
		return "."
	}
	return out
}
