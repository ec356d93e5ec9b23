package capability

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/elfload"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/statedir"
)

// LoadInput is what the load check of a native tree needs: every ELF of
// the tree must load against the image as the worker's loader will see it.
type LoadInput struct {
	Dir         string   // the native tree
	ImageRoot   string   // the image's root: "/" at start, an unpacked image for --check
	LibraryPath []string // the worker's LD_LIBRARY_PATH, the tree's directories first
	IndexFile   string   // the payload index, whose digest keys the cached verdict; "" = none
	CacheDir    string   // where the verdict is kept; "" = always check
}

// LoadVerdict is the load check's answer for one tree.
type LoadVerdict struct {
	Tree    string              `json:"tree"`
	Root    string              `json:"root"`
	Checked int                 `json:"checked"`          // ELF files
	Failed  map[string][]string `json:"failed,omitempty"` // file (relative to the tree) -> what is missing
	Cached  bool                `json:"cached"`
	Error   string              `json:"error,omitempty"` // the tree could not be read
}

// OK says whether every ELF of the tree loads.
func (v *LoadVerdict) OK() bool { return v != nil && v.Error == "" && len(v.Failed) == 0 }

// loadCacheVersion changes when the cache format or the check changes.
const loadCacheVersion = 3

// loadCache is kept as JSON: it is read on every restart.
type loadCache struct {
	Version   int                  `json:"version"`
	Key       string               `json:"key"`       // tree, root, library path
	Index     *consulted           `json:"index"`     // the index file; nil = none
	Consulted map[string]consulted `json:"consulted"` // path -> what it held
	Verdict   LoadVerdict          `json:"verdict"`
}

// consulted is what a path held when the verdict was taken: its identity
// and its content (fileid.Sum, links followed), so that a new overlay
// mount of the same image, which keeps only the portable part of the
// identity, still finds the verdict while the bytes are the same.
type consulted struct {
	ID  fileid.Identity `json:"id"`
	Sum string          `json:"sum"`
}

// consult takes what path holds now. A regular file over
// fileid.SmallFile (a ROCm library can be hundreds of megabytes, of which
// the check reads only the headers and dynamic sections) is not read
// whole: it keeps its GNU build ID (fileid.LargeBuildIDOnly), which a new
// mount of the same image keeps, or, without one, its identity alone, and
// then a new mount means a full check.
func consult(path string, buf *fileid.Buffer) (consulted, bool) {
	if id, ok := fileid.Stat(path); ok && id.Mode&syscall.S_IFMT == syscall.S_IFREG && id.Size > fileid.SmallFile {
		if sum, id, _, ok := fileid.SumList(path, true, fileid.LargeBuildIDOnly, buf); ok {
			return consulted{ID: id, Sum: sum}, true
		}
		return consulted{ID: id}, true
	}
	sum, id, ok := fileid.Sum(path, true, buf)
	return consulted{ID: id, Sum: sum}, ok
}

// holds reports whether path still holds what c recorded (fileid.Check).
func (c consulted) holds(path string, buf *fileid.Buffer) bool {
	_, ok := fileid.Check(path, true, c.ID, c.Sum, buf)
	return ok
}

// CheckLoads checks every ELF of the tree against the image (elfload's
// closure check, the one infera-payload harvest proves trees with). The
// verdict is reused while the payload index and every file and directory
// the check consulted hold what they held: the same identity (a restart
// costs stat calls only) or, on a new mount of the same image, the same
// size, mode, modification time and content (files up to
// fileid.SmallFile) or build ID (larger ELF files; see consult). Any
// difference is a full check.
func CheckLoads(in LoadInput) *LoadVerdict {
	key := strings.Join(append([]string{in.Dir, in.ImageRoot}, in.LibraryPath...), "\x00")
	cacheFile := ""
	buf := &fileid.Buffer{}
	if in.CacheDir != "" {
		cacheFile = filepath.Join(in.CacheDir, "native-load-"+digest.Bytes([]byte(key))[:16]+".json")
		if v, ok := cachedVerdict(cacheFile, key, in.IndexFile, buf); ok {
			return v
		}
	}
	started := time.Now()
	l := elfload.NewLoader(in.ImageRoot, in.LibraryPath)
	v := &LoadVerdict{Tree: in.Dir, Root: in.ImageRoot}
	checks, err := l.CheckTree(in.Dir)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	v.Checked = len(checks)
	for _, c := range checks {
		if !c.OK {
			if v.Failed == nil {
				v.Failed = map[string][]string{}
			}
			rel, _ := filepath.Rel(in.Dir, c.Path)
			v.Failed[filepath.ToSlash(rel)] = c.Problems
		}
	}
	if cacheFile == "" {
		return v
	}
	// An identity that cannot be taken, or that shows a change from just
	// before the check began on (the check may have read the old bytes),
	// does not key a verdict.
	trusted := true
	take := func(p string) consulted {
		c, ok := consult(p, buf)
		trusted = trusted && ok && !c.ID.Racy(started)
		return c
	}
	c := loadCache{Version: loadCacheVersion, Key: key, Consulted: map[string]consulted{}, Verdict: *v}
	if in.IndexFile != "" {
		idx := take(in.IndexFile)
		c.Index = &idx
	}
	for _, p := range l.Consulted() {
		c.Consulted[p] = take(p)
	}
	// Only into a directory that is infera-exec's own; not fsynced: a
	// verdict lost to a power cut is checked again.
	if b, err := json.Marshal(&c); trusted && err == nil {
		statedir.WriteCache(in.CacheDir, filepath.Base(cacheFile), b)
	}
	return v
}

