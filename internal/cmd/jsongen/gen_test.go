package main

import (
	"bufio"
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every checked-in json_gen.go is what its package's //go:generate line
// generates from the types as they are now: a field added, renamed or
// retagged without `go generate` fails here. Offline: the generator
// reads sources only.
func TestGeneratedFilesAreFresh(t *testing.T) {
	root, _, err := findModule(".")
	require.NoError(t, err)
	lines := generateLines(t, root)
	require.NotEmpty(t, lines, "no //go:generate line runs jsongen")

	var files []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
		}
		if d.Name() == OutputName {
			files = append(files, filepath.Dir(path))
		}
		return nil
	}))
	for _, dir := range files {
		_, ok := lines[dir]
		assert.True(t, ok, "%s/%s has no //go:generate line running jsongen", dir, OutputName)
	}

	for dir, args := range lines {
		rel, _ := filepath.Rel(root, dir)
		t.Run(rel, func(t *testing.T) {
			fl := flag.NewFlagSet("jsongen", flag.ContinueOnError)
			encode := fl.String("encode", "", "")
			decode := fl.String("decode", "", "")
			require.NoError(t, fl.Parse(args))
			want, err := Generate(dir, split(*encode), split(*decode))
			require.NoError(t, err)
			have, err := os.ReadFile(filepath.Join(dir, OutputName))
			require.NoError(t, err, "run go generate in %s", rel)
			if !bytes.Equal(have, want) {
				t.Errorf("%s/%s is stale: run go generate in %s", rel, OutputName, rel)
			}
		})
	}
}

// generateLines finds each package's //go:generate line that runs
// jsongen, with its arguments.
func generateLines(t *testing.T, root string) map[string][]string {
	out := map[string][]string{}
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			words := strings.Fields(sc.Text())
			if len(words) < 4 || words[0] != "//go:generate" || words[1] != "go" || words[2] != "run" {
				continue
			}
			target := filepath.Clean(filepath.Join(filepath.Dir(path), words[3]))
			if filepath.Base(target) != "jsongen" {
				continue
			}
			dir := filepath.Dir(path)
			_, dup := out[dir]
			assert.False(t, dup, "%s: two jsongen lines", dir)
			out[dir] = words[4:]
		}
		return sc.Err()
	}))
	return out
}

// A stale generated file does not stop its own regeneration: the
// package is type-checked without it.
func TestGenerateIgnoresTheGeneratedFile(t *testing.T) {
	mod := t.TempDir()
	pkg := filepath.Join(mod, "stale")
	require.NoError(t, os.Mkdir(pkg, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/m\n\ngo 1.26\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "t.go"), []byte("package stale\n\ntype T struct {\n\tA int `json:\"a\"`\n}\n\nfunc use(t *T) { appendJSONT(nil, t) }\n"), 0o644))
	// Generated when T had a field Gone.
	require.NoError(t, os.WriteFile(filepath.Join(pkg, OutputName), []byte("package stale\n\nfunc appendJSONT(b []byte, v *T) ([]byte, error) { return append(b, v.Gone...), nil }\n"), 0o644))
	src, err := Generate(pkg, []string{"T"}, nil)
	require.NoError(t, err)
	assert.Contains(t, string(src), `b = append(b, "\"a\":"...)`)
	assert.NotContains(t, string(src), "Gone")
}
