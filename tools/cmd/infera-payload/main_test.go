package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/overlay"
)

// The repository root, from this package's directory.
const repo = "../../.."

// shim is the real static binary: the one `make build` made
// (INFERA_EXEC_BIN), or one built here the same way.
func shim(t *testing.T) string {
	if p := os.Getenv("INFERA_EXEC_BIN"); p != "" {
		return p
	}
	p := filepath.Join(t.TempDir(), "infera-exec")
	cmd := exec.Command("go", "build", "-trimpath", "-o", p, "./cmd/infera-exec")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	return p
}

type outcome struct {
	code           int
	stdout, stderr string
}

func runTool(args []string, env ...string) outcome {
	var stdout, stderr bytes.Buffer
	code := run(args, env, &stdout, &stderr)
	return outcome{code, stdout.String(), stderr.String()}
}

// The help teaches: the overview names every subcommand of the table with
// an example, and each subcommand's page has its options and examples.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := runTool(args)
		require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
		for _, sc := range subcommands {
			assert.Contains(t, r.stdout, "  "+sc.name+"  ", "%v lists %s", args, sc.name)
			assert.Contains(t, r.stdout, sc.examples[0], "%v shows an example of %s", args, sc.name)
		}
	}
	for _, sc := range subcommands {
		for _, args := range [][]string{{sc.name, "--help"}, {sc.name, "-h"}, {"help", sc.name}} {
			r := runTool(args)
			require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
			assert.Contains(t, r.stdout, "Usage: infera-payload "+sc.name+" ", "%v", args)
			assert.Contains(t, r.stdout, "Options:\n  -", "%v lists the options", args)
			for _, e := range sc.examples {
				assert.Contains(t, r.stdout, e, "%v", args)
			}
		}
	}
	assert.Contains(t, runTool([]string{"index", "--help"}).stdout, "-tree SRC:DEST")
	assert.Contains(t, runTool([]string{"image", "--help"}).stdout, "SOURCE_DATE_EPOCH")

	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "Subcommands:"},
		{[]string{"mkimage"}, `no subcommand "mkimage"`},
		{[]string{"help", "nope"}, `no subcommand "nope"`},
		{[]string{"index", "-no-such-flag"}, "run 'infera-payload index --help'"},
		{[]string{"index", "surplus"}, `unexpected argument "surplus"`},
		{[]string{"image", "-payload"}, "flag needs an argument"},
	} {
		r := runTool(c.args)
		assert.Equal(t, exitUsage, r.code, "%v", c.args)
		assert.Contains(t, r.stderr, c.want, "%v", c.args)
	}
}

