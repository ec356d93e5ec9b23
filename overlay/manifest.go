package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
	"github.com/bmatcuk/doublestar/v4"
	goversion "github.com/hashicorp/go-version"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/logging"
)

// ManifestName describes a payload's trees, when present at its root;
// without it the v0.2.2 layout (py3XX/, native/rocmN-py3XX/) is read as an
// implied manifest.
const ManifestName = "payload.toml"

// Manifest is payload.toml.
type Manifest struct {
	Schema int        `toml:"schema"`
	Trees  []TreeSpec `toml:"tree"`
}

// TreeSpec is one tree: where it is, which containers it matches, what it
// puts on the search paths, and the evidence for each capability.
type TreeSpec struct {
	Name          string              `toml:"name" json:"name"`
	Kind          string              `toml:"kind" json:"kind"` // python or native
	Dir           string              `toml:"dir" json:"dir"`   // relative to the payload root
	Python        string              `toml:"python" json:"python"`
	ROCm          string              `toml:"rocm" json:"rocm,omitempty"`
	PythonPath    []string            `toml:"pythonpath" json:"pythonpath,omitempty"`
	LibraryPath   []string            `toml:"ld_library_path" json:"ld_library_path,omitempty"`
	Path          []string            `toml:"path" json:"path,omitempty"`
	Capabilities  map[string][]string `toml:"capabilities" json:"capabilities,omitempty"`
	pyConstraint  goversion.Constraints
	rocmConstrain goversion.Constraints
}

var treeNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`) })

// ReadManifest reads and checks root/payload.toml. Unknown keys, trees
// that leave the payload, evidence globs that leave their tree and
// malformed constraints are errors naming the file and the tree.
func ReadManifest(root string) (*Manifest, error) {
	file := filepath.Join(root, ManifestName)
	data, err := boundedread.File(file, boundedread.Manifest)
	if err != nil {
		return nil, &Error{file, boundedread.Reason(err)}
	}
	var m Manifest
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&m)
	if err != nil {
		return nil, &Error{file, err}
	}
	if un := md.Undecoded(); len(un) > 0 {
		var keys []string
		for _, k := range un {
			keys = append(keys, k.String())
		}
		return nil, &Error{file, fmt.Errorf("unknown keys %s", strings.Join(keys, ", "))}
	}
	if m.Schema != 1 {
		return nil, &Error{file, fmt.Errorf("schema = %d; this infera-exec reads schema = 1", m.Schema)}
	}
	if len(m.Trees) == 0 {
		return nil, &Error{file, errors.New("no [[tree]]")}
	}
	seen := map[string]bool{}
	for i := range m.Trees {
		t := &m.Trees[i]
		if err := t.check(root); err != nil {
			return nil, &Error{file, fmt.Errorf("tree %d (%s): %w", i+1, t.Name, err)}
		}
		if seen[t.Name] {
			return nil, &Error{file, fmt.Errorf("tree name %q is used twice", t.Name)}
		}
		seen[t.Name] = true
	}
	return &m, nil
}

func (t *TreeSpec) check(root string) error {
	if !treeNameRE().MatchString(t.Name) {
		return fmt.Errorf("name %q: letters, digits, '.', '_' and '-'", t.Name)
	}
	switch t.Kind {
	case "python":
		if t.ROCm != "" || len(t.Capabilities) > 0 || len(t.LibraryPath) > 0 {
			return errors.New("a python tree has no rocm, ld_library_path or capabilities (those belong to native trees)")
		}
	case "native":
		if t.ROCm == "" {
			return errors.New("a native tree needs rocm, a constraint on the ROCm major such as \">= 7, < 8\"")
		}
	default:
		return fmt.Errorf("kind %q: python or native", t.Kind)
	}
	if err := relInside(t.Dir); err != nil {
		return fmt.Errorf("dir: %w", err)
	}
	if fi, err := os.Stat(filepath.Join(root, t.Dir)); err != nil || !fi.IsDir() {
		return fmt.Errorf("dir %q is not a directory of the payload", t.Dir)
	}
	if err := staysInside(root, filepath.Join(root, t.Dir)); err != nil {
		return fmt.Errorf("dir %q: %w", t.Dir, err)
	}
	var err error
	if t.pyConstraint, err = goversion.NewConstraint(t.Python); err != nil || t.Python == "" {
		return fmt.Errorf("python %q: a constraint on the CPython version such as \"= 3.12\" or \">= 3.10, < 3.13\"", t.Python)
	}
	if t.ROCm != "" {
		if t.rocmConstrain, err = goversion.NewConstraint(t.ROCm); err != nil {
			return fmt.Errorf("rocm %q: %v", t.ROCm, err)
		}
	}
	for _, list := range [][]string{t.PythonPath, t.LibraryPath, t.Path} {
		for _, d := range list {
			if d != "." {
				if err := relInside(d); err != nil {
					return fmt.Errorf("search path %q: %w", d, err)
				}
			}
			if err := staysInside(root, filepath.Join(root, t.Dir, d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("search path %q: %w", d, err)
			}
		}
	}
	for c, globs := range t.Capabilities {
		if len(globs) == 0 {
			return fmt.Errorf("capability %s has no evidence: name at least one file that must exist for it", c)
		}
		for _, g := range globs {
			if err := checkGlob(g); err != nil {
				return fmt.Errorf("capability %s: %w", c, err)
			}
		}
	}
	return nil
}

// relInside refuses absolute and escaping paths.
func relInside(p string) error {
	switch {
	case p == "":
		return errors.New("empty")
	case path.IsAbs(p):
		return fmt.Errorf("%q is absolute; paths are relative to the payload", p)
	case path.Clean(p) != p, p == "..", strings.HasPrefix(p, "../"):
		return fmt.Errorf("%q is not a clean path inside the payload", p)
	}
	return nil
}

// matches reports whether the tree is for CPython py (e.g. "3.12") and,
// for native trees, ROCm major rocm (0: no ROCm), and why not.
func (t *TreeSpec) matches(py string, rocm int) (bool, string) {
	v, err := goversion.NewVersion(py)
	if err != nil {
		return false, "no CPython version"
	}
	if !t.pyConstraint.Check(v) {
		return false, fmt.Sprintf("CPython %s is not %s", py, t.Python)
	}
	if t.Kind != "native" {
		return true, fmt.Sprintf("CPython %s is %s", py, t.Python)
	}
	if rocm == 0 {
		return false, "the container has no ROCm"
	}
	rv, _ := goversion.NewVersion(fmt.Sprint(rocm))
	if !t.rocmConstrain.Check(rv) {
		return false, fmt.Sprintf("ROCm %d is not %s", rocm, t.ROCm)
	}
	return true, fmt.Sprintf("CPython %s is %s, ROCm %d is %s", py, t.Python, rocm, t.ROCm)
}

// searchDirs resolves a tree's search paths; defaults: the tree itself on
// PYTHONPATH, lib/ and bin/ when they exist.
func (t *TreeSpec) searchDirs(root string) (pythonPath, libPath, binPath []string) {
	dir := filepath.Join(root, t.Dir)
	resolve := func(list []string, def string) []string {
		if list == nil {
			if def == "." {
				return []string{dir}
			}
			if isDir(filepath.Join(dir, def)) {
				return []string{filepath.Join(dir, def)}
			}
			return nil
		}
		var out []string
		for _, d := range list {
			out = append(out, filepath.Join(dir, d))
		}
		return out
	}
	pythonPath = resolve(t.PythonPath, ".")
	if t.Kind == "native" {
		libPath = resolve(t.LibraryPath, "lib")
	}
	binPath = resolve(t.Path, "bin")
	return
}

// openManifest fills p from root/payload.toml.
func (p *Payload) openManifest() error {
	m, err := ReadManifest(p.Root)
	if err != nil {
		return err
	}
	p.Manifest, p.ManifestFile = m, filepath.Join(p.Root, ManifestName)
	for i := range m.Trees {
		t := &m.Trees[i]
		if t.Kind == "python" {
			p.PyTrees = append(p.PyTrees, t.Name)
			continue
		}
		dir := filepath.Join(p.Root, t.Dir)
		p.NativeTrees = append(p.NativeTrees, NativeTree{Name: t.Name, Dir: dir, Declared: slices.Sorted(maps.Keys(t.Capabilities)), Evidence: t.Capabilities, spec: t})
	}
	return nil
}

// selectManifest picks, in manifest order, the first python tree and the
// first native tree that match the family; later matches are listed as
// considered, with the reason they were not taken.
func (p *Payload) selectManifest(f abi.Family, s *Selection) error {
	py, rocm := f.Python.Version(), 0
	if f.ROCm.Found {
		rocm = f.ROCm.Major
	}
	var pyTree *TreeSpec
	var native *NativeTree
	var why []string
	for i := range p.Manifest.Trees {
		t := &p.Manifest.Trees[i]
		ok, reason := t.matches(py, rocm)
		c := Candidate{Name: t.Name, Kind: t.Kind, Dir: filepath.Join(p.Root, t.Dir), Matched: ok, Why: reason}
		switch {
		case ok && t.Kind == "python" && pyTree == nil:
			pyTree, c.Chosen = t, true
		case ok && t.Kind == "native" && native == nil:
			for j := range p.NativeTrees {
				if p.NativeTrees[j].spec == t {
					native = &p.NativeTrees[j]
				}
			}
			c.Chosen = true
		case ok:
			c.Why += "; not taken: an earlier " + t.Kind + " tree matched (trees are tried in " + ManifestName + " order)"
		}
		if t.Kind == "python" {
			why = append(why, fmt.Sprintf("%s (%s)", t.Name, reason))
		}
		s.Considered = append(s.Considered, c)
	}
	if pyTree == nil {
		return &Error{p.ManifestFile, logging.WithBrief(fmt.Errorf("no python tree matches CPython %s (%s); python trees: %s", py, f.Python.DecidedBy, listOrNone(why)),
			fmt.Sprintf("no python tree matches CPython %s; python trees: %s (why not each: the record's detail)", py, listOrNone(p.PyTrees)))}
	}
	pp, _, bin := pyTree.searchDirs(p.Root)
	s.PyTree = pp[0]
	switch {
	case native != nil:
		s.Native = native
		npp, nlib, nbin := native.spec.searchDirs(p.Root)
		s.PythonPath = append(s.PythonPath, npp...)
		s.LibraryPath = append(s.LibraryPath, nlib...)
		s.Path = append(s.Path, nbin...)
	case !f.ROCm.Found:
		s.NoNativeWhy = noROCmWhy(f)
	default:
		s.NoNativeWhy = fmt.Sprintf("no native tree in %s matches %s", ManifestName, f.Name())
		s.Warnings = append(s.Warnings, fmt.Sprintf("no native tree in %s matches %s (native trees: %s); without one the worker gets no native extensions", p.ManifestFile, f.Name(), listOrNone(p.nativeNames())))
	}
	s.PythonPath = append(s.PythonPath, pp...)
	s.Path = append(s.Path, bin...)
	return nil
}

// checkGlob refuses an evidence glob that is not a valid pattern or could
// match outside the tree.
func checkGlob(g string) error {
	switch {
	case g == "":
		return fmt.Errorf("empty evidence glob")
	case strings.HasPrefix(g, "/"):
		return fmt.Errorf("evidence glob %q is absolute; globs are relative to the tree", g)
	case !doublestar.ValidatePattern(g):
		return fmt.Errorf("evidence glob %q is not a valid pattern", g)
	}
	for _, part := range strings.Split(g, "/") {
		if part == ".." {
			return fmt.Errorf("evidence glob %q leaves the tree", g)
		}
	}
	if path.Clean(g) != g && !strings.HasSuffix(g, "/") {
		return fmt.Errorf("evidence glob %q is not a clean path pattern", g)
	}
	return nil
}
