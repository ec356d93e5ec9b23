// Package distinfo answers which Python distributions a site directory
// holds, at which version, and which files each installed, by reading
// their metadata directories (*.dist-info, and legacy *.egg-info) without
// a Python interpreter. Engine patches, the payload build tools and the
// shim's shadowing check read distributions through it.
package distinfo

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/pyimport"
)

// SiteDirs are the site directories present under an image root, as
// paths on this machine, in the order its interpreters search them
// (package pyimport: each installation's site.py order, the installations
// in the order they are preferred), without repeats.
func SiteDirs(root string) []string {
	r := pyimport.ResolveImage(root, nil)
	var out []string
	for _, a := range r.Installations {
		for _, d := range a.SiteDirs {
			if fi, err := os.Stat(r.Host(d)); err == nil && fi.IsDir() && !slices.Contains(out, r.Host(d)) {
				out = append(out, r.Host(d))
			}
		}
	}
	return out
}

// Dist is one installed distribution.
type Dist struct {
	Name    string `json:"name"`    // as its metadata spells it
	Version string `json:"version"` // "" when the metadata has none
	Meta    string `json:"meta"`    // its *.dist-info or *.egg-info directory
	Site    string `json:"site"`    // the directory it is installed in
}

// Canonical is the name's normalized form (PEP 503): lower case, runs of
// '-', '_' and '.' as one '-'. "Demo.Pkg" and "demo_pkg" are one name.
// Plain string code: a start canonicalizes every distribution name of the
// image's site directories, and a regular expression would cost more to
// compile than all of them.
func Canonical(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	sep := false
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '-', '_', '.':
			sep = true
		default:
			if sep {
				b.WriteByte('-')
				sep = false
			}
			b.WriteByte(c)
		}
	}
	if sep {
		b.WriteByte('-')
	}
	return strings.ToLower(b.String())
}

// Key is d's canonical name.
func (d Dist) Key() string { return Canonical(d.Name) }

// maxMeta bounds one metadata file read: headers come first and are small.
const maxMeta = 4 << 20

// List reads the distributions installed in site, sorted by canonical
// name. A directory that cannot be listed is an error; a metadata
// directory without readable metadata is listed by its directory name.
func List(site string) ([]Dist, error) {
	entries, err := os.ReadDir(site)
	if err != nil {
		return nil, fmt.Errorf("list distributions in %s: %w", site, err)
	}
	var out []Dist
	for _, e := range entries {
		name := e.Name()
		meta := metaFile(name)
		if meta == "" {
			continue
		}
		dir := filepath.Join(site, name)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		d := Dist{Meta: dir, Site: site}
		d.Name, d.Version = headers(filepath.Join(dir, meta))
		if d.Name == "" {
			base := strings.TrimSuffix(strings.TrimSuffix(name, ".dist-info"), ".egg-info")
			d.Name, _, _ = strings.Cut(base, "-")
		}
		if d.Version == "" {
			base := strings.TrimSuffix(strings.TrimSuffix(name, ".dist-info"), ".egg-info")
			if _, v, ok := strings.Cut(base, "-"); ok {
				v, _, _ = strings.Cut(v, "-py") // egg-info: name-1.0-py3.11
				d.Version = v
			}
		}
		out = append(out, d)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out, nil
}

// metaFile is the core metadata file of a metadata directory name, ""
// when the name is not one.
func metaFile(name string) string {
	switch {
	case strings.HasSuffix(name, ".dist-info"):
		return "METADATA"
	case strings.HasSuffix(name, ".egg-info"):
		return "PKG-INFO"
	}
	return ""
}

// Version finds the distribution dist in the given directories and
// returns its Version and the metadata file it was read from; "" when it
// cannot be told (Find says why). Reading it here is ~1000 times cheaper
// than importlib.metadata in Python.
func Version(dist string, dirs []string) (version, from string) {
	f := Find(dist, dirs)
	return f.Version, f.From
}

// Found is what Find found of a distribution's version.
type Found struct {
	Version string // "" when it cannot be told
	From    string // the metadata file read, or that could not be read
	Why     string // why Version is "": the file, what is wrong with it
}

// Find looks for dist's metadata directory in dirs, in order. The first
// directory that holds one decides, as importlib.metadata's first match
// would: a metadata file there that cannot be read (not a regular file,
// too large, unreadable) or has no Version, or two copies there that
// disagree, make the version unknown, with the reason; a copy in a later
// directory belongs to another installation and is never taken instead.
func Find(dist string, dirs []string) Found {
	want := Canonical(dist)
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		var found []Found
		for _, e := range entries {
			name := e.Name()
			meta := metaFile(name)
			if meta == "" {
				continue
			}
			base := strings.TrimSuffix(strings.TrimSuffix(name, ".dist-info"), ".egg-info")
			distPart, _, _ := strings.Cut(base, "-")
			if Canonical(distPart) != want {
				continue
			}
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || !fi.IsDir() {
				continue // a distutils .egg-info file, or a dangling link: not a metadata directory
			}
			f := Found{From: filepath.Join(dir, name, meta)}
			_, v, err := readHeaders(f.From)
			switch {
			case err != nil:
				msg := err.Error()
				if !strings.Contains(msg, f.From) {
					msg = f.From + ": " + msg
				}
				f.Why = "cannot read " + msg
			case v == "":
				f.Why = fmt.Sprintf("%s has no Version field", f.From)
			default:
				f.Version = v
			}
			found = append(found, f)
		}
		if len(found) == 0 {
			continue
		}
		for _, f := range found[1:] {
			if f.Version != found[0].Version || f.Why != "" {
				var all []string
				for _, f := range found {
					all = append(all, fmt.Sprintf("%s (%s)", f.From, cmpOr(f.Version, "unreadable")))
				}
				return Found{From: found[0].From, Why: fmt.Sprintf("%s holds %d metadata directories for %s that do not agree: %s", dir, len(found), dist, strings.Join(all, ", "))}
			}
		}
		return found[0]
	}
	return Found{Why: fmt.Sprintf("no %s *.dist-info or *.egg-info in %s", dist, strings.Join(dirs, ", "))}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// headers reads the Name and Version of a core metadata file; the
// headers end at the first empty line.
func headers(path string) (name, version string) {
	name, version, _ = readHeaders(path)
	return name, version
}

func readHeaders(path string) (name, version string, err error) {
	// A regular file within the cap, opened without blocking: a FIFO
	// planted as METADATA never answers, /dev/zero never ends.
	data, err := boundedread.File(path, maxMeta)
	if err != nil {
		return "", "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			break
		}
		if v, ok := strings.CutPrefix(line, "Name:"); ok && name == "" {
			name = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "Version:"); ok && version == "" {
			version = strings.TrimSpace(v)
		}
	}
	return name, version, nil
}

