// Package overlay reads the payload mounted next to the stock engine image
// and picks the trees made for the container's ABI family.
//
// Layout (v0.2.2, unchanged):
//
//	<root>/bin/                         prepended to PATH
//	<root>/py3XX/                       pure-Python tree, prepended to PYTHONPATH
//	<root>/native/rocmN-py3XX/          native tree, prepended to PYTHONPATH
//	<root>/native/rocmN-py3XX/lib/      prepended to LD_LIBRARY_PATH
//	<root>/native/rocmN-py3XX/bin/      prepended to PATH
//	<root>/native/rocmN-py3XX/CAPABILITIES
package overlay

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/logging"
)

// Payload is an opened payload root.
type Payload struct {
	Root         string       `json:"root"`
	ManifestFile string       `json:"manifest,omitempty"` // payload.toml; empty: the v0.2.2 layout
	PyTrees      []string     `json:"python_trees"`
	NativeTrees  []NativeTree `json:"native_trees"`
	Bin          string       `json:"bin,omitempty"`
	Manifest     *Manifest    `json:"-"`
}

// NativeTree is one native tree and the capabilities it declares. The
// declaration is a claim: the capability step checks it (the evidence
// globs match, the files load) before granting anything.
type NativeTree struct {
	Name string `json:"name"`
	Dir  string `json:"dir"`
	// Declared are the capability names the tree claims, sorted: its
	// CAPABILITIES file's, or its manifest entry's.
	Declared []string `json:"capabilities"`
	// Evidence is, for a manifest tree, each capability's globs: files
	// that must exist in the tree for it to be granted. nil for a tree of
	// the v0.2.2 layout, whose CAPABILITIES file names no evidence.
	Evidence map[string][]string `json:"evidence,omitempty"`
	CapFile  string              `json:"capabilities_file,omitempty"` // empty: no CAPABILITIES file
	CapNotes []string            `json:"capabilities_notes,omitempty"`
	spec     *TreeSpec
}

// Candidate is a tree considered for this container, and why it was or
// was not taken.
type Candidate struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Dir     string `json:"dir"`
	Matched bool   `json:"matched"`
	Chosen  bool   `json:"chosen"`
	Why     string `json:"why"`
}

// Error is a payload that cannot be used. Every one names the path.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("payload %s: %v", e.Path, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Open reads the payload layout under root. It reads directory listings and
// the small CAPABILITIES files, nothing else.
func Open(root string) (*Payload, error) {
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &Error{root, errors.New("does not exist; mount the payload there or set PAYLOAD_ROOT")}
	case err != nil:
		return nil, &Error{root, err}
	case !fi.IsDir():
		return nil, &Error{root, fmt.Errorf("is not a directory (%s); PAYLOAD_ROOT must name the payload directory", kind(fi))}
	}
	if Interrupted(root) {
		return nil, &Error{root, errors.New("an infera-exec --install into it did not finish; run the install again (the init container) before starting the worker")}
	}
	p := &Payload{Root: root}
	if isDir(BinDir(root)) {
		p.Bin = BinDir(root)
	}
	if _, err := os.Lstat(filepath.Join(root, ManifestName)); err == nil {
		return p, p.openManifest()
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, &Error{root, fmt.Errorf("cannot list it: %w", boundedread.BareErr(err))}
	}
	for _, e := range entries {
		if isPyTreeName(e.Name()) && isDir(filepath.Join(root, e.Name())) {
			if err := staysInside(root, filepath.Join(root, e.Name())); err != nil {
				return nil, &Error{filepath.Join(root, e.Name()), err}
			}
			p.PyTrees = append(p.PyTrees, e.Name())
		}
	}
	sortTrees(p.PyTrees)

	nativeDir := filepath.Join(root, "native")
	entries, err = os.ReadDir(nativeDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, &Error{nativeDir, fmt.Errorf("cannot list it: %w", boundedread.BareErr(err))}
	}
	for _, e := range entries {
		dir := filepath.Join(nativeDir, e.Name())
		if !isNativeTreeName(e.Name()) || !isDir(dir) {
			continue
		}
		if err := staysInside(root, dir); err != nil {
			return nil, &Error{dir, err}
		}
		t := NativeTree{Name: e.Name(), Dir: dir}
		capFile := filepath.Join(dir, "CAPABILITIES")
		caps, notes, exists, err := readCapabilities(capFile)
		if err != nil {
			return nil, &Error{capFile, boundedread.BareErr(err)}
		}
		t.Declared, t.CapNotes = caps, notes
		if exists {
			t.CapFile = capFile
		}
		p.NativeTrees = append(p.NativeTrees, t)
	}
	sort.Slice(p.NativeTrees, func(i, j int) bool { return treeLess(p.NativeTrees[i].Name, p.NativeTrees[j].Name) })
	return p, nil
}

// Selection is what the payload gives this container.
type Selection struct {
	Family string      `json:"family"`
	PyTree string      `json:"python_tree"`           // directory
	Native *NativeTree `json:"native_tree,omitempty"` // nil: none for this family
	// NoNativeWhy is why Native is nil: a few words, then what was looked
	// in, in parentheses; a text line gives only what stands before " ("
	// (capability.Unavailable's brief).
	NoNativeWhy string      `json:"no_native_tree_why,omitempty"`
	Bin         string      `json:"bin,omitempty"`
	PythonPath  []string    `json:"pythonpath"`      // to prepend, in order
	LibraryPath []string    `json:"ld_library_path"` // to prepend
	Path        []string    `json:"path"`            // to prepend
	Warnings    []string    `json:"warnings,omitempty"`
	Considered  []Candidate `json:"considered,omitempty"`
	Shadows     []Shadow    `json:"shadows,omitempty"` // payload distributions at another version than the image's
	// Image is what the trees were chosen for: the capability step checks
	// the native tree's files against it.
	Image Image `json:"-"`
}

