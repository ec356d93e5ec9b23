package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/lookpath"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/preflight"
	"github.com/infera/infera-exec/report"
)

// refusals is every error type a stage refuses with, and its code.
var refusals = []struct {
	err  error
	code int
}{
	{&config.UsageError{}, 64},
	{&config.Error{}, 78},
	{&abi.Error{Err: errors.New("x")}, 78},
	{&overlay.Refusal{Err: errors.New("x")}, 78},
	{&overlay.DestError{Err: errors.New("x")}, 73},
	{&capability.Unavailable{}, 69},
	{&capability.Unfit{Audit: &capability.Audit{}}, 69},
	{&capability.UnknownNameError{}, 78},
	{&preflight.Refusal{}, 78},
	{&preflight.ConfigError{Err: errors.New("x")}, 78},
	{&patches.ConfigError{Err: errors.New("x")}, 78},
	{&patches.RequiredError{Err: errors.New("x")}, 65},
	{&report.ReadError{}, 66},
	{&lookpath.Error{Code: lookpath.CodeNotFound}, 127},
	{&lookpath.Error{Code: lookpath.CodeNotExecutable}, 126},
	{&launch.NotRootError{}, 77},
	{&launch.DropError{}, 77},
}

// Every type in the module with an ExitCode method is listed above with
// the code it gives, main maps it (wrapped, too) to that code, and the
// README's exit-code table has a row for the code.
func TestRefusalsHaveDocumentedCodes(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(readme), "## Exit codes")
	require.True(t, ok, "README has an Exit codes section")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \|`).FindAllStringSubmatch(table, -1) {
		documented[m[1]] = true
	}

	var listed []string
	for _, r := range refusals {
		name := reflect.TypeOf(r.err).Elem().String()
		listed = append(listed, name)
		var c coded
		require.True(t, errors.As(r.err, &c), "%s has ExitCode", name)
		assert.Equal(t, r.code, c.ExitCode(), name)
		assert.Equal(t, r.code, exitCode(fmt.Errorf("wrapped: %w", r.err)), "%s, wrapped", name)
		assert.True(t, documented[fmt.Sprint(r.code)], "README's exit-code table has no row for %d (%s)", r.code, name)
	}
	assert.Equal(t, exitSoftware, exitCode(errors.New("a stage's error without a code")), "an error without a code is a bug")
	assert.True(t, documented[fmt.Sprint(exitSoftware)])

	// Every ExitCode method of the module's code, found in its source.
	var found []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel, _ := filepath.Rel(root, path); rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "build" || fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != "ExitCode" {
				continue
			}
			recv := fn.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			found = append(found, f.Name.Name+"."+recv.(*ast.Ident).Name)
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(found)
	listed = slices.Compact(slices.Sorted(slices.Values(listed)))
	assert.Equal(t, found, listed, "every refusal type of the module, and only those, is in the table above")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