// cachedVerdict returns the cached verdict when its key matches: the same
// payload index and every consulted path holding what it held.
func cachedVerdict(file, key, indexFile string, buf *fileid.Buffer) (*LoadVerdict, bool) {
	data, ok := statedir.ReadCache(filepath.Dir(file), filepath.Base(file), boundedread.Manifest)
	if !ok {
		return nil, false
	}
	var c loadCache
	if json.Unmarshal(data, &c) != nil || c.Version != loadCacheVersion || c.Key != key || len(c.Consulted) == 0 {
		return nil, false
	}
	if (c.Index == nil) != (indexFile == "") || c.Index != nil && !c.Index.holds(indexFile, buf) {
		return nil, false
	}
	for p, want := range c.Consulted {
		if !want.holds(p, buf) {
			return nil, false
		}
	}
	v := c.Verdict
	v.Cached = true
	return &v, true
}

// ApplyLoads withdraws every granted capability whose evidence includes
// an ELF file that does not load, and says why in its Evidence. It returns
// the capabilities still granted.
func ApplyLoads(dir string, ev []Evidence, v *LoadVerdict) (Set, []Evidence) {
	var granted []string
	fsys := os.DirFS(dir)
	for i := range ev {
		e := &ev[i]
		if !e.Granted {
			continue
		}
		if v != nil && v.Error != "" {
			e.Granted, e.DoesNotLoad = false, map[string][]string{".": {v.Error}}
			continue
		}
		for _, g := range e.Globs {
			matches, _ := doublestar.Glob(fsys, g, doublestar.WithFilesOnly())
			sort.Strings(matches)
			for _, m := range matches {
				if probs, bad := v.Failed[m]; bad {
					if e.DoesNotLoad == nil {
						e.DoesNotLoad = map[string][]string{}
					}
					e.DoesNotLoad[m] = probs
				}
			}
		}
		if len(e.DoesNotLoad) > 0 {
			e.Granted = false
			continue
		}
		granted = append(granted, e.Capability)
	}
	return newSet(granted), ev
}

// Refusal is the one-line reason a capability was withdrawn by the load
// check, naming the first file and what it misses.
func (e Evidence) Refusal() string {
	files := slices.Sorted(maps.Keys(e.DoesNotLoad))
	if len(files) == 0 {
		return ""
	}
	first := e.DoesNotLoad[files[0]]
	more := ""
	if len(files) > 1 {
		more = fmt.Sprintf(" (and %d more files)", len(files)-1)
	}
	return fmt.Sprintf("%s does not load: %s%s", files[0], strings.Join(first, "; "), more)
}

// RefusalBrief is Refusal in a few words, for a text line: the first
// file and what it misses (elfload.ProblemBrief), without the paths and
// directories searched (Refusal has them).
func (e Evidence) RefusalBrief() string {
	files := slices.Sorted(maps.Keys(e.DoesNotLoad))
	if len(files) == 0 {
		return ""
	}
	why := ""
	if p := e.DoesNotLoad[files[0]]; len(p) > 0 {
		why = elfload.ProblemBrief(p[0])
		if len(p) > 1 {
			why += fmt.Sprintf(" (and %d more)", len(p)-1)
		}
	}
	more := ""
	if len(files) > 1 {
		more = fmt.Sprintf(" (and %d more files)", len(files)-1)
	}
	return fmt.Sprintf("%s does not load: %s%s", files[0], why, more)
}

// FirstFailure is the first file (by name) that does not load, and why.
func (v *LoadVerdict) FirstFailure() string {
	files := slices.Sorted(maps.Keys(v.Failed))
	if len(files) == 0 {
		return ""
	}
	return files[0] + ": " + strings.Join(v.Failed[files[0]], "; ")
}
