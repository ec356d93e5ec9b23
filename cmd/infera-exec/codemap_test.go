package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The code map in docs/development.md names every package of the shim's
// module, and nothing else: a package added or removed without its line
// fails here.
func TestCodeMapMatchesPackages(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "development.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## Code map\n")
	require.True(t, ok, "docs/development.md has no Code map section")
	section, _, _ = strings.Cut(section, "The pass, as the step table")
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9_/-]+)` \\|").FindAllStringSubmatch(section, -1) {
		listed = append(listed, m[1])
	}

	var pkgs []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			name := d.Name()
			// Other modules, build output and test data are not packages
			// of this module.
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "build") {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dir := filepath.ToSlash(filepath.Dir(rel))
			if !slices.Contains(pkgs, dir) {
				pkgs = append(pkgs, dir)
			}
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(pkgs)
	slices.Sort(listed)
	assert.Equal(t, pkgs, listed, "docs/development.md code map vs the module's packages")
}
