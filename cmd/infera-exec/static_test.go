package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
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
