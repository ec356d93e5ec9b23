package overlay

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	goversion "github.com/hashicorp/go-version"

	"github.com/infera/infera-exec/internal/distinfo"
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

// PythonTreeVersions maps each python tree's directories to the CPython
// version it is for ("3.12"): a manifest tree pinned to one version, a
// v0.2.2 tree by its name (py312). Trees for a range are left out.
func (p *Payload) PythonTreeVersions() map[string]string {
	out := map[string]string{}
	if p.Manifest != nil {
		for i := range p.Manifest.Trees {
			t := &p.Manifest.Trees[i]
			if t.Kind != "python" {
				continue
			}
			pp, _, _ := t.searchDirs(p.Root)
			if m := pyConstraintRE().FindStringSubmatch(strings.TrimSpace(t.Python)); m != nil {
				for _, d := range pp {
					out[d] = m[1]
				}
			}
		}
		return out
	}
	for _, t := range p.PyTrees {
		if m := pyNameRE().FindStringSubmatch(t); m != nil {
			out[filepath.Join(p.Root, t)] = "3." + m[1]
		}
	}
	return out
}

var pyNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^py3(\d+)$`) })
var pyConstraintRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^=\s*(3\.\d+)$`) })

// LibraryDirs are the directories a native tree puts on LD_LIBRARY_PATH:
// its manifest's ld_library_path, or lib/ of a v0.2.2 tree.
func (p *Payload) LibraryDirs(t *NativeTree) []string {
	if t.spec != nil {
		_, lib, _ := t.spec.searchDirs(p.Root)
		return lib
	}
	if d := filepath.Join(t.Dir, "lib"); isDir(d) {
		return []string{d}
	}
	return nil
}

// NativeLibsFor are the library directories of the native trees for
// CPython py ("3.12"): a manifest tree whose python constraint admits it,
// an implied tree named "...-py3XX".
func (p *Payload) NativeLibsFor(py string) []string {
	var out []string
	for i := range p.NativeTrees {
		t := &p.NativeTrees[i]
		if t.spec != nil {
			if v, err := goversion.NewVersion(py); err == nil && t.spec.pyConstraint.Check(v) {
				out = append(out, p.LibraryDirs(t)...)
			}
			continue
		}
		if strings.HasSuffix(t.Name, "-py"+strings.ReplaceAll(py, ".", "")) {
			out = append(out, p.LibraryDirs(t)...)
		}
	}
	return out
}

// NoteLines are what the install had to change in DEST (modes, entries of
// another uid); none for a nil result.
func (r *InstallResult) NoteLines() []string {
	if r == nil {
		return nil
	}
	return r.Notes
}

// Summary is the line --install ends with: what it installed where.
func (r *InstallResult) Summary() string {
	return fmt.Sprintf("installed the payload %s into %s: %d entries, %d copied, %d already identical, %d removed",
		r.Source, r.Dest, r.Entries, len(r.Copied), r.Unchanged, len(r.Removed))
}
