package overlay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/progress"
)

// IndexName is the payload index at the payload root: every entry with
// its type, mode, size and SHA-256, written when the payload is built.
// --install copies exactly what it lists and checks every byte against it.
const IndexName = "payload.index.json"

// OutMarker is the file the build tools (infera-payload) write into a
// directory they produced, so that a later run may replace it. It is not
// part of the payload: the index does not list it, so neither --install
// nor the image carries it.
const OutMarker = ".infera-payload-out"

// Index lists a payload. EnvNames, written before the entries so that a
// start can read it without decoding them (PayloadEnvNames), are the
// INFERA_* variables the payload's Python code reads, collected by
// `infera-payload index`; an index written before the field existed has
// none, and reads as it did.
type Index struct {
	Schema   int      `json:"schema"`
	EnvNames []string `json:"infera_env,omitempty"`
	Entries  []Entry  `json:"entries"`
}

// Entry is one file, directory or symlink of a payload.
type Entry struct {
	Path   string `json:"path"` // relative, slash-separated, clean
	Type   string `json:"type"` // dir, file, symlink
	Mode   string `json:"mode,omitempty"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Target string `json:"target,omitempty"` // symlink target, relative, inside the payload
}

// Perm is the entry's permission bits.
func (e Entry) Perm() fs.FileMode {
	n, _ := strconv.ParseUint(e.Mode, 8, 32)
	return fs.FileMode(n) & fs.ModePerm
}

// BuildIndex walks root and lists it. Anything that is not a directory,
// regular file or symlink, and symlinks leading out of root, are errors:
// the payload must be copyable anywhere as it is.
func BuildIndex(root string) (*Index, error) { return BuildIndexMetered(root, nil) }

// BuildIndexMetered is BuildIndex counting on m (nil: quiet) every file,
// with its size once hashed, and every symlink. The files are hashed a
// few at a time (hashWorkers), after the walk that lists them.
func BuildIndexMetered(root string, m *progress.Meter) (*Index, error) {
	ix := &Index{Schema: 1}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." || rel == IndexName || rel == OutMarker {
			return nil
		}
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := Entry{Path: rel, Mode: fmt.Sprintf("%04o", fi.Mode().Perm())}
		switch {
		case fi.IsDir():
			e.Type = "dir"
		case fi.Mode().IsRegular():
			e.Type = "file"
			e.Size = fi.Size()
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Type, e.Mode = "symlink", ""
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
			m.Add(1, 0)
		default:
			return fmt.Errorf("payload %s: %s is a %s; a payload holds files, directories and symlinks only", root, rel, fi.Mode().Type())
		}
		if e.Type != "file" {
			if err := e.check(); err != nil {
				return fmt.Errorf("payload %s: %w", root, err)
			}
		}
		ix.Entries = append(ix.Entries, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := hashFiles(root, ix.Entries, m); err != nil {
		return nil, err
	}
	sort.Slice(ix.Entries, func(i, j int) bool { return ix.Entries[i].Path < ix.Entries[j].Path })
	if err := ix.checkLinks(); err != nil {
		return nil, fmt.Errorf("payload %s: %w", root, err)
	}
	return ix, nil
}

// hashWorkers is how many files BuildIndexMetered hashes at once.
func hashWorkers() int { return min(max(runtime.GOMAXPROCS(0), 2), 8) }

// hashFiles fills in the SHA-256 of every file entry of root, hashWorkers
// at a time; the error is that of the first file, in the entries' order,
// that failed (the rest are not hashed once one has).
func hashFiles(root string, entries []Entry, m *progress.Meter) error {
	errs := make([]error, len(entries))
	var failed atomic.Bool
	next := make(chan int)
	var wg sync.WaitGroup
	for range hashWorkers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if failed.Load() {
					continue
				}
				e := &entries[i]
				sum, err := digest.FileThrough(filepath.Join(root, filepath.FromSlash(e.Path)), m.Partial(e.Size))
				if err == nil {
					e.SHA256 = sum
					if err = e.check(); err != nil {
						err = fmt.Errorf("payload %s: %w", root, err)
					}
				}
				if err != nil {
					errs[i] = err
					failed.Store(true)
					continue
				}
				m.Add(1, e.Size)
			}
		}()
	}
	for i := range entries {
		if entries[i].Type == "file" {
			next <- i
		}
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// WriteIndex writes root's index into root.
func WriteIndex(root string) (*Index, error) { return WriteIndexEnv(root, nil) }

// WriteIndexEnv writes root's index into root, with envNames (the INFERA_*
// variables the payload's code reads) sorted and without duplicates.
func WriteIndexEnv(root string, envNames []string) (*Index, error) {
	return WriteIndexMetered(root, envNames, nil)
}

// WriteIndexMetered is WriteIndexEnv counting the entries hashed on m.
func WriteIndexMetered(root string, envNames []string, m *progress.Meter) (*Index, error) {
	ix, err := BuildIndexMetered(root, m)
	if err != nil {
		return nil, err
	}
	ix.EnvNames = sortedUnique(envNames)
	data, err := json.MarshalIndent(ix, "", " ")
	if err != nil {
		return nil, err
	}
	return ix, atomicfile.WriteBytes(filepath.Join(root, IndexName), append(data, '\n'), atomicfile.Options{Mode: 0o644})
}

// ReadIndex reads and checks root's index: every path relative and clean,
// every symlink target inside the payload, no duplicates, parents before
// children.
func ReadIndex(root string) (*Index, []byte, error) {
	p := filepath.Join(root, IndexName)
	data, err := boundedread.File(p, boundedread.Index)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("payload index %s: %w (build the payload with `make payload`, which writes it)", p, boundedread.BareErr(err))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("payload index %w", err)
	}
	var ix Index
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ix); err != nil {
		return nil, nil, fmt.Errorf("payload index %s: %w", p, err)
	}
	if ix.Schema != 1 {
		return nil, nil, fmt.Errorf("payload index %s: schema %d, this infera-exec reads schema 1", p, ix.Schema)
	}
	seen := map[string]string{}
	for _, e := range ix.Entries {
		if err := e.check(); err != nil {
			return nil, nil, fmt.Errorf("payload index %s: %w", p, err)
		}
		if _, dup := seen[e.Path]; dup {
			return nil, nil, fmt.Errorf("payload index %s: %s is listed twice", p, e.Path)
		}
		if dir := path.Dir(e.Path); dir != "." && seen[dir] != "dir" {
			return nil, nil, fmt.Errorf("payload index %s: %s comes before its directory %s", p, e.Path, dir)
		}
		seen[e.Path] = e.Type
	}
	if err := ix.checkLinks(); err != nil {
		return nil, nil, fmt.Errorf("payload index %s: %w", p, err)
	}
	return &ix, data, nil
}

// maxLinkHops is the kernel's limit on links followed in one lookup.
const maxLinkHops = 40

// checkLinks resolves every symlink of the index as the kernel would once
// the payload is installed: component by component from the link's
// directory, through the other links of the same payload. A link that
// leaves the payload on the way (a/here -> . plus a/x -> here/../..,
// which stays inside when read as text), one that passes through a path
// the payload does not have (what is there in the destination would
// decide where it leads), and a loop are refused.
func (ix *Index) checkLinks() error {
	byPath := make(map[string]Entry, len(ix.Entries))
	for _, e := range ix.Entries {
		byPath[e.Path] = e
	}
	for _, e := range ix.Entries {
		if e.Type != "symlink" {
			continue
		}
		if err := resolveLink(byPath, e); err != nil {
			return fmt.Errorf("symlink %s -> %s: %w", e.Path, e.Target, err)
		}
	}
	return nil
}

func resolveLink(byPath map[string]Entry, link Entry) error {
	var cur []string // the directory reached so far, relative to the root
	if d := path.Dir(link.Path); d != "." {
		cur = strings.Split(d, "/")
	}
	pending := strings.Split(link.Target, "/")
	hops := 1
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return errors.New("leads out of the payload")
			}
			cur = cur[:len(cur)-1]
			continue
		}
		p := strings.Join(append(append([]string(nil), cur...), c), "/")
		e, ok := byPath[p]
		switch {
		case ok && e.Type == "symlink":
			if hops++; hops > maxLinkHops {
				return fmt.Errorf("more than %d links to follow (a loop)", maxLinkHops)
			}
			if path.IsAbs(e.Target) {
				return fmt.Errorf("leads through %s, an absolute link", p)
			}
			// The link's target replaces it, relative to its directory
			// (cur, unchanged).
			pending = append(strings.Split(e.Target, "/"), pending...)
		case !ok && len(pending) > 0 && hasName(pending):
			return fmt.Errorf("leads through %s, which the payload does not have", p)
		default:
			cur = append(cur, c)
		}
	}
	return nil
}

// hasName reports whether components hold more than "." and "" (a
// trailing slash): whether the lookup goes on below the current one.
func hasName(components []string) bool {
	for _, c := range components {
		if c != "" && c != "." {
			return true
		}
	}
	return false
}

// check refuses an entry that could write outside the destination.
func (e Entry) check() error {
	if e.Path == "" || path.IsAbs(e.Path) || path.Clean(e.Path) != e.Path || e.Path == ".." || strings.HasPrefix(e.Path, "../") || e.Path == IndexName {
		return fmt.Errorf("entry %q escapes the payload or is not a clean relative path", e.Path)
	}
	switch e.Type {
	case "dir":
	case "file":
		if len(e.SHA256) != 64 || e.Size < 0 {
			return fmt.Errorf("entry %s: a file needs its size and SHA-256", e.Path)
		}
	case "symlink":
		if e.Target == "" || path.IsAbs(e.Target) {
			return fmt.Errorf("entry %s: symlink target %q must be relative to stay inside the payload", e.Path, e.Target)
		}
		if t := path.Join(path.Dir(e.Path), e.Target); t == ".." || strings.HasPrefix(t, "../") {
			return fmt.Errorf("entry %s: symlink target %q leads out of the payload", e.Path, e.Target)
		}
	default:
		return fmt.Errorf("entry %s: type %q is not dir, file or symlink", e.Path, e.Type)
	}
	return nil
}

var errMismatch = errors.New("does not match the payload index")
