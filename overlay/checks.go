package overlay

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	goversion "github.com/hashicorp/go-version"

	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/internal/distinfo"
	"github.com/infera/infera-exec/internal/elfload"
)

// Image is the image the payload's trees will run in, as the checks of
// the trees see it.
type Image struct {
	Root        string   // "/" at start; an unpacked image root for --check
	LibraryPath []string // LD_LIBRARY_PATH of the worker before the trees are added
	IndexFile   string   // the payload index (keys the cached load verdict); "" = none
	CacheDir    string   // where the load verdict is kept; "" = check every time
}

// ImageAt is the image at root whose worker starts with the given
// LD_LIBRARY_PATH. Empty entries are dropped: the loader reads one as the
// working directory, which the check cannot know.
func ImageAt(root, ldLibraryPath string) Image {
	img := Image{Root: root}
	for _, d := range filepath.SplitList(ldLibraryPath) {
		if d != "" {
			img.LibraryPath = append(img.LibraryPath, d)
		}
	}
	return img
}

// Shadow is a distribution of a payload tree that the image has at
// another version: first on PYTHONPATH, the tree's copy wins.
type Shadow struct {
	Name        string `json:"name"`
	Tree        string `json:"tree"`
	TreeVersion string `json:"tree_version"`
	Image       string `json:"image"` // the image's site directory
	Version     string `json:"image_version"`
}

func (s Shadow) String() string {
	return fmt.Sprintf("%s %s in %s shadows the image's %s %s (%s); remove it from the tree with 'infera-payload prune -tree TREE -base IMAGE_ROOT'",
		s.Name, s.TreeVersion, s.Tree, s.Name, s.Version, s.Image)
}

// distNames reads a site directory's distributions from the names of
// their metadata directories only ("numpy-2.3.5.dist-info"): one
// directory listing, no file read, no interpreter.
func distNames(dir string) map[string]string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, e := range entries {
		if name, version, ok := metaDirName(e.Name()); ok {
			out[distinfo.Canonical(name)] = version
		}
	}
	return out
}

// Shadows lists the distributions of the trees (directories on
// PYTHONPATH) that the image's site directories for CPython py ("3.12")
// hold at another version. The first site directory holding a name is
// the image's copy.
func Shadows(trees []string, imageRoot, py string) []Shadow {
	// The trees' names first: trees without distributions (the common
	// restart of a payload of native trees alone) shadow nothing, and the
	// image's site directories are not listed at all.
	treeNames := make([]map[string]string, len(trees))
	some := false
	for i, t := range trees {
		treeNames[i] = distNames(t)
		some = some || len(treeNames[i]) > 0
	}
	if !some {
		return nil
	}
	var sites []string
	for _, s := range distinfo.SiteDirs(imageRoot) {
		if strings.Contains(s, "/python"+py+"/") || strings.HasSuffix(s, "/python3/dist-packages") {
			sites = append(sites, s)
		}
	}
	image := map[string][2]string{}
	for _, s := range sites {
		for n, v := range distNames(s) {
			if _, ok := image[n]; !ok {
				image[n] = [2]string{v, s}
			}
		}
	}
	var out []Shadow
	for i, t := range trees {
		names := treeNames[i]
		keys := make([]string, 0, len(names))
		for n := range names {
			keys = append(keys, n)
		}
		sort.Strings(keys)
		for _, n := range keys {
			if in, ok := image[n]; ok && in[0] != names[n] {
				out = append(out, Shadow{Name: n, Tree: t, TreeVersion: names[n], Image: in[1], Version: in[0]})
			}
		}
	}
	return out
}

// loadInput is the load check of the selection's native tree against
// img: the tree's library directories first, as the worker's
// LD_LIBRARY_PATH will have them.
func (s *Selection) loadInput(img Image) *capability.LoadInput {
	if s.Native == nil {
		return nil
	}
	libPath := append(append([]string{}, s.LibraryPath...), img.LibraryPath...)
	return &capability.LoadInput{Dir: s.Native.Dir, ImageRoot: img.Root, LibraryPath: libPath, IndexFile: img.IndexFile, CacheDir: img.CacheDir}
}

// Audit is what --doctor, --check and --install say about a payload's
// trees against an image: version shadows of every python tree, and the
// load check of every native tree.
type Audit struct {
	Payload string                    `json:"payload"`
	Image   string                    `json:"image"`
	Shadows []Shadow                  `json:"shadows,omitempty"`
	Loads   []*capability.LoadVerdict `json:"loads,omitempty"`
	// The compiled extensions of python trees (pip install --target pulls
	// wheels with them), each against the image with the library
	// directories of the native trees for the same CPython.
	PythonLoads []*capability.LoadVerdict `json:"python_loads,omitempty"`
	Withdrawn   map[string][]string       `json:"withdrawn,omitempty"` // tree -> capability: reason
	Note        string                    `json:"note,omitempty"`
}

var pyNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^py3(\d+)$`) })
var pyConstraintRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^=\s*(3\.\d+)$`) })