// Files are the paths d installed, relative to its site directory, as its
// RECORD (dist-info) or installed-files.txt (egg-info) lists them; the
// metadata directory itself is always included. Entries that lead out of
// the site directory (scripts in ../../bin) are left out: they are not
// part of the tree.
func (d Dist) Files() ([]string, error) {
	metaRel, _ := filepath.Rel(d.Site, d.Meta)
	var raw []string
	switch {
	case strings.HasSuffix(d.Meta, ".dist-info"):
		lines, err := readLines(filepath.Join(d.Meta, "RECORD"))
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			raw = append(raw, recordPath(l))
		}
	default:
		lines, err := readLines(filepath.Join(d.Meta, "installed-files.txt"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, l := range lines {
			raw = append(raw, filepath.ToSlash(filepath.Join(metaRel, l)))
		}
	}
	seen := map[string]bool{}
	out := []string{}
	for _, p := range append(raw, filepath.ToSlash(metaRel)) {
		p = filepath.ToSlash(filepath.Clean(p))
		if p == "." || p == ".." || strings.HasPrefix(p, "../") || filepath.IsAbs(p) || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out, nil
}

// TopLevel are the import names d provides: top_level.txt, else the first
// path components of its files that are packages or modules.
func (d Dist) TopLevel() []string {
	if lines, err := readLines(filepath.Join(d.Meta, "top_level.txt")); err == nil && len(lines) > 0 {
		return lines
	}
	files, _ := d.Files()
	metaRel, _ := filepath.Rel(d.Site, d.Meta)
	var out []string
	for _, f := range files {
		first, rest, nested := strings.Cut(f, "/")
		name := first
		if !nested {
			if !strings.HasSuffix(first, ".py") && !strings.Contains(first, ".so") {
				continue
			}
			name, _, _ = strings.Cut(first, ".")
		} else if first == metaRel || strings.HasSuffix(first, ".data") || rest == "" || first == "__pycache__" {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// recordPath is the path field of a RECORD line (CSV: path,hash,size; a
// path with a comma is quoted).
func recordPath(line string) string {
	if strings.HasPrefix(line, `"`) {
		var b strings.Builder
		for i := 1; i < len(line); i++ {
			if line[i] == '"' {
				if i+1 < len(line) && line[i+1] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				break
			}
			b.WriteByte(line[i])
		}
		return b.String()
	}
	p, _, _ := strings.Cut(line, ",")
	return p
}

func readLines(p string) ([]string, error) {
	data, err := boundedread.File(p, maxMeta)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}