// Select picks the trees for f. A missing Python tree is an error listing
// the trees present; a missing native tree is a warning, since aggregated
// serving needs none.
func (p *Payload) Select(f abi.Family) (*Selection, error) {
	s := &Selection{Family: f.Name(), Bin: p.Bin}
	if p.Manifest != nil {
		if err := p.selectManifest(f, s); err != nil {
			return nil, err
		}
		if s.Bin != "" {
			s.Path = append(s.Path, s.Bin)
		}
		return s, s.checkReadable()
	}
	want := f.Python.Tree()
	for _, t := range p.PyTrees {
		c := Candidate{Name: t, Kind: "python", Dir: filepath.Join(p.Root, t), Matched: t == want, Chosen: t == want, Why: "name is not " + want}
		if c.Matched {
			c.Why = "name is " + want + " (v0.2.2 layout)"
		}
		s.Considered = append(s.Considered, c)
	}
	for _, t := range p.NativeTrees {
		c := Candidate{Name: t.Name, Kind: "native", Dir: t.Dir, Matched: t.Name == f.Name(), Chosen: t.Name == f.Name(), Why: "name is not " + f.Name()}
		if c.Matched {
			c.Why = "name is " + f.Name() + " (v0.2.2 layout)"
		}
		s.Considered = append(s.Considered, c)
	}
	if !slices.Contains(p.PyTrees, want) {
		return nil, &Error{p.Root, fmt.Errorf("no Python tree %s for CPython %s (%s); trees present: %s",
			want, f.Python.Version(), f.Python.DecidedBy, listOrNone(p.PyTrees))}
	}
	s.PyTree = filepath.Join(p.Root, want)

	switch {
	case !f.ROCm.Found:
		s.NoNativeWhy = noROCmWhy(f)
	default:
		for i := range p.NativeTrees {
			if p.NativeTrees[i].Name == f.Name() {
				s.Native = &p.NativeTrees[i]
			}
		}
		if s.Native == nil {
			s.NoNativeWhy = fmt.Sprintf("the payload has no native tree %s", f.Name())
			s.Warnings = append(s.Warnings, fmt.Sprintf("no native tree %s in %s (native trees present: %s); without one the worker gets no native extensions",
				f.Name(), filepath.Join(p.Root, "native"), listOrNone(p.nativeNames())))
		}
	}

	if s.Native != nil {
		s.PythonPath = append(s.PythonPath, s.Native.Dir)
		if d := filepath.Join(s.Native.Dir, "lib"); isDir(d) {
			s.LibraryPath = append(s.LibraryPath, d)
		}
		if d := filepath.Join(s.Native.Dir, "bin"); isDir(d) {
			s.Path = append(s.Path, d)
		}
		for _, n := range s.Native.CapNotes {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s %s", s.Native.CapFile, n))
		}
	}
	s.PythonPath = append(s.PythonPath, s.PyTree)
	if s.Bin != "" {
		s.Path = append(s.Path, s.Bin)
	}
	return s, s.checkReadable()
}

// checkReadable: a directory the worker cannot read is skipped in silence
// by Python and the loader; say so now instead of failing at import time.
func (s *Selection) checkReadable() error {
	for _, list := range [][]string{s.PythonPath, s.LibraryPath, s.Path} {
		for _, d := range list {
			if err := readableDir(d); err != nil {
				return &Error{d, err}
			}
		}
	}
	return nil
}

func readableDir(d string) error {
	if err := unix.Access(d, unix.R_OK|unix.X_OK); err != nil {
		detail := ""
		if fi, serr := os.Stat(d); serr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				detail = fmt.Sprintf(" (mode %s, owner %d:%d)", fi.Mode().Perm(), st.Uid, st.Gid)
			}
		}
		return logging.WithBrief(fmt.Errorf("not readable by uid %d%s: %w; make the payload world-readable (chmod -R a+rX)", os.Getuid(), detail, err),
			fmt.Sprintf("not readable by uid %d%s; make the payload world-readable (chmod -R a+rX)", os.Getuid(), detail))
	}
	return nil
}

func (p *Payload) nativeNames() []string {
	var out []string
	for _, t := range p.NativeTrees {
		out = append(out, t.Name)
	}
	return out
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " ")
}

// staysInside refuses a tree directory that leaves the payload through a
// symbolic link (its own or one of its parents'), resolved as the kernel
// resolves it: the payload is what infera-exec trusts, not what its links
// point at.
func staysInside(root, p string) error {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(realRoot, real); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("leaves the payload through a symbolic link (it resolves to %s)", real)
	}
	return nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func kind(fi fs.FileInfo) string {
	if fi.Mode().IsRegular() {
		return "a regular file"
	}
	return fi.Mode().Type().String()
}

// sortTrees orders py39 < py310 < py312 numerically.
func sortTrees(names []string) {
	sort.Slice(names, func(i, j int) bool { return treeLess(names[i], names[j]) })
}

func treeLess(a, b string) bool {
	na, nb := digitRuns(a), digitRuns(b)
	for i := 0; i < len(na) && i < len(nb); i++ {
		if len(na[i]) != len(nb[i]) {
			return len(na[i]) < len(nb[i])
		}
		if na[i] != nb[i] {
			return na[i] < nb[i]
		}
	}
	return a < b
}

// noROCmWhy is Selection.NoNativeWhy for a family without a ROCm major.
func noROCmWhy(f abi.Family) string {
	if f.Override != "" {
		return "INFERA_ABI_FAMILY=" + f.Override + " names no ROCm major"
	}
	return "the container has no ROCm (no libamdhip64 in " + strings.Join(f.ROCm.Searched, ", ") + ")"
}
