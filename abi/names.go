package abi

import "strings"

// The names a start reads on every run are matched with plain string code
// rather than regular expressions: compiling one costs more than the
// match, and a restart should not pay for it.

// leadingDigits splits s into its leading ASCII digits and the rest.
func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}

// hipSonameMajor is N of "libamdhip64.so.N" or "libamdhip64.so.N.…".
func hipSonameMajor(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, hipLib+".")
	if !ok {
		return "", false
	}
	major, rest := leadingDigits(rest)
	if major == "" || (rest != "" && rest[0] != '.') {
		return "", false
	}
	return major, true
}

// pythonNameVersion is 3 and 12 of "python3.12" (nothing after it).
func pythonNameVersion(name string) (major, minor string, ok bool) {
	rest, ok := strings.CutPrefix(name, "python")
	if !ok {
		return "", "", false
	}
	major, rest = leadingDigits(rest)
	if rest, ok = strings.CutPrefix(rest, "."); !ok || major == "" {
		return "", "", false
	}
	minor, rest = leadingDigits(rest)
	if minor == "" || rest != "" {
		return "", "", false
	}
	return major, minor, true
}

// digitRuns are the runs of ASCII digits in s, in order.
func digitRuns(s string) []string {
	var out []string
	for s != "" {
		if s[0] < '0' || s[0] > '9' {
			s = s[1:]
			continue
		}
		var d string
		d, s = leadingDigits(s)
		out = append(out, d)
	}
	return out
}
