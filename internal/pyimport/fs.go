package pyimport

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/elfload"
)

// fsys reads the filesystem the interpreter runs in: this machine's
// ("/"), or an unpacked image root seen from outside it, whose paths
// (interpreters, pyvenv.cfg homes, .pth lines, finders' MAPPING) are
// inside the image: each is resolved as the kernel resolves it with root
// as "/" (an absolute link target taken inside root, ".." stopping at
// root) before it is read.
type fsys struct {
	root string // "/" = this machine
}

var hostFS = fsys{root: "/"}

func (f fsys) local() bool { return f.root == "/" || f.root == "" }

// host is the path on this machine of p, a path inside the image, with
// every link resolved inside the image; an error when a component is
// missing (or a link leads nowhere).
func (f fsys) host(p string) (string, error) {
	if f.local() {
		return p, nil
	}
	return elfload.ResolveIn(f.root, filepath.Join(f.root, p))
}

// inside is the image's path of a host path under root.
func (f fsys) inside(hp string) string {
	if f.local() {
		return hp
	}
	rel, err := filepath.Rel(f.root, hp)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return hp
	}
	return "/" + filepath.ToSlash(rel)
}

func (f fsys) stat(p string) (fs.FileInfo, error) {
	hp, err := f.host(p)
	if err != nil {
		return nil, err
	}
	return os.Stat(hp)
}

func (f fsys) isDir(p string) bool {
	fi, err := f.stat(p)
	return err == nil && fi.IsDir()
}

func (f fsys) isFile(p string) bool {
	fi, err := f.stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// exists is os.path.exists.
func (f fsys) exists(p string) bool {
	_, err := f.stat(p)
	return err == nil
}

func (f fsys) sameFile(a, b string) bool {
	x, err1 := f.stat(a)
	y, err2 := f.stat(b)
	return err1 == nil && err2 == nil && os.SameFile(x, y)
}

func (f fsys) readDir(p string) ([]os.DirEntry, error) {
	hp, err := f.host(p)
	if err != nil {
		return nil, err
	}
	return os.ReadDir(hp)
}

// readFile reads a small text file (a .pth, pyvenv.cfg, a finder).
func (f fsys) readFile(p string) ([]byte, error) {
	hp, err := f.host(p)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return boundedread.File(hp, boundedread.SmallText)
}

// evalSymlinks is filepath.EvalSymlinks inside the image.
func (f fsys) evalSymlinks(p string) (string, error) {
	if f.local() {
		return filepath.EvalSymlinks(p)
	}
	hp, err := f.host(p)
	if err != nil {
		return "", err
	}
	return f.inside(hp), nil
}

// glob is filepath.Glob of an image path pattern whose directory part
// has no pattern characters.
func (f fsys) glob(pattern string) []string {
	dir, base := filepath.Split(pattern)
	if f.local() {
		m, _ := filepath.Glob(pattern)
		return m
	}
	hd, err := f.host(filepath.Clean(dir))
	if err != nil {
		return nil
	}
	m, _ := filepath.Glob(filepath.Join(hd, base))
	for i := range m {
		m[i] = filepath.Join(filepath.Clean(dir), filepath.Base(m[i]))
	}
	return m
}
