package overlay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/infera/infera-exec/atomicfile"
	"github.com/infera/infera-exec/boundedread"
	"github.com/infera/infera-exec/internal/digest"
)

// IndexName is the payload index at the payload root: every entry with
// its type, mode, size and SHA-256, written when the payload is built.
// --install copies exactly what it lists and checks every byte against it.
const IndexName = "payload.index.json"

// Index lists a payload.
type Index struct {
	Schema  int     `json:"schema"`
	Entries []Entry `json:"entries"`
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
func BuildIndex(root string) (*Index, error) {
	ix := &Index{Schema: 1}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." || rel == IndexName {
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
			if e.SHA256, err = digest.File(p); err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Type, e.Mode = "symlink", ""
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("payload %s: %s is a %s; a payload holds files, directories and symlinks only", root, rel, fi.Mode().Type())
		}
		if err := e.check(); err != nil {
			return fmt.Errorf("payload %s: %w", root, err)
		}
		ix.Entries = append(ix.Entries, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(ix.Entries, func(i, j int) bool { return ix.Entries[i].Path < ix.Entries[j].Path })
	return ix, nil
}

// WriteIndex writes root's index into root.
func WriteIndex(root string) (*Index, error) {
	ix, err := BuildIndex(root)
	if err != nil {
		return nil, err
	}
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
		return nil, nil, fmt.Errorf("payload index %s: %w (build the payload with `make payload`, which writes it)", p, unwrapPath(err))
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
	return &ix, data, nil
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
