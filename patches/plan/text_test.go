package plan

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/source"
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
		tx := newText(content, nil)
		assert.Equal(t, strings.Count(content, needle), tx.count(needle), "content %q needle %q", content, needle)
		assert.Equal(t, strings.Count(content, needle), tx.count(needle), "content %q needle %q, asked again", content, needle)
		// Found by the one scan for a set of needles, itself among them.
		set := setOf(needle, pick(2), pick(3), "\n"+needle)
		assert.Equal(t, strings.Count(content, needle), newText(content, set).count(needle), "content %q needle %q in a set", content, needle)
	}
}

// FuzzTextCount: the line-start index counts as strings.Count does, for
// any content and needle.
func FuzzTextCount(f *testing.F) {
	f.Add("a\nb\na\nb\n", "a\nb\n")
	f.Add("x\n\n\ny", "\n\n")
	f.Add("    x = 1\n    x = 1", "\n    x = 1")
	f.Add("ab\nab\n", "b\nab\n")
	f.Fuzz(func(t *testing.T, content, needle string) {
		if needle == "" {
			return
		}
		for _, tx := range []*text{newText(content, nil), newText(content, setOf(needle, needle+"\n", "\n"+needle))} {
			for i := 0; i < 2; i++ { // the second time from what the first found
				if got, want := tx.count(needle), strings.Count(content, needle); got != want {
					t.Fatalf("count(%q) in %q = %d, strings.Count says %d", needle, content, got, want)
				}
			}
		}
	})
}

// FuzzTextReplaceAll: replacing through the index is strings.ReplaceAll.
func FuzzTextReplaceAll(f *testing.F) {
	f.Add("a\nb\na\nb\n", "a\nb\n", "c\n")
	f.Add("x\n\n\ny", "\n\n", "")
	f.Add("    x = 1\n    x = 1", "\n    x = 1", "\n    x = 2\n")
	f.Fuzz(func(t *testing.T, content, old, new string) {
		for _, tx := range []*text{newText(content, nil), newText(content, setOf(old, new))} {
			if got, want := tx.replaceAll(old, new), strings.ReplaceAll(content, old, new); got != want {
				t.Fatalf("replaceAll(%q, %q) in %q = %q, strings.ReplaceAll says %q", old, new, content, got, want)
			}
		}
	})
}

// Replacing a pending edit's anchors makes the edit applied, for swaps,
// insertions that keep the anchor, shrinks and repeated anchors.
func TestReplaceAllMakesApplied(t *testing.T) {
	for _, e := range []*patchdef.Edit{
		{Anchor: "A\n", Replacement: "B\n", Count: 1},
		{Anchor: "A\n", Replacement: "A\nB\n", Count: 1},
		{Anchor: "A B\n", Replacement: "A", Count: 1},
		{Anchor: "q\n", Replacement: "r\n", Count: 3},
	} {
		content := newText("head\n"+strings.Repeat(e.Anchor+"mid\n", e.Count)+"tail\n", nil)
		if !assert.Equal(t, patchdef.Pending, patchdef.Evaluate(e, content.s, content.all).State, "%q", e.Anchor) {
			continue
		}
		out := newText(content.replaceAll(e.Anchor, e.Replacement), nil)
		assert.Equal(t, patchdef.Applied, patchdef.Evaluate(e, out.s, out.all).State, "%q -> %q", e.Anchor, e.Replacement)
	}
}

// setOf is a needle set of the given strings.
func setOf(s ...string) *needles {
	n := &needles{byKey: map[string][]needleAt{}}
	for _, x := range s {
		n.add(x)
	}
	return n
}

// readSource's digest, taken chunk by chunk as the bytes are read, is the
// SHA-256 of the whole content, for sizes around the chunk's.
func TestReadSourceHashesWhatItRead(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, source.Chunk - 1, source.Chunk, source.Chunk + 1, 3*source.Chunk + 17} {
		p := filepath.Join(dir, fmt.Sprintf("f%d.py", n))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + i%26)
		}
		require.NoError(t, os.WriteFile(p, b, 0o644))
		data, id, sum, err := source.Read(p, source.MaxBytes)
		require.NoError(t, err)
		assert.Equal(t, b, data)
		assert.Equal(t, int64(n), id.Size)
		assert.Equal(t, digest.Bytes(b), sum, "size %d", n)
	}
	_, _, _, err := source.Read(filepath.Join(dir, fmt.Sprintf("f%d.py", 3*source.Chunk+17)), source.Chunk)
	assert.Error(t, err, "a file over the limit was read")
}

func TestUpstreamMarkerInsideReplacementIsOurs(t *testing.T) {
	e := patchdef.Edit{File: "a.py", Anchor: "    def stats(cls):\n        return S()\n",
		Replacement: "    def stats(cls):\n        return S()\n\n    def metrics(cls):\n        return None\n",
		Upstream:    "    def metrics(", Count: 1}
	base := "class C:\n    def stats(cls):\n        return S()\n"
	assert.Equal(t, patchdef.Pending, patchdef.Evaluate(&e, base, nil).State)
	patched := newText(newText(base, nil).replaceAll(e.Anchor, e.Replacement), nil)
	assert.Equal(t, patchdef.Applied, patchdef.Evaluate(&e, patched.s, patched.all).State, "our own method does not read as upstream's")
	upstream := "class C:\n    def stats(cls):\n        return S()\n\n    def metrics(cls, config):\n        return M(config)\n"
	assert.Equal(t, patchdef.Upstream, patchdef.Evaluate(&e, upstream, nil).State)
}
