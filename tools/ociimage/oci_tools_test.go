package ociimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/overlay"
)

// The installed-marker --install writes into a destination, beside the
// payload's own files.
const installedMarker = ".infera-installed.json"

// The record of the installed files' identities, beside it (a re-install
// reads no file it vouches for).
const installRecord = ".infera-install-record.json"

// runTool runs a command with a deadline and returns its stdout.
func runTool(t *testing.T, env []string, name string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s %s\n%s", name, strings.Join(args, " "), stderr.String())
	return stdout.Bytes()
}

// skopeoInspect is the JSON of `skopeo inspect [flags] REF`.
func skopeoInspect(t *testing.T, skopeo, ref string, flags ...string) map[string]any {
	var m map[string]any
	out := runTool(t, os.Environ(), skopeo, append(append([]string{"inspect"}, flags...), ref)...)
	require.NoError(t, json.Unmarshal(out, &m), "%s", out)
	return m
}

// skopeo, the containers/image implementation Podman and CRI-O use, reads
// both outputs: the layout by its ref name and the archive by its repo
// tag, with the entrypoint, platform and blobs Build wrote.
func TestSkopeoReadsBothForms(t *testing.T) {
	skopeo := tool(t, "skopeo", "skopeo")
	r, o := buildTo(t, testPayload(t), tempDir(t))
	layoutRef := "oci:" + o.OCI + ":" + o.Tag
	archiveRef := "docker-archive:" + o.Archive + ":" + o.Name

	for _, ref := range []string{layoutRef, archiveRef} {
		info := skopeoInspect(t, skopeo, ref)
		assert.Equal(t, runtime.GOARCH, info["Architecture"], ref)
		assert.Equal(t, "linux", info["Os"], ref)
		assert.Equal(t, []any{"PATH=/bin:/usr/bin"}, info["Env"], ref)
		assert.Equal(t, "1970-01-01T00:00:00Z", info["Created"], ref)

		cfg := skopeoInspect(t, skopeo, ref, "--config")
		c, _ := cfg["config"].(map[string]any)
		assert.Equal(t, []any{"/bin/infera-exec", "--install"}, c["Entrypoint"], ref)
		assert.Equal(t, []any{"/overlay"}, c["Cmd"], ref)
		rootfs, _ := cfg["rootfs"].(map[string]any)
		assert.Equal(t, []any{r.DiffID.String()}, rootfs["diff_ids"], ref)

		raw := skopeoInspect(t, skopeo, ref, "--raw")
		rc, _ := raw["config"].(map[string]any)
		assert.Equal(t, r.Config.String(), rc["digest"], "%s: config digest", ref)
	}

	// The layout: the manifest skopeo reads is the one whose digest Build
	// printed.
	info := skopeoInspect(t, skopeo, layoutRef)
	assert.Equal(t, r.Digest.String(), info["Digest"])
	raw := runTool(t, os.Environ(), skopeo, "inspect", "--raw", layoutRef)
	sum := sha256.Sum256(raw)
	assert.Equal(t, r.Digest.Hex, hex.EncodeToString(sum[:]), "the layout's manifest")

	// The archive: every blob checks out when skopeo copies it whole, and
	// the copy has the same layer and entrypoint (skopeo rewrites the
	// config when it converts the image, so its digest is not ours).
	copied := "oci:" + filepath.Join(tempDir(t), "copy") + ":copy"
	runTool(t, os.Environ(), skopeo, "copy", "--quiet", archiveRef, copied)
	cfg := skopeoInspect(t, skopeo, copied, "--config")
	c, _ := cfg["config"].(map[string]any)
	assert.Equal(t, []any{"/bin/infera-exec", "--install"}, c["Entrypoint"], "the archive, copied")
	rootfs, _ := cfg["rootfs"].(map[string]any)
	assert.Equal(t, []any{r.DiffID.String()}, rootfs["diff_ids"], "the archive's layer, copied")

	// An archive names its image: a tag it does not hold is not found.
	out, err := exec.Command(skopeo, "inspect", "docker-archive:"+o.Archive+":infera/overlay:other").CombinedOutput()
	assert.Error(t, err, "%s", out)
}

// umoci unpacks the layout into a root filesystem that is the payload, byte
// for byte; its bin/infera-exec is the static binary, and its --install,
// run from the unpacked root with nothing telling it where the payload is,
// reproduces the payload in a destination. The archive, converted to a
// layout by skopeo, unpacks to the same files.
func TestUmociUnpackAndInstall(t *testing.T) {
	umoci := tool(t, "umoci", "umoci")
	p := testPayload(t)
	want := snapshot(t, p, overlay.OutMarker) // the marker of infera-payload index is not part of the payload
	_, o := buildTo(t, p, tempDir(t))
	dir := tempDir(t)

	unpack := func(image, bundle string) string {
		args := []string{"unpack", "--image", image, bundle}
		if os.Geteuid() != 0 {
			args = []string{"unpack", "--rootless", "--image", image, bundle}
		}
		runTool(t, os.Environ(), umoci, args...)
		return filepath.Join(bundle, "rootfs")
	}
	rootfs := unpack(o.OCI+":"+o.Tag, filepath.Join(dir, "bundle"))
	assert.Equal(t, want, snapshot(t, rootfs, PayloadDir, "usr"), "the unpacked root filesystem is the payload")
	assert.Equal(t, want, snapshot(t, filepath.Join(rootfs, PayloadDir)), "the payload at /payload, for the v0.2.2 init container")
	assert.FileExists(t, filepath.Join(rootfs, BusyboxPath))
	assert.FileExists(t, filepath.Join(rootfs, BusyboxCopyrightPath))

	bin := filepath.Join(rootfs, "bin", "infera-exec")
	f, err := elf.Open(bin)
	require.NoError(t, err)
	for _, prog := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, prog.Type, "%s has a program interpreter", bin)
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs)
	f.Close()

	// --install as the image's entrypoint runs it: PAYLOAD_ROOT unset, so
	// the payload is the root the binary sits in.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAYLOAD_ROOT=") {
			env = append(env, kv)
		}
	}
	dest := filepath.Join(dir, "overlay")
	install := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "--install", dest)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	out := install()
	assert.Contains(t, out, "installed the payload "+rootfs+" into "+dest)
	assert.Equal(t, want, snapshot(t, dest, installedMarker, installRecord), "the installed payload")
	marker, err := os.ReadFile(filepath.Join(dest, installedMarker))
	require.NoError(t, err)
	index, err := os.ReadFile(filepath.Join(p, overlay.IndexName))
	require.NoError(t, err)
	assert.Equal(t, string(index), string(marker), "the marker records the payload's index")
	assert.Contains(t, install(), "0 copied", "a second install changes nothing")
	assert.Equal(t, want, snapshot(t, dest, installedMarker, installRecord))

	// The archive holds the same files.
	if skopeo, err := exec.LookPath("skopeo"); err == nil {
		layout := filepath.Join(dir, "from-archive")
		runTool(t, os.Environ(), skopeo, "copy", "--quiet", "docker-archive:"+o.Archive, "oci:"+layout+":a")
		assert.Equal(t, want, snapshot(t, unpack(layout+":a", filepath.Join(dir, "bundle2")), PayloadDir, "usr"), "the archive's root filesystem")
	} else if os.Getenv("INFERA_REQUIRE_FIXTURES") == "1" {
		t.Fatal("INFERA_REQUIRE_FIXTURES=1 but skopeo is not installed (apt-get install skopeo)")
	}
}
