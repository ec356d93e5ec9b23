package patches

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/infera/infera-exec/internal/pyimport"
)

// LocateOffline finds packages without running Python, with the start's
// model of the interpreter (package pyimport: getpath's layout, sys.path
// in CPython's and Debian's site.py order, .pth files, setuptools'
// editable finders), in one of three kinds of root:
//   - a site directory (it holds one of the packages, or what installers
//     leave there): the directory, what its .pth files add and the
//     editable finders they install, paths as they are;
//   - a venv of this machine (a pyvenv.cfg at the top): its interpreter,
//     paths as they are;
//   - an unpacked image root ("/" for this machine): every interpreter
//     installation under it (pyimport.ResolveImage), the paths recorded
//     inside the image taken inside root.
//
// Each name is taken from the first installation that imports it; its
// other copies (further down the same sys.path, or imported by another
// installation) are named in Others and Why. What the interpreter would
// run at start-up and cannot be followed (a .pth line other than the
// editable finder's, a sitecustomize) is passed over and named in Notes:
// the answer is then the best one that can be read, not a certain one.
func LocateOffline(root string, names []string) (*Location, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("check root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("check root %s is not a directory", root)
	}
	var r *pyimport.Root
	switch {
	case isSiteDir(root, names):
		r = pyimport.ResolveSiteDir(root, names)
	case isFile(filepath.Join(root, "pyvenv.cfg")):
		r = pyimport.ResolveVenv(root, names)
	default:
		r = pyimport.ResolveImage(root, names)
	}
	loc := &Location{Interpreter: "(none: offline check of " + root + ")", Packages: map[string]Package{}, Notes: r.Notes}
	var read []string
	for _, a := range r.Installations {
		read = append(read, a.Interpreter)
		for _, e := range a.SysPath {
			if hp := r.Host(e); e != "" && isDir(hp) && !slices.Contains(loc.SysPath, hp) {
				loc.SysPath = append(loc.SysPath, hp)
			}
		}
		for _, d := range a.SiteDirs {
			if hp := r.Host(d); !slices.Contains(loc.SiteDirs, hp) {
				loc.SiteDirs = append(loc.SiteDirs, hp)
			}
		}
		for _, n := range a.Notes {
			note := n
			if a.Interpreter != "" {
				note = a.Interpreter + ": " + n
			}
			if !slices.Contains(loc.Notes, note) {
				loc.Notes = append(loc.Notes, note)
			}
		}
	}
	loc.Located = "offline, without starting Python: " + strings.Join(read, ", ")
	for _, n := range names {
		loc.Packages[n] = offlinePackage(r, n, loc)
	}
	return loc, nil
}

// offlinePackage is name's answer: the first installation's that finds it.
func offlinePackage(r *pyimport.Root, name string, loc *Location) Package {
	p := Package{Name: name}
	var others []string
	other := func(hp string) {
		if !slices.Contains(p.Dirs, hp) && !slices.Contains(others, hp) {
			others = append(others, hp)
		}
	}
	for _, a := range r.Installations {
		s := a.Specs[name]
		switch {
		case !s.Found:
		case p.Found || p.Why != "":
			for _, l := range s.Locations {
				other(r.Host(l))
			}
			if len(s.Locations) == 0 {
				other(r.Host(s.Origin))
			}
		case len(s.Locations) == 0:
			p.Why = fmt.Sprintf("%s is the module %s, not a package", name, r.Host(s.Origin))
		default:
			p.Found, p.Namespace = true, s.Namespace
			for _, l := range s.Locations {
				p.Dirs = append(p.Dirs, r.Host(l))
			}
			p.Dir = p.Dirs[0]
		}
		for _, o := range s.Others {
			other(r.Host(o))
		}
	}
	if !p.Found && p.Why == "" {
		switch {
		case len(r.Installations) == 0:
			p.Why = fmt.Sprintf("no Python installation (bin/python3.X, lib/python3.X) under %s", r.Root)
		default:
			p.Why = fmt.Sprintf("%s not found in %s", name, strings.Join(loc.SysPath, ", "))
		}
	}
	p.Others = others
	if len(others) > 0 {
		also := "also present, not imported: " + strings.Join(others, ", ")
		if p.Why != "" {
			also = p.Why + "; " + also
		}
		p.Why = also
	}
	return p
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

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
