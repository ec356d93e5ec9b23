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
)

var (
	mappingRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?s)MAPPING\s*(?::[^=]*)?=\s*\{(.*?)\}`) })
	pairRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`['"]([^'"]+)['"]\s*:\s*['"]([^'"]+)['"]`) })
)

// LocateOffline finds packages in an unpacked image root filesystem, or
// in a site-packages directory, without running Python: plain package
// directories, PEP 660 editable finders (MAPPING in
// __editable___*_finder.py), path entries of .pth files and legacy
// .egg-link files. Paths recorded inside the image are taken relative to
// root. Where several site directories hold a package, the first in
// distinfo.SiteGlobs order wins and the others are named in Why.
func LocateOffline(root string, names []string) (*Location, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("check root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("check root %s is not a directory", root)
	}
	// A site-packages directory is read as it is, its recorded paths as
	// they are; an image root has its site directories searched, and the
	// paths recorded inside it are taken relative to it.
	sites, prefix := []string{root}, ""
	if !isSiteDir(root, names) {
		sites, prefix = distinfo.SiteDirs(root), root
	}
	loc := &Location{Interpreter: "(none: offline check of " + root + ")", SysPath: sites, Packages: map[string]Package{}}
	for _, n := range names {
		p := Package{Name: n}
		var found []string
		for _, site := range sites {
			for _, dir := range candidates(prefix, site, n) {
				if isDir(dir) && !slices.Contains(found, dir) {
					found = append(found, dir)
				}
			}
		}
		if len(found) == 0 {
			p.Why = fmt.Sprintf("%s not found in %s", n, strings.Join(sites, ", "))
			if len(sites) == 0 {
				p.Why = fmt.Sprintf("no site-packages or dist-packages directory under %s", root)
			}
		} else {
			p.Found, p.Dir, p.Dirs = true, found[0], found[:1]
			if len(found) > 1 {
				p.Why = "also present: " + strings.Join(found[1:], ", ")
			}
		}
		loc.Packages[n] = p
	}
	return loc, nil
}

// candidates are the directories that may hold package name for one site
// directory, in the order Python would consult them. Absolute paths
// recorded in the site directory are taken relative to prefix.
func candidates(prefix, site, name string) []string {
	out := []string{filepath.Join(site, name)}
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
		case strings.HasSuffix(fn, ".pth"), strings.HasSuffix(fn, ".egg-link"):
			for _, line := range pathLines(full) {
				out = append(out, filepath.Join(inImage(line), name))
			}
		}
	}
	return out
}

// pathLines are the directory entries of a .pth or .egg-link file: lines
// that are neither comments nor "import" statements.
func pathLines(file string) []string {
	data, err := boundedread.File(file, boundedread.SmallText)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l == "." || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "import ") || strings.HasPrefix(l, "import\t") {
			continue
		}
		out = append(out, l)
		if strings.HasSuffix(file, ".egg-link") {
			break // an .egg-link's first line is the path; the second is relative to it
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
