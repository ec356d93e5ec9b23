package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The shim runs in images whose libc it cannot know: it must be a static
// executable with no program interpreter and no shared libraries, and it
// must not carry the build machine's paths.
func TestBinaryIsStatic(t *testing.T) {
	bin := shim(t)
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s has a program interpreter: it is dynamically linked", bin)
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs, "%s needs shared libraries", bin)

	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	wd, err := os.Getwd()
	require.NoError(t, err)
	repo := filepath.Dir(filepath.Dir(wd))
	assert.False(t, bytes.Contains(data, []byte(repo+"/")), "%s contains the build path %s: build with -trimpath", bin, repo)
}

// Packages the shim must not link: debug/elf imports the rest, and their
// package initialisation runs on every container start (compress/flate's
// alone took 0.3 ms of it). ELF headers are read by internal/elfhdr.
var unwantedDeps = []string{"debug/elf", "debug/dwarf", "compress/flate", "compress/zlib", "internal/zstd"}

func TestNoUnwantedDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err, "go list")
	linked := map[string]bool{}
	importers := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		require.NotEmpty(t, f, "go list output %q", out)
		linked[f[0]] = true
		for _, imp := range f[1:] {
			if slices.Contains(unwantedDeps, imp) {
				importers[imp] = append(importers[imp], f[0])
			}
		}
	}
	require.True(t, linked["github.com/infera/infera-exec/internal/elfload"], "go list -deps lists the shim's packages (elfload among them)")
	for _, dep := range unwantedDeps {
		assert.False(t, linked[dep], "the shim links %s, imported by %s", dep, strings.Join(importers[dep], ", "))
	}
}

func TestVersionIsStamped(t *testing.T) {
	if os.Getenv("INFERA_EXEC_BIN") == "" {
		t.Skip("only the binary from `make build` carries the version stamp")
	}
	out, err := exec.Command(shim(t), "--version").Output()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "infera-exec dev ")
	assert.NotContains(t, string(out), "commit unknown")
	assert.Regexp(t, `^infera-exec \S+ \(commit [0-9a-f]{7,}, go1\.\d+`, string(out))
}
