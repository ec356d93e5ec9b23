package patchdef

import (
	"fmt"
	"slices"
	"strings"

	"github.com/infera/infera-exec/internal/logging"
)

// checkOverlap refuses a definition two of whose variants can match the
// same file: which one is applied would then depend on their order, not
// on the code. It is decided on the text each variant matches: a file
// made of variant A's anchors (each as often as A expects it) must not
// also be pending for another variant B whose files are among A's. Two
// variants kept apart by different version ranges are not compared.
func (d *Definition) checkOverlap() error {
	for i := range d.Variants {
		a := &d.Variants[i]
		files := map[string]*strings.Builder{}
		for _, e := range a.Edits {
			b := files[e.File]
			if b == nil {
				b = &strings.Builder{}
				files[e.File] = b
			}
			for range max(e.Count, 1) {
				b.WriteString(e.Anchor)
				b.WriteString("\n\x00\n")
			}
		}
		for j := range d.Variants {
			b := &d.Variants[j]
			if i == j || a.Versions != b.Versions || exclusive(a.Guards, b.Guards) {
				continue
			}
			if matchesAll(b, files) {
				return logging.WithBrief(fmt.Errorf("%s: variants %s and %s overlap: a file with %s's anchors also matches %s's, so the order of the variants would decide which is applied", d.ID, a.Name, b.Name, a.Name, b.Name),
					fmt.Sprintf("%s: variants %s and %s overlap: %s's anchors also match %s's", d.ID, a.Name, b.Name, a.Name, b.Name))
			}
		}
	}
	return nil
}

// matchesAll reports whether every edit of v is pending in the given
// file contents.
func matchesAll(v *Variant, files map[string]*strings.Builder) bool {
	for i := range v.Edits {
		e := v.Edits[i]
		if e.Count == 0 {
			e.Count = 1
		}
		f, ok := files[e.File]
		if !ok {
			return false
		}
		if content := f.String(); Evaluate(&e, content, nil).State != Pending {
			return false
		}
	}
	return true
}

// exclusive reports whether one of the guards is the other's turned
// around: the variants cannot hold on the same release.
func exclusive(a, b []Guard) bool {
	for _, g := range a {
		for _, h := range b {
			if g.File == h.File && g.Contains == h.Contains && slices.Equal(g.ContainsAny, h.ContainsAny) && g.Absent != h.Absent {
				return true
			}
		}
	}
	return false
}
