package capability

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/infera/infera-exec/internal/elfload"
	"github.com/infera/infera-exec/overlay"
)

// Audit is what --doctor, --check and --install say about a payload's
// trees against an image: version shadows of every python tree, and the
// load check of every native tree.
type Audit struct {
	Payload string           `json:"payload"`
	Image   string           `json:"image"`
	Shadows []overlay.Shadow `json:"shadows,omitempty"`
	Loads   []*LoadVerdict   `json:"loads,omitempty"`
	// The compiled extensions of python trees (pip install --target pulls
	// wheels with them), each against the image with the library
	// directories of the native trees for the same CPython.
	PythonLoads []*LoadVerdict      `json:"python_loads,omitempty"`
	Withdrawn   map[string][]string `json:"withdrawn,omitempty"` // tree -> capability: reason
	Note        string              `json:"note,omitempty"`
}

// AuditPayload opens the payload at root and checks all its trees
// against img (no family is known: every tree is checked).
func AuditPayload(root string, img overlay.Image) (*Audit, error) {
	p, err := overlay.Open(root)
	if err != nil {
		return nil, err
	}
	a := &Audit{Payload: root, Image: img.Root, Withdrawn: map[string][]string{}}
	pyTrees := p.PythonTreeVersions()
	dirs := slices.Sorted(maps.Keys(pyTrees))
	for _, d := range dirs {
		a.Shadows = append(a.Shadows, overlay.Shadows([]string{d}, img.Root, pyTrees[d])...)
	}
	for _, d := range dirs {
		libPath := append(p.NativeLibsFor(pyTrees[d]), img.LibraryPath...)
		a.PythonLoads = append(a.PythonLoads, CheckLoads(LoadInput{Dir: d, ImageRoot: img.Root, LibraryPath: libPath}))
	}
	for i := range p.NativeTrees {
		t := &p.NativeTrees[i]
		v := CheckLoads(LoadInput{Dir: t.Dir, ImageRoot: img.Root, LibraryPath: append(p.LibraryDirs(t), img.LibraryPath...)})
		a.Loads = append(a.Loads, v)
		if t.Evidence != nil {
			_, ev := Verify(t.Dir, t.Evidence)
			_, ev = ApplyLoads(t.Dir, ev, v)
			for _, e := range ev {
				if r := e.Refusal(); r != "" {
					a.Withdrawn[t.Name] = append(a.Withdrawn[t.Name], e.Capability+": "+r)
				}
			}
		}
	}
	return a, nil
}

// loadLines is one tree's load check as the audit prints it: ok, or a
// warning with every file that does not load and why.
func loadLines(kind, files string, v *LoadVerdict, rel func(string) string) []string {
	switch {
	case v.Error != "":
		return []string{fmt.Sprintf("WARN  %s %s: load check failed: %s", kind, rel(v.Tree), v.Error)}
	case len(v.Failed) == 0:
		return []string{fmt.Sprintf("ok    %s %s: all %d %s load against %s", kind, rel(v.Tree), v.Checked, files, v.Root)}
	}
	out := []string{fmt.Sprintf("WARN  %s %s: %d of %d ELF files do not load against %s", kind, rel(v.Tree), len(v.Failed), v.Checked, v.Root)}
	names := make([]string, 0, len(v.Failed))
	for f := range v.Failed {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		out = append(out, fmt.Sprintf("        %s: %s", f, strings.Join(v.Failed[f], "; ")))
	}
	return out
}

// Problems says whether the audit found anything to warn about.
func (a *Audit) Problems() bool {
	if len(a.Shadows) > 0 || len(a.Withdrawn) > 0 {
		return true
	}
	for _, v := range append(slices.Clone(a.Loads), a.PythonLoads...) {
		if !v.OK() {
			return true
		}
	}
	return false
}

// Unfit is the refusal of --check ROOT when the payload does not fit the
// image: a file of a tree that does not load against it (a native
// tree's, or a compiled extension of a python tree), a capability
// withdrawn for it, or a distribution that shadows the image's at
// another version. --check exits 69 for it (65, a drifted patch, first).
type Unfit struct{ Audit *Audit }

func (e *Unfit) Error() string { return e.say(false) }

// Brief is the refusal's text line (logging.Briefer): the same counts in
// fewer words; --check's own lines name each file and distribution.
func (e *Unfit) Brief() string { return e.say(true) }

