package capability

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
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
const loadCacheVersion = 2

// loadCache is kept as JSON: it is read on every restart.
type loadCache struct {
	Version   int                        `json:"version"`
	Key       string                     `json:"key"`       // tree, root, library path
	Index     fileid.Identity            `json:"index"`     // the index file's identity
	IndexHash string                     `json:"index_sha"` // and digest
	Consulted map[string]fileid.Identity `json:"consulted"` // path -> identity
	Verdict   LoadVerdict                `json:"verdict"`
}

// CheckLoads checks every ELF of the tree against the image (elfload's
// closure check, the one infera-payload harvest proves trees with). The
// verdict is reused while the payload index and every file and directory
// the check consulted are unchanged (device, inode, size, mtime, ctime):
// a restart costs stat calls only. Any difference is a full check.
func CheckLoads(in LoadInput) *LoadVerdict {
	key := strings.Join(append([]string{in.Dir, in.ImageRoot}, in.LibraryPath...), "\x00")
	cacheFile := ""
	var indexID fileid.Identity
	indexHash := ""
	if in.CacheDir != "" {
		cacheFile = filepath.Join(in.CacheDir, "native-load-"+digest.Bytes([]byte(key))[:16]+".json")
		if in.IndexFile != "" {
			var ok bool
			if indexID, ok = fileid.Stat(in.IndexFile); !ok {
				cacheFile = "" // an index that cannot be stat'ed keys nothing
			}
		}
		if cacheFile != "" {
			if v, ok := cachedVerdict(cacheFile, key, in.IndexFile, indexID, &indexHash); ok {
				return v
			}
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
	if cacheFile != "" {
		if in.IndexFile != "" && indexHash == "" {
			indexHash, _ = digest.File(in.IndexFile)
		}
		c := loadCache{Version: loadCacheVersion, Key: key, Index: indexID, IndexHash: indexHash, Consulted: map[string]fileid.Identity{}, Verdict: *v}
		trusted := in.IndexFile == "" || !indexID.Racy(started)
		for _, p := range l.Consulted() {
			// An identity that cannot be taken, or that shows a change
			// from just before the check began on (the check may have read
			// the old bytes), does not key a verdict.
			id, ok := fileid.Stat(p)
			trusted = trusted && ok && !id.Racy(started)
			c.Consulted[p] = id
		}
		// Only into a directory that is infera-exec's own; not fsynced: a
		// verdict lost to a power cut is checked again.
		if b, err := json.Marshal(&c); trusted && err == nil {
			statedir.WriteCache(in.CacheDir, filepath.Base(cacheFile), b)
		}
	}
	return v
}

// cachedVerdict returns the cached verdict when its key matches: the same
// payload index (same identity, or the same digest when it was replaced
// by an identical copy) and every consulted path as it was.
func cachedVerdict(file, key, indexFile string, indexID fileid.Identity, indexHash *string) (*LoadVerdict, bool) {
	data, ok := statedir.ReadCache(filepath.Dir(file), filepath.Base(file), boundedread.Manifest)
	if !ok {
		return nil, false
	}
	var c loadCache
	if json.Unmarshal(data, &c) != nil || c.Version != loadCacheVersion || c.Key != key || len(c.Consulted) == 0 {
		return nil, false
	}
	if c.Index != indexID {
		if indexFile == "" {
			return nil, false
		}
		*indexHash, _ = digest.File(indexFile)
		if *indexHash == "" || *indexHash != c.IndexHash {
			return nil, false
		}
	}
	for p, want := range c.Consulted {
		if id, ok := fileid.Stat(p); !ok || id != want {
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
	files := make([]string, 0, len(e.DoesNotLoad))
	for f := range e.DoesNotLoad {
		files = append(files, f)
	}
	sort.Strings(files)
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

// FirstFailure is the first file (by name) that does not load, and why.
func (v *LoadVerdict) FirstFailure() string {
	files := make([]string, 0, len(v.Failed))
	for f := range v.Failed {
		files = append(files, f)
	}
	sort.Strings(files)
	if len(files) == 0 {
		return ""
	}
	return files[0] + ": " + strings.Join(v.Failed[files[0]], "; ")
}
