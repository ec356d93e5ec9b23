package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
)

// OutputName is the generated file: left out when a package of the
// module is type-checked, so that it is always generated from the
// types as they are.
const OutputName = "json_gen.go"

// loader type-checks the module's packages from source (without their
// generated files) and everything else with the source importer.
type loader struct {
	fset    *token.FileSet
	modRoot string
	modPath string
	pkgs    map[string]*types.Package
	ext     types.ImporterFrom
}

func newLoader(dir string) (*loader, error) {
	root, path, err := findModule(dir)
	if err != nil {
		return nil, err
	}
	// Type information is all that is wanted: cgo files would have to
	// be run through cgo, and their pure-Go alternatives declare the
	// same API.
	build.Default.CgoEnabled = false
	fset := token.NewFileSet()
	return &loader{
		fset: fset, modRoot: root, modPath: path, pkgs: map[string]*types.Package{},
		ext: importer.ForCompiler(fset, "source", nil).(types.ImporterFrom),
	}, nil
}

func findModule(dir string) (root, path string, err error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", "", err
	}
	for {
		f, err := os.Open(filepath.Join(d, "go.mod"))
		if err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if p, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return d, strings.Trim(strings.TrimSpace(p), `"`), nil
				}
			}
			return "", "", fmt.Errorf("%s/go.mod: no module line", d)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", "", fmt.Errorf("%s: not inside a Go module", dir)
		}
		d = parent
	}
}

func (l *loader) Import(path string) (*types.Package, error) {
	if p := l.pkgs[path]; p != nil {
		return p, nil
	}
	if path == l.modPath || strings.HasPrefix(path, l.modPath+"/") {
		return l.load(filepath.Join(l.modRoot, filepath.FromSlash(strings.TrimPrefix(path, l.modPath))), path)
	}
	p, err := l.ext.ImportFrom(path, l.modRoot, 0)
	if err == nil {
		l.pkgs[path] = p
	}
	return p, err
}

// load type-checks the package in dir, function bodies left out (types
// are all that is wanted, and the bodies may call generated code).
func (l *loader) load(dir, path string) (*types.Package, error) {
	bp, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		return nil, fmt.Errorf("package %s: %w", path, err)
	}
	var files []*ast.File
	for _, name := range bp.GoFiles {
		if name == OutputName {
			continue
		}
		f, err := parser.ParseFile(l.fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: l, IgnoreFuncBodies: true}
	p, err := conf.Check(path, l.fset, files, nil)
	if err != nil {
		return nil, fmt.Errorf("type-check %s: %w", path, err)
	}
	l.pkgs[path] = p
	return p, nil
}

// loadDir type-checks the module package in dir.
func (l *loader) loadDir(dir string) (*types.Package, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(l.modRoot, abs)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("%s: not inside module %s", dir, l.modRoot)
	}
	path := l.modPath
	if rel != "." {
		path += "/" + filepath.ToSlash(rel)
	}
	return l.Import(path)
}