// AuditPayload opens the payload at root and checks all its trees
// against img (no family is known: every tree is checked).
func AuditPayload(root string, img Image) (*Audit, error) {
	p, err := Open(root)
	if err != nil {
		return nil, err
	}
	a := &Audit{Payload: root, Image: img.Root, Withdrawn: map[string][]string{}}
	pyTrees := map[string]string{} // dir -> CPython version
	natives := []NativeTree{}
	if p.Manifest != nil {
		for i := range p.Manifest.Trees {
			t := &p.Manifest.Trees[i]
			if t.Kind == "python" {
				pp, _, _ := t.searchDirs(p.Root)
				if m := pyConstraintRE().FindStringSubmatch(strings.TrimSpace(t.Python)); m != nil {
					for _, d := range pp {
						pyTrees[d] = m[1]
					}
				}
			}
		}
	} else {
		for _, t := range p.PyTrees {
			if m := pyNameRE().FindStringSubmatch(t); m != nil {
				pyTrees[filepath.Join(p.Root, t)] = "3." + m[1]
			}
		}
	}
	natives = append(natives, p.NativeTrees...)
	dirs := make([]string, 0, len(pyTrees))
	for d := range pyTrees {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		a.Shadows = append(a.Shadows, Shadows([]string{d}, img.Root, pyTrees[d])...)
	}
	for _, d := range dirs {
		libPath := append(nativeLibsFor(p, natives, pyTrees[d]), img.LibraryPath...)
		a.PythonLoads = append(a.PythonLoads, capability.CheckLoads(capability.LoadInput{Dir: d, ImageRoot: img.Root, LibraryPath: libPath}))
	}
	for i := range natives {
		t := natives[i]
		s := &Selection{Native: &t}
		if t.spec != nil {
			_, s.LibraryPath, _ = t.spec.searchDirs(p.Root)
		} else if d := filepath.Join(t.Dir, "lib"); isDir(d) {
			s.LibraryPath = []string{d}
		}
		v := capability.CheckLoads(*s.loadInput(Image{Root: img.Root, LibraryPath: img.LibraryPath}))
		a.Loads = append(a.Loads, v)
		if t.Evidence != nil {
			_, ev := capability.ApplyLoads(t.Dir, t.Evidence, v)
			for _, e := range ev {
				if r := e.Refusal(); r != "" {
					a.Withdrawn[t.Name] = append(a.Withdrawn[t.Name], e.Capability+": "+r)
				}
			}
		}
	}
	return a, nil
}

// nativeLibsFor are the library directories of the native trees for
// CPython py ("3.12"): a manifest tree whose python constraint admits it,
// an implied tree named "...-py3XX".
func nativeLibsFor(p *Payload, natives []NativeTree, py string) []string {
	var out []string
	for _, t := range natives {
		if t.spec != nil {
			if v, err := goversion.NewVersion(py); err == nil && t.spec.pyConstraint.Check(v) {
				_, lib, _ := t.spec.searchDirs(p.Root)
				out = append(out, lib...)
			}
			continue
		}
		if strings.HasSuffix(t.Name, "-py"+strings.ReplaceAll(py, ".", "")) {
			if d := filepath.Join(t.Dir, "lib"); isDir(d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// loadLines is one tree's load check as the audit prints it: ok, or a
// warning with every file that does not load and why.
func loadLines(kind, files string, v *capability.LoadVerdict, rel func(string) string) []string {
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

func (e *Unfit) Error() string {
	var what []string
	if n := len(e.Audit.Shadows); n > 0 {
		what = append(what, fmt.Sprintf("%d distributions shadow the image's", n))
	}
	bad := 0
	for _, v := range append(slices.Clone(e.Audit.Loads), e.Audit.PythonLoads...) {
		if !v.OK() {
			bad++
		}
	}
	if bad > 0 {
		what = append(what, fmt.Sprintf("%d trees hold files that do not load against it", bad))
	}
	if n := len(e.Audit.Withdrawn); n > 0 {
		what = append(what, fmt.Sprintf("%d trees have capabilities not granted", n))
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
	audit, err := AuditPayload(dest, Image{Root: "/"})
	if err != nil {
		return nil
	}
	return audit.TextLines()
}

// NoteLines are what the install had to change in DEST (modes, entries of
// another uid); none for a nil result.
func (r *InstallResult) NoteLines() []string {
	if r == nil {
		return nil
	}
	return r.Notes
}

// Lines are what --install says when it is done: the counts, then the
// installed payload's audit against this image.
func (r *InstallResult) Lines() []string {
	return append([]string{fmt.Sprintf("installed the payload %s into %s: %d entries, %d copied, %d already identical, %d removed",
		r.Source, r.Dest, r.Entries, len(r.Copied), r.Unchanged, len(r.Removed))}, InstalledAudit(r.Dest)...)
}

// AuditImageRoot audits the payload against an unpacked image root
// (--check ROOT); nil when root is a bare site-packages directory, which
// has no libraries to load against.
func AuditImageRoot(payload, root string) *Audit {
	if fi, err := os.Stat(filepath.Join(root, "usr")); err != nil || !fi.IsDir() {
		return nil
	}
	audit, err := AuditPayload(payload, Image{Root: root})
	if err != nil {
		return nil
	}
	return audit
}