// index, then image, as `make demo` and `make overlay-image` run them:
// flags, SOURCE_DATE_EPOCH, the names of the outputs, and exit codes.
func TestIndexThenImage(t *testing.T) {
	dir := t.TempDir()
	payload, demo := filepath.Join(dir, "payload"), filepath.Join(dir, "demo")
	r := runTool([]string{"index", "-out", payload, "-bin", shim(t),
		"-src", filepath.Join(repo, "testdata/demo/python"), "-demo", demo,
		"-engine", filepath.Join(repo, "patches/testdata/trees/vllm-pending/site-packages")})
	require.Equal(t, 0, r.code, r.stderr)
	ix, _, err := overlay.ReadIndex(payload)
	require.NoError(t, err)
	assert.Contains(t, r.stdout, fmt.Sprintf("payload in %s: %d entries, index %s", payload, len(ix.Entries), filepath.Join(payload, overlay.IndexName)))
	for _, p := range []string{"bin/infera-exec", "py39", "py314", "native/rocm7-py312/CAPABILITIES"} {
		_, err := os.Lstat(filepath.Join(payload, p))
		assert.NoError(t, err, "the payload has %s", p)
	}
	for _, p := range []string{"rocm", "engine", "models/demo"} {
		assert.DirExists(t, filepath.Join(demo, p))
	}
	r = runTool([]string{"index", "-out", filepath.Join(dir, "bad"), "-bin", shim(t), "-tree", "x:/abs"})
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, "want SRC:DEST with DEST relative")

	oci, archive := filepath.Join(dir, "oci"), filepath.Join(dir, "img.tar")
	r = runTool([]string{"image", "-payload", payload, "-oci", oci, "-archive", archive, "-tag", "v1",
		"-version", "v1.2.3+dirty", "-revision", "abc", "-arch", runtime.GOARCH}, "SOURCE_DATE_EPOCH=1700000000")
	require.Equal(t, 0, r.code, r.stderr)
	img, desc := readLayout(t, oci, "v1")
	assert.Contains(t, r.stdout, "overlay image "+desc.Digest.String())
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "2023-11-14T22:13:20Z", cf.Created.UTC().Format(time.RFC3339))
	assert.Equal(t, "v1.2.3+dirty", cf.Config.Labels["org.opencontainers.image.version"])
	assert.Equal(t, "abc", cf.Config.Labels["org.opencontainers.image.revision"])
	cfgName, err := img.ConfigName()
	require.NoError(t, err)
	config, tags := archiveManifest(t, archive)
	assert.Equal(t, []string{"infera/overlay:v1.2.3-dirty"}, tags, "a version is turned into a valid tag")
	assert.Contains(t, config, cfgName.Hex)
	assert.Contains(t, r.stdout, "(infera/overlay:v1.2.3-dirty)")

	// Outputs are replaced, not merged.
	require.NoError(t, os.WriteFile(filepath.Join(oci, "stale"), nil, 0o644))
	r = runTool([]string{"image", "-payload", payload, "-oci", oci, "-archive", "", "-arch", runtime.GOARCH})
	require.Equal(t, 0, r.code, r.stderr)
	assert.NoFileExists(t, filepath.Join(oci, "stale"))
	readLayout(t, oci, "latest")

	none := []string{"-oci", "", "-archive", ""}
	for _, c := range []struct {
		args []string
		env  []string
		code int
		want string
	}{
		{append([]string{"image", "-payload", payload}, none...), []string{"SOURCE_DATE_EPOCH=yesterday"}, exitUsage, "SOURCE_DATE_EPOCH"},
		{append([]string{"image", "-payload", payload}, none...), []string{"SOURCE_DATE_EPOCH=-1"}, exitUsage, "SOURCE_DATE_EPOCH"},
		{[]string{"image", "-payload", payload, "surplus"}, nil, exitUsage, "unexpected argument"},
		{[]string{"image", "-no-such-flag"}, nil, exitUsage, "not defined"},
		{append([]string{"image", "-payload", payload, "-name", "Not A Name"}, none...), nil, exitFailed, "-name"},
		{append([]string{"image", "-payload", payload, "-tag", "a b"}, none...), nil, exitFailed, "-tag"},
		{append([]string{"image", "-payload", payload, "-tag", "-x"}, none...), nil, exitFailed, "-tag"},
		{append([]string{"image", "-payload", filepath.Join(dir, "none")}, none...), nil, exitFailed, "no such file"},
	} {
		r := runTool(c.args, c.env...)
		assert.Equal(t, c.code, r.code, "%v %v", c.args, c.env)
		assert.Contains(t, r.stderr, c.want, "%v", c.args)
	}
}

// readLayout opens the one image of an OCI layout, which must be tagged ref.
func readLayout(t *testing.T, dir, ref string) (v1.Image, v1.Descriptor) {
	idx, err := layout.ImageIndexFromPath(dir)
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1, "one image in the layout")
	d := im.Manifests[0]
	require.Equal(t, ref, d.Annotations["org.opencontainers.image.ref.name"], "the layout's ref name")
	img, err := idx.Image(d.Digest)
	require.NoError(t, err)
	return img, d
}

// archiveManifest is the config file name and repo tags of the one image
// in a docker-archive's manifest.json.
func archiveManifest(t *testing.T, file string) (string, []string) {
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		require.NoError(t, err, "manifest.json not found in %s", file)
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct {
			Config   string
			RepoTags []string
		}
		require.NoError(t, json.NewDecoder(tr).Decode(&m))
		require.Len(t, m, 1)
		return m[0].Config, m[0].RepoTags
	}
}