func (e *Unfit) say(brief bool) string {
	words := map[bool][3]string{
		false: {"distributions shadow the image's", "trees hold files that do not load against it", "trees have capabilities not granted"},
		true:  {"distributions shadow the image's", "trees have files that do not load", "trees lose capabilities"},
	}[brief]
	var what []string
	if n := len(e.Audit.Shadows); n > 0 {
		what = append(what, fmt.Sprintf("%d %s", n, words[0]))
	}
	bad := 0
	for _, v := range append(slices.Clone(e.Audit.Loads), e.Audit.PythonLoads...) {
		if !v.OK() {
			bad++
		}
	}
	if bad > 0 {
		what = append(what, fmt.Sprintf("%d %s", bad, words[1]))
	}
	if n := len(e.Audit.Withdrawn); n > 0 {
		what = append(what, fmt.Sprintf("%d %s", n, words[2]))
	}
	return fmt.Sprintf("the payload %s does not fit the image %s: %s", e.Audit.Payload, e.Audit.Image, strings.Join(what, "; "))
}

// ExitCode is EX_UNAVAILABLE, as a start that requires the capability.
func (e *Unfit) ExitCode() int { return 69 }

// Failure is the audit's refusal, nil when it found nothing.
func (a *Audit) Failure() error {
	if a == nil || !a.Problems() {
		return nil
	}
	return &Unfit{Audit: a}
}

// TextLines is the audit for a terminal, readable in 80 columns: trees
// are named relative to the payload, long lines wrap.
func (a *Audit) TextLines() []string {
	var out []string
	defer func() { out = wrap(out, 80) }()
	rel := func(p string) string {
		if r, err := filepath.Rel(a.Payload, p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return p
	}
	if a.Note != "" {
		out = append(out, a.Note)
	}
	for _, s := range a.Shadows {
		out = append(out, "WARN  shadow: "+s.String())
	}
	for _, v := range a.Loads {
		out = append(out, loadLines("native tree", "ELF files", v, rel)...)
	}
	for _, v := range a.PythonLoads {
		if v.Error != "" || v.Checked > 0 {
			out = append(out, loadLines("python tree", "compiled extensions and libraries", v, rel)...)
		}
	}
	trees := make([]string, 0, len(a.Withdrawn))
	for t := range a.Withdrawn {
		trees = append(trees, t)
	}
	sort.Strings(trees)
	for _, t := range trees {
		for _, w := range a.Withdrawn[t] {
			out = append(out, fmt.Sprintf("WARN  capability of tree %s not granted: %s", t, w))
		}
	}
	if len(a.Shadows) == 0 {
		out = append(out, "ok    no payload Python tree shadows a distribution of "+a.Image+" at another version")
	}
	return out
}

// wrap breaks lines longer than width at spaces, continuing under the
// text after the six-column verdict; a word longer than a line stays whole.
func wrap(lines []string, width int) []string {
	var out []string
	for _, l := range lines {
		for len(l) > width {
			i := strings.LastIndexByte(l[:width], ' ')
			if i <= 6 {
				break
			}
			out = append(out, l[:i])
			l = "      " + strings.TrimLeft(l[i:], " ")
		}
		out = append(out, l)
	}
	return out
}

// WriteText prints the audit under a title line, for --doctor and --check.
func (a *Audit) WriteText(w io.Writer, title string) {
	if a == nil {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	for _, l := range a.TextLines() {
		fmt.Fprintln(w, l)
	}
}

// InstalledAudit is what --install says about the trees it installed
// into dest: the load check needs the engine image's libraries, and the
// overlay image (FROM scratch) has no C library, so there the check is
// left to the start, which runs it against the engine image.
func InstalledAudit(dest string) []string {
	if elfload.NewLoader("/", nil).Find("libc.so.6") == "" {
		return []string{"native tree load check: not run here (this image has no C library); infera-exec runs it at start against the engine image"}
	}
	audit, err := AuditPayload(dest, overlay.Image{Root: "/"})
	if err != nil {
		return nil
	}
	return audit.TextLines()
}

// AuditImageRoot audits the payload against an unpacked image root
// (--check ROOT); nil when root is a bare site-packages directory, which
// has no libraries to load against.
func AuditImageRoot(payload, root string) *Audit {
	if fi, err := os.Stat(filepath.Join(root, "usr")); err != nil || !fi.IsDir() {
		return nil
	}
	audit, err := AuditPayload(payload, overlay.Image{Root: root})
	if err != nil {
		return nil
	}
	return audit
}
