package patches

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// text.count agrees with strings.Count on contents and needles built from
// a few repeated lines (overlaps, partial lines, needles at both ends).
func TestTextCountAgreesWithStringsCount(t *testing.T) {
	lines := []string{"", "a", "ab", "    x = 1", "b", "\tdef f():", "a"}
	rng := rand.New(rand.NewSource(7))
	pick := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString(lines[rng.Intn(len(lines))])
			if rng.Intn(8) > 0 {
				b.WriteByte('\n')
			}
		}
		return b.String()
	}
	for i := 0; i < 3000; i++ {
		content := pick(rng.Intn(40))
		needle := pick(1 + rng.Intn(4))
		if needle == "" {
			continue
		}
		if rng.Intn(3) == 0 && len(content) > 2 { // a slice of the content
			a := rng.Intn(len(content) - 1)
			needle = content[a : a+1+rng.Intn(len(content)-a-1)]
		}
		assert.Equal(t, strings.Count(content, needle), newText(content).count(needle), "content %q needle %q", content, needle)
	}
}
