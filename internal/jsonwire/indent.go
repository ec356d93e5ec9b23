package jsonwire

// AppendIndent appends src, compact JSON as the generated encoders write
// it, indented as json.Indent(dst, src, "", indent) indents it: each
// member and element on its own line, a space after ':', empty objects
// and arrays kept as {} and []. src is not validated (json.Indent's
// scanner costs more than the encoding itself): it must be the output of
// an encoder, which only writes valid JSON.
func AppendIndent(dst, src []byte, indent string) []byte {
	depth := 0
	open := false // just after '{' or '[': the container may be empty
	newline := func() {
		dst = append(dst, '\n')
		for range depth {
			dst = append(dst, indent...)
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if open {
			open = false
			if c == '}' || c == ']' {
				depth--
				dst = append(dst, c)
				continue
			}
			newline()
		}
		switch c {
		case '"':
			// Copy the string through its closing quote.
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			dst = append(dst, src[i:min(j+1, len(src))]...)
			i = j
		case '{', '[':
			dst = append(dst, c)
			depth++
			open = true
		case '}', ']':
			depth--
			newline()
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			newline()
		case ':':
			dst = append(dst, c, ' ')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
