package overlay

import "strings"

// The names a start reads on every run (tree names, metadata directory
// names) are matched with plain string code rather than regular
// expressions: compiling one costs more than all the matches of a start.

// allDigits: s is one or more ASCII digits.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// isPyTreeName: "py3" and digits ("py312").
func isPyTreeName(name string) bool {
	rest, ok := strings.CutPrefix(name, "py3")
	return ok && allDigits(rest)
}

// isNativeTreeName: "rocm", digits, "-py3", digits ("rocm7-py312").
func isNativeTreeName(name string) bool {
	rest, ok := strings.CutPrefix(name, "rocm")
	if !ok {
		return false
	}
	major, py, ok := strings.Cut(rest, "-")
	return ok && allDigits(major) && isPyTreeName(py)
}

// metaDirName splits a metadata directory's name, "numpy-2.3.5.dist-info"
// or "demo_pkg-1.0-py3.12.egg-info", into the distribution's name and
// version: the name is the shortest prefix before a '-' after which a
// version (no '-') follows, optionally then "-py" and a digit and
// anything.
func metaDirName(dir string) (name, version string, ok bool) {
	base, ok := strings.CutSuffix(dir, ".dist-info")
	if !ok {
		if base, ok = strings.CutSuffix(dir, ".egg-info"); !ok {
			return "", "", false
		}
	}
	for j := 1; j < len(base); j++ {
		if base[j] != '-' {
			continue
		}
		if strings.ContainsRune(base[:j], '\n') {
			// The name never spans a line (a name with a newline is
			// no distribution's).
			return "", "", false
		}
		rest := base[j+1:]
		i := strings.IndexByte(rest, '-')
		switch {
		case i < 0 && rest != "":
			return base[:j], rest, true
		case i > 0 && len(rest) > i+3 && rest[i:i+3] == "-py" && rest[i+3] >= '0' && rest[i+3] <= '9' &&
			!strings.ContainsRune(rest[i+4:], '\n'):
			return base[:j], rest[:i], true
		}
	}
	return "", "", false
}

// digitRuns are the runs of ASCII digits in s, in order.
func digitRuns(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		if s[i] < '0' || s[i] > '9' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		out = append(out, s[i:j])
		i = j
	}
	return out
}
