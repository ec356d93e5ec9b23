package patches

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/distinfo"
	"github.com/infera/infera-exec/internal/sitepath"
)

var (
	mappingRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?s)MAPPING\s*(?::[^=]*)?=\s*\{(.*?)\}`) })
	pairRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`['"]([^'"]+)['"]\s*:\s*['"]([^'"]+)['"]`) })
)

// LocateOffline finds packages in an unpacked image root filesystem, or
// in a site-packages directory, without running Python, as the image's
// interpreters would import them: their sys.path in the order CPython's
// and Debian's site.py build it (package sitepath), with the directories
// .pth files add, each name resolved by the import system's rules (the
// first regular package or module wins; directories without __init__ are
// a namespace package only when no entry has one), then PEP 660
// editable finders (MAPPING in __editable___*_finder.py, consulted after
// sys.path) and legacy .egg-link files. Paths recorded inside the image
// are taken relative to root. Other copies of a name on the path are
// named in Why.
func LocateOffline(root string, names []string) (*Location, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("check root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("check root %s is not a directory", root)
	}
	// A site-packages directory is read as it is, its recorded paths as
	// they are; an image root has its interpreters' paths searched, and
	// the paths recorded inside it are taken relative to it.
	var sites, entries []string
	prefix := ""
	if isSiteDir(root, names) {
		sites, entries = []string{root}, []string{root}
		for _, e := range sitepath.PthEntries("/", root) {
			if !slices.Contains(entries, e) {
				entries = append(entries, e)
			}
		}
	} else {
		sites, entries, prefix = distinfo.SiteDirs(root), sitepath.SearchPath(root), root
	}
	loc := &Location{Interpreter: "(none: offline check of " + root + ")", SysPath: entries, Packages: map[string]Package{}}
	for _, n := range names {
		p := Package{Name: n}
		f := sitepath.Resolve(entries, n, "")
		if f.Kind == sitepath.NotFound {
			// Consulted after sys.path: editable finders, then the
			// directories of legacy develop installs.
			for _, site := range sites {
				for _, dir := range fallbacks(prefix, site, n) {
					if isDir(dir) {
						if f.Kind == sitepath.NotFound {
							f = sitepath.Found{Kind: sitepath.Regular, Path: dir}
						} else if dir != f.Path && !slices.Contains(f.Others, dir) {
							f.Others = append(f.Others, dir)
						}
					}
				}
			}
		}
		switch f.Kind {
		case sitepath.NotFound:
			p.Why = fmt.Sprintf("%s not found in %s", n, strings.Join(entries, ", "))
			if len(sites) == 0 {
				p.Why = fmt.Sprintf("no site-packages or dist-packages directory under %s", root)
			}
		case sitepath.Module:
			p.Why = fmt.Sprintf("%s is the module %s, not a package", n, f.Path)
		case sitepath.Namespace:
			p.Found, p.Dir, p.Dirs, p.Namespace = true, f.Path, f.Portions, true
		default:
			p.Found, p.Dir, p.Dirs = true, f.Path, []string{f.Path}
		}
		p.Others = f.Others
		if len(f.Others) > 0 {
			also := "also present, not imported: " + strings.Join(f.Others, ", ")
			if p.Why != "" {
				also = p.Why + "; " + also
			}
			p.Why = also
		}
		loc.Packages[n] = p
	}
	return loc, nil
}

// fallbacks are the directories that may hold package name after
// sys.path, for one site directory: PEP 660 editable finders' MAPPING,
// and the path of legacy .egg-link files. Absolute paths recorded in the
// site directory are taken relative to prefix.
func fallbacks(prefix, site, name string) []string {
	var out []string
	entries, err := os.ReadDir(site)
	if err != nil {
		return out
	}
	inImage := func(p string) string {
		if filepath.IsAbs(p) {
			return filepath.Join(prefix, p)
		}
		return filepath.Join(site, p)
	}
	for _, e := range entries {
		fn := e.Name()
		full := filepath.Join(site, fn)
		switch {
		case strings.HasPrefix(fn, "__editable__") && strings.HasSuffix(fn, "_finder.py"):
			data, err := boundedread.File(full, boundedread.SmallText)
			if err != nil {
				continue
			}
			if m := mappingRE().FindSubmatch(data); m != nil {
				for _, pair := range pairRE().FindAllSubmatch(m[1], -1) {
					if string(pair[1]) == name {
						out = append(out, inImage(string(pair[2])))
					}
				}
			}
		case strings.HasSuffix(fn, ".egg-link"):
			// An .egg-link's first line is the path; the second is
			// relative to it.
			if lines := sitepath.PthLines(full); len(lines) > 0 {
				out = append(out, filepath.Join(inImage(strings.TrimSpace(lines[0])), name))
			}
		}
	}
	return out
}

// isSiteDir tells a site-packages directory (it holds one of the packages,
// or what installers leave there) from an image root.
func isSiteDir(dir string, names []string) bool {
	for _, n := range names {
		if isDir(filepath.Join(dir, n)) {
			return true
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		n := e.Name()
		if strings.HasSuffix(n, ".dist-info") || strings.HasSuffix(n, ".egg-info") || strings.HasSuffix(n, ".pth") {
			return true
		}
	}
	return false
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
