package preflight

import (
	"regexp"
	"slices"
	"testing"
)

// placeholders against the expression it replaces.
func TestPlaceholdersMatchTheirExpression(t *testing.T) {
	re := regexp.MustCompile(`<[A-Z][A-Z0-9_]*>`)
	for _, s := range []string{"", "<", "<>", "<A>", "<a>", "/models/<MODEL>/config", "<<A>>", "<A<B>", "<A_1>x<B2>", "a<b", "<1A>", "<A-B>", "<A", "x<MODEL_NAME>y<HOST>"} {
		if got, want := Placeholders(s), re.FindAllString(s, -1); !slices.Equal(got, want) {
			t.Errorf("Placeholders(%q) = %q, expression %q", s, got, want)
		}
	}
}