// An output the tool will not replace is a wrong command line: exit 64,
// the message names the path and the fix, and nothing is removed. The
// same for index -out and -demo, harvest -out and image -oci.
func TestRefusedOutputsExit64(t *testing.T) {
	dir := t.TempDir()
	build := filepath.Join(dir, "build")
	wheels := filepath.Join(build, "wheels", "py312")
	require.NoError(t, os.MkdirAll(wheels, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(wheels, "m.py"), []byte("x = 1\n"), 0o644))
	notes := filepath.Join(dir, "notes")
	require.NoError(t, os.MkdirAll(notes, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(notes, "todo"), nil, 0o644))
	bin := shim(t)
	payload := filepath.Join(dir, "payload")
	r := runTool([]string{"index", "-out", payload, "-bin", bin, "-tree", wheels + ":py312"})
	require.Equal(t, 0, r.code, r.stderr)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"index", "-out", build, "-bin", bin, "-tree", wheels + ":py312"}, "-out " + build + ": holds -tree " + wheels},
		{[]string{"index", "-out", filepath.Join(build, "wheels"), "-bin", bin, "-tree", payload + ":py312"}, "-out " + filepath.Join(build, "wheels") + ": is a non-empty directory that infera-payload did not write (no .infera-payload-out in it)"},
		{[]string{"index", "-out", payload, "-bin", bin, "-tree", wheels + ":py312", "-demo", filepath.Join(build, "wheels")}, "-demo " + filepath.Join(build, "wheels") + ": holds -tree " + wheels},
		{[]string{"index", "-out", payload, "-bin", bin, "-tree", wheels + ":py312", "-demo", notes}, "-demo " + notes + ": is a non-empty directory"},
		{[]string{"harvest", "-root", dir, "-package", "x", "-out", build}, "-out " + build + ": is inside -root " + dir},
		{[]string{"image", "-payload", payload, "-oci", build, "-archive", "", "-arch", runtime.GOARCH}, "-oci " + build + ": is a non-empty directory"},
		{[]string{"image", "-payload", payload, "-oci", filepath.Join(payload, "oci"), "-archive", "", "-arch", runtime.GOARCH}, "-oci " + filepath.Join(payload, "oci") + ": is inside -payload " + payload},
	} {
		r := runTool(c.args)
		assert.Equal(t, exitUsage, r.code, "%v: %s", c.args, r.stderr)
		assert.Contains(t, r.stderr, c.want, "%v", c.args)
		assert.FileExists(t, filepath.Join(wheels, "m.py"), "%v", c.args)
		assert.FileExists(t, filepath.Join(payload, "bin", "infera-exec"), "%v", c.args)
		assert.FileExists(t, filepath.Join(notes, "todo"), "%v", c.args)
	}
	r = runTool([]string{"index", "-out", filepath.Join(build, "wheels"), "-bin", bin, "-tree", payload + ":py312", "-force"})
	assert.Equal(t, 0, r.code, "-force replaces a directory that holds no input: %s", r.stderr)

	// image -oci replaces its own layout without -force.
	oci := filepath.Join(dir, "oci")
	for i := 0; i < 2; i++ {
		r = runTool([]string{"image", "-payload", payload, "-oci", oci, "-archive", "", "-arch", runtime.GOARCH})
		require.Equal(t, 0, r.code, r.stderr)
	}
	assert.Contains(t, runTool([]string{"--help"}).stdout, "64 a wrong command line (an output")
}

// --version prints the version make build stamps (-X main.version).
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "version"} {
		r := runTool([]string{arg})
		require.Equal(t, 0, r.code, "%s: %s", arg, r.stderr)
		assert.Equal(t, "infera-payload "+version+"\n", r.stdout, arg)
	}
}

// index checks a payload definition's markers against the pristine trees
// shipped beside it (DIR/<import-name>/<name>.trees/<tree>/): a marker
// that a tree holds outside the edit's site is exit 1 (the build failed),
// naming the definition, the file and the line, and nothing is written.
func TestIndexRefusesAmbiguousMarker(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	write("patches/vllm/fix.toml", `id = "my-fix"
summary = "a fix"
package = "vllm"
distribution = "vllm"
[[guard]]
file = "mod.py"
contains = "def f("
[[edit]]
file = "mod.py"
site = "def f("
anchor = "    return 1\n"
replacement = "    return 1 + 0\n"
upstream = "ev = record()"
`)
	write("patches/vllm/fix.trees/v0.20/vllm/mod.py", "def f():\n    return 1\n\n\ndef g():\n    ev = record()\n")
	write("py/pkg/__init__.py", "")
	out := filepath.Join(dir, "payload")
	r := runTool([]string{"index", "-q", "-out", out, "-bin", shim(t), "-tree", filepath.Join(dir, "py") + ":py312", "-patches", filepath.Join(dir, "patches")})
	assert.Equal(t, exitFailed, r.code, "%s", r.stderr)
	assert.Contains(t, r.stderr, "patch definition my-fix ("+filepath.Join(dir, "patches", "vllm", "fix.toml")+"): edit 1: upstream at line 6 in "+filepath.Join(dir, "patches", "vllm", "fix.trees", "v0.20", "vllm", "mod.py"))
	assert.NoDirExists(t, out, "nothing written")

	// The same definition with a marker upstream has nowhere else builds.
	require.NoError(t, os.Remove(filepath.Join(dir, "patches", "vllm", "fix.trees", "v0.20", "vllm", "mod.py")))
	write("patches/vllm/fix.trees/v0.20/vllm/mod.py", "def f():\n    return 1\n")
	r = runTool([]string{"index", "-q", "-out", out, "-bin", shim(t), "-tree", filepath.Join(dir, "py") + ":py312", "-patches", filepath.Join(dir, "patches")})
	assert.Equal(t, 0, r.code, "%s", r.stderr)
	assert.NotContains(t, r.stdout, "note:")
}
