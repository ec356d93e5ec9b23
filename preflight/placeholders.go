package preflight

import (
	"fmt"
	"sort"
	"strings"
)

// Placeholders are the template placeholders in s, in order: an
// upper-case name in angle brackets (<[A-Z][A-Z0-9_]*>), alone or inside
// a word (/models/<MODEL>/config). Lower-case <foo> and a<b are left
// alone. Plain string code: every start scans every variable and
// argument, and a regular expression costs more to compile than that.
func Placeholders(s string) []string {
	var out []string
	for i := 0; i < len(s); i++ {
		if s[i] != '<' || i+1 >= len(s) || s[i+1] < 'A' || s[i+1] > 'Z' {
			continue
		}
		j := i + 2
		for j < len(s) && (s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9' || s[j] == '_') {
			j++
		}
		if j < len(s) && s[j] == '>' {
			out = append(out, s[i:j+1])
			i = j
		}
	}
	return out
}

// placeholdersShown is how many findings Seen names before "and N more".
const placeholdersShown = 5

func checkPlaceholders(in *Facts) Result {
	argv, env := in.Args.Argv, in.Given
	if env == nil {
		env = in.Env
	}
	if len(argv) == 0 && len(env) == 0 {
		return skipped("no command and no environment to look at")
	}
	var found []string
	for i, arg := range argv {
		for _, tok := range uniqueTokens(arg) {
			found = append(found, fmt.Sprintf("%s in argv[%d]%s", tok, i, argWhere(argv, i)))
		}
	}
	names := make([]string, 0, len(env))
	for name := range env {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, tok := range uniqueTokens(env[name]) {
			found = append(found, fmt.Sprintf("%s in env %s", tok, name))
		}
	}
	if len(found) == 0 {
		return pass(fmt.Sprintf("no <UPPER_CASE> placeholder in %s and %s",
			plural(len(argv), "argument"), plural(len(env), "environment variable")))
	}
	shown := found
	if len(shown) > placeholdersShown {
		shown = shown[:placeholdersShown]
	}
	seen := strings.Join(shown, "; ")
	if more := len(found) - len(shown); more > 0 {
		seen += fmt.Sprintf("; and %d more", more)
	}
	return fail(Error, seen, PlaceholdersWhy, PlaceholdersFix)
}

// The placeholders check's words, which infera-lint gives for a
// placeholder anywhere in a manifest.
const (
	PlaceholdersWhy = "The manifest was applied with a template placeholder still in it. " +
		"The worker would fail minutes later, at mount or load time or on " +
		"a host name that does not resolve, instead of now."
	PlaceholdersFix = "Substitute every <NAME> placeholder in the manifest (envsubst, Helm " +
		"or Kustomize values) and apply it again."
)

// uniqueTokens are the placeholders in s, each once, in order.
func uniqueTokens(s string) []string {
	var out []string
	for _, tok := range Placeholders(s) {
		dup := false
		for _, o := range out {
			dup = dup || o == tok
		}
		if !dup {
			out = append(out, tok)
		}
	}
	return out
}

// argWhere names the option argv[i] belongs to, if any: ", the value of
// --model" for "--model=/m/<M>" and for "/m/<M>" after "--model".
func argWhere(argv []string, i int) string {
	arg := argv[i]
	if strings.HasPrefix(arg, "-") {
		if name, _, ok := strings.Cut(arg, "="); ok {
			return ", the value of " + name
		}
		return ""
	}
	if i > 0 && strings.HasPrefix(argv[i-1], "-") && !strings.Contains(argv[i-1], "=") && len(argv[i-1]) > 1 {
		return ", the value of " + argv[i-1]
	}
	return ""
}
