package sbom

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	builtOnce sync.Once
	builtPath string
	builtErr  error
)

// self is infera-payload, built here as make build builds it: a Go binary
// with module information (go-containerregistry, the shim's module
// replaced by its directory, ...), as make release's are. (A test binary
// records no dependencies.)
func self(t *testing.T) string {
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sbom-test-")
		if err != nil {
			builtErr = err
			return
		}
		builtPath = filepath.Join(dir, "infera-payload")
		cmd := exec.Command("go", "build", "-trimpath", "-o", builtPath, "./cmd/infera-payload")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			builtErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, builtErr)
	return builtPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtPath != "" {
		os.RemoveAll(filepath.Dir(builtPath))
	}
	os.Exit(code)
}

// The bill of a binary names every module buildinfo records, with
// its package URL, version and go.sum hash; the binary with its SHA-256
// and toolchain; the dependencies from the binary to each module; and
// the project's own module with the release version.
func TestBill(t *testing.T) {
	bin := self(t)
	b, err := Build(Options{Name: "infera-exec", Version: "v9.8.7", Tool: "infera-sbom", ToolVer: "test", Binaries: []string{bin}})
	require.NoError(t, err)
	bi, err := buildinfo.ReadFile(bin)
	require.NoError(t, err)

	assert.Equal(t, "CycloneDX", b.Format)
	assert.Equal(t, "1.5", b.SpecVersion)
	assert.Empty(t, b.Metadata.Timestamp, "no timestamp unless asked")
	require.NotEmpty(t, b.Components)
	app := b.Components[0]
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	assert.Equal(t, "application", app.Type)
	assert.Equal(t, filepath.Base(bin), app.Name)
	assert.Equal(t, []Hash{{"SHA-256", hex.EncodeToString(sum[:])}}, app.Hashes)
	assert.Contains(t, app.Properties, Property{"go:toolchain", runtime.Version()})

	byPURL := map[string]Component{}
	for _, c := range b.Components[1:] {
		assert.Equal(t, "library", c.Type)
		byPURL[c.PURL] = c
	}
	require.NotEmpty(t, bi.Deps)
	for _, m := range bi.Deps {
		if m.Replace != nil {
			continue
		}
		c, ok := byPURL["pkg:golang/"+m.Path+"@"+m.Version]
		if assert.True(t, ok, "module %s %s is in the bill", m.Path, m.Version) {
			assert.Contains(t, c.Properties, Property{"go:sum", m.Sum})
		}
	}
	assert.Contains(t, byPURL, "pkg:golang/github.com/google/go-containerregistry@"+depVersion(bi, "github.com/google/go-containerregistry"))
	assert.Contains(t, byPURL, "pkg:golang/github.com/infera/infera-exec/tools@v9.8.7", "the main module gets the release version")
	shim := byPURL["pkg:golang/github.com/infera/infera-exec@v9.8.7"]
	assert.Contains(t, shim.Properties, Property{"go:replaces", "github.com/infera/infera-exec"}, "the shim's module, replaced by its directory, gets the release version")
	assert.Contains(t, byPURL, "pkg:golang/stdlib@"+strings.TrimPrefix(runtime.Version(), "go"))

	// The release depends on the binary, the binary on every library.
	require.GreaterOrEqual(t, len(b.Dependencies), 2)
	assert.Equal(t, Dependency{Ref: "release:infera-exec", DependsOn: []string{app.BOMRef}}, b.Dependencies[0])
	assert.Equal(t, app.BOMRef, b.Dependencies[1].Ref)
	assert.Len(t, b.Dependencies[1].DependsOn, len(b.Components)-1)
}

func depVersion(bi *buildinfo.BuildInfo, path string) string {
	for _, m := range bi.Deps {
		if m.Path == path {
			return m.Version
		}
	}
	return ""
}

// The same binaries give the same bytes; a timestamp is written only
// when asked for; the JSON decodes.
func TestDeterministic(t *testing.T) {
	write := func(o Options) []byte {
		b, err := Build(o)
		require.NoError(t, err)
		var buf bytes.Buffer
		require.NoError(t, b.Write(&buf))
		return buf.Bytes()
	}
	o := Options{Name: "x", Version: "v1.0.0", Binaries: []string{self(t), self(t)}}
	a, b := write(o), write(o)
	assert.Equal(t, a, b)
	var m map[string]any
	require.NoError(t, json.Unmarshal(a, &m))

	o.Created = time.Unix(1700000000, 0)
	assert.Contains(t, string(write(o)), `"timestamp": "2023-11-14T22:13:20Z"`)
}

// A file that is not a Go binary is refused, by name.
func TestNotGo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
	_, err := Build(Options{Binaries: []string{p}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), p+": ")
	assert.Contains(t, err.Error(), "not a Go binary")
	_, err = Build(Options{})
	assert.Error(t, err)
}

// A Debian package's file the release ships is a component with its
// package URL (the epoch's colon and the pluses escaped) and the file's SHA-256; the
// release depends on it; a malformed -deb value is refused.
func TestPackage(t *testing.T) {
	file := filepath.Join(t.TempDir(), "busybox")
	require.NoError(t, os.WriteFile(file, []byte("not really busybox"), 0o755))
	pk, err := ParsePackage("busybox-static=1:1.35.0-4+deb12u1+b1=amd64=" + file + "=infera-overlay.tar:/usr/bin/busybox")
	require.NoError(t, err)
	b, err := Build(Options{Name: "infera-exec", Version: "v1.0.0", Binaries: []string{self(t)}, Packages: []Package{pk}})
	require.NoError(t, err)
	sum := sha256.Sum256([]byte("not really busybox"))
	purl := "pkg:deb/debian/busybox-static@1%3A1.35.0-4%2Bdeb12u1%2Bb1?arch=amd64"
	var found *Component
	for i, c := range b.Components {
		if c.PURL == purl {
			found = &b.Components[i]
		}
	}
	require.NotNil(t, found, "the package is a component")
	assert.Equal(t, []Hash{{"SHA-256", hex.EncodeToString(sum[:])}}, found.Hashes)
	assert.Contains(t, found.Properties, Property{"infera:shipped-as", "infera-overlay.tar:/usr/bin/busybox"})
	assert.Contains(t, b.Dependencies[0].DependsOn, purl, "the release depends on it")

	for _, bad := range []string{"busybox-static", "busybox-static=1.0=amd64", "=1=amd64=/x=y"} {
		_, err := ParsePackage(bad)
		assert.Error(t, err, bad)
	}
}
