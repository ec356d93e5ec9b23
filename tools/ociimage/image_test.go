package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/overlay"
)

// Two builds of the same payload give the same image, byte for byte, even
// from another directory whose files have other times; another
// SOURCE_DATE_EPOCH gives another image.
func TestReproducible(t *testing.T) {
	p := testPayload(t)
	r1, o1 := buildTo(t, p, tempDir(t))

	again := copyPayload(t, p)
	later := time.Now().Add(time.Hour)
	require.NoError(t, filepath.Walk(again, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(path, later, later)
	}))
	r2, o2 := buildTo(t, again, tempDir(t))

	assert.Equal(t, r1.Digest, r2.Digest, "manifest digest")
	assert.Equal(t, r1.Config, r2.Config, "config digest")
	assert.Equal(t, r1.DiffID, r2.DiffID, "layer")
	assert.Equal(t, snapshot(t, o1.OCI), snapshot(t, o2.OCI), "OCI layouts")
	a1, err := os.ReadFile(o1.Archive)
	require.NoError(t, err)
	a2, err := os.ReadFile(o2.Archive)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(a1, a2), "docker-archives differ")
	t.Logf("two builds: %s", r1.Digest)

	o3 := o1
	o3.Created = time.Unix(1700000000, 0).UTC()
	o3.OCI, o3.Archive = filepath.Join(tempDir(t), "oci"), ""
	r3, err := Build(o3)
	require.NoError(t, err)
	assert.NotEqual(t, r1.Digest, r3.Digest, "SOURCE_DATE_EPOCH must change the image")
}

// readLayout opens the image tagged ref in an OCI layout.
func readLayout(t *testing.T, dir, ref string) (v1.Image, v1.Descriptor) {
	idx, err := layout.ImageIndexFromPath(dir)
	require.NoError(t, err)
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1, "one image in the layout")
	d := im.Manifests[0]
	require.Equal(t, ref, d.Annotations[refNameKey], "the layout's ref name")
	img, err := idx.Image(d.Digest)
	require.NoError(t, err)
	return img, d
}

// The image is scratch plus one layer that is exactly the payload, with
// the configuration an init container needs, and nothing that varies.
func TestImage(t *testing.T) {
	p := testPayload(t)
	r, o := buildTo(t, p, tempDir(t))
	img, desc := readLayout(t, o.OCI, "latest")

	assert.Equal(t, r.Digest, desc.Digest)
	assert.Equal(t, types.OCIManifestSchema1, desc.MediaType)
	require.NotNil(t, desc.Platform)
	assert.Equal(t, runtime.GOARCH, desc.Platform.Architecture)
	assert.Equal(t, "linux", desc.Platform.OS)
	assert.Empty(t, desc.ArtifactType, "an image is not an artifact")

	m, err := img.Manifest()
	require.NoError(t, err)
	assert.Equal(t, types.OCIConfigJSON, m.Config.MediaType)
	require.Len(t, m.Layers, 1)
	assert.Equal(t, types.OCILayer, m.Layers[0].MediaType)

	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/bin/infera-exec", "--install"}, cf.Config.Entrypoint)
	assert.Equal(t, []string{"/overlay"}, cf.Config.Cmd)
	assert.Equal(t, []string{"PATH=/bin:/usr/bin"}, cf.Config.Env)
	assert.Equal(t, map[string]string{
		"org.opencontainers.image.title":    "infera-exec overlay",
		"org.opencontainers.image.version":  "test",
		"org.opencontainers.image.revision": "0123456789ab",
	}, cf.Config.Labels)
	assert.Empty(t, cf.Config.User)
	assert.Empty(t, cf.Config.WorkingDir)
	assert.Equal(t, runtime.GOARCH, cf.Architecture)
	assert.Equal(t, "linux", cf.OS)
	assert.True(t, cf.Created.Equal(o.Created), "created %s", cf.Created)
	require.Len(t, cf.History, 1)
	assert.True(t, cf.History[0].Created.Equal(o.Created))
	assert.Equal(t, []v1.Hash{r.DiffID}, cf.RootFS.DiffIDs)

	layers, err := img.Layers()
	require.NoError(t, err)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	got := map[string]string{}
	// The entries of the payload at the root, of its copy at /payload, and
	// of the compat files.
	var section int
	sections := [][]string{nil, nil, nil}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		n := strings.TrimSuffix(h.Name, "/")
		switch {
		case n == PayloadDir:
			section = 1
		case strings.HasPrefix(n, "usr"):
			section = 2
		}
		sections[section] = append(sections[section], n)
		assert.Zero(t, h.Uid, h.Name)
		assert.Zero(t, h.Gid, h.Name)
		assert.Empty(t, h.Uname, h.Name)
		assert.Empty(t, h.Gname, h.Name)
		assert.True(t, h.ModTime.Equal(o.Created), "%s: mtime %s", h.Name, h.ModTime)
		for k := range h.PAXRecords {
			// A name or link target too long for a ustar header, nothing else
			// (no times that vary).
			assert.Contains(t, []string{"path", "linkpath"}, k, "%s: PAX record %s", h.Name, k)
		}
		assert.Zero(t, h.Format&tar.FormatGNU, "%s: GNU header", h.Name)
		assert.False(t, strings.HasPrefix(h.Name, "/") || strings.HasPrefix(h.Name, "./"), h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			assert.True(t, strings.HasSuffix(h.Name, "/"), h.Name)
			got[n] = fmt.Sprintf("dir %04o", h.Mode)
		case tar.TypeSymlink:
			got[n] = "symlink -> " + h.Linkname
		case tar.TypeLink:
			// A hard link: the file it names must come first.
			target, ok := got[h.Linkname]
			require.True(t, ok, "%s: hard link to %s, not yet in the layer", h.Name, h.Linkname)
			assert.True(t, strings.HasPrefix(target, "file "), "%s: hard link to %s", h.Name, target)
			got[n] = target
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			require.NoError(t, err)
			sum := sha256.Sum256(data)
			got[n] = fmt.Sprintf("file %04o %d %s", h.Mode, len(data), hex.EncodeToString(sum[:]))
		default:
			t.Errorf("%s: tar type %q", h.Name, h.Typeflag)
		}
	}
	for i, names := range sections {
		assert.True(t, sort.StringsAreSorted(names), "tar entries of part %d are not sorted: %v", i, names)
	}
	// The payload at the root; again at /payload, for the v0.2.2 init
	// container; busybox as sh and cp on PATH, with its copyright.
	want := snapshot(t, p, overlay.OutMarker)
	want[PayloadDir] = "dir 0755"
	for k, v := range snapshot(t, p, overlay.OutMarker) {
		want[PayloadDir+"/"+k] = v
	}
	bb, err := os.ReadFile(o.Busybox)
	require.NoError(t, err)
	cr, err := os.ReadFile(o.BusyboxCopyright)
	require.NoError(t, err)
	describe := func(mode int, data []byte) string {
		sum := sha256.Sum256(data)
		return fmt.Sprintf("file %04o %d %s", mode, len(data), hex.EncodeToString(sum[:]))
	}
	for _, d := range []string{"usr", "usr/bin", "usr/share", "usr/share/doc", "usr/share/doc/busybox-static"} {
		want[d] = "dir 0755"
	}
	want["usr/bin/busybox"] = describe(0o755, bb)
	want["usr/bin/sh"] = "symlink -> busybox"
	want["usr/bin/cp"] = "symlink -> busybox"
	want["usr/share/doc/busybox-static/copyright"] = describe(0o644, cr)
	assert.Equal(t, want, got, "the layer is the payload, its copy at /payload and busybox")
	assert.Contains(t, got, overlay.IndexName)
	assert.Contains(t, got, "bin/infera-exec")
	assert.Contains(t, got, PayloadDir+"/"+overlay.IndexName)
	assert.Equal(t, len(sections[0])+len(sections[1])+len(sections[2]), r.Entries, "Result.Entries")
}

// A payload that is not what its index says, or that the image could not
// run, is refused before anything is written.
func TestRefusesPayload(t *testing.T) {
	p := testPayload(t)
	otherArch := "arm64"
	if runtime.GOARCH == "arm64" {
		otherArch = "amd64"
	}
	reindex := func(t *testing.T, dir string) {
		_, err := overlay.WriteIndex(dir)
		require.NoError(t, err)
	}
	for _, c := range []struct {
		name   string
		change func(t *testing.T, dir string, o *Options)
		want   string
	}{
		{"file changed, same size", func(t *testing.T, dir string, _ *Options) {
			f := filepath.Join(dir, "py312/infera_demo/worker.py")
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(f, bytes.ToUpper(data), 0o644))
		}, "py312/infera_demo/worker.py: 27 bytes with SHA-256"},
		{"file truncated", func(t *testing.T, dir string, _ *Options) {
			require.NoError(t, os.Truncate(filepath.Join(dir, "bin/infera-exec"), 4096))
		}, "bin/infera-exec: 4096 bytes"},
		{"file not in the index", func(t *testing.T, dir string, _ *Options) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "py312/extra.py"), nil, 0o644))
		}, "py312/extra.py: in the payload, not in the index"},
		{"file missing", func(t *testing.T, dir string, _ *Options) {
			require.NoError(t, os.Remove(filepath.Join(dir, "py312/infera_demo/secret.cfg")))
		}, "py312/infera_demo/secret.cfg: in the index, missing from the payload"},
		{"mode changed", func(t *testing.T, dir string, _ *Options) {
			require.NoError(t, os.Chmod(filepath.Join(dir, "py312/infera_demo/secret.cfg"), 0o644))
		}, "secret.cfg: mode 0644, the index says 0600"},
		{"directory mode changed", func(t *testing.T, dir string, _ *Options) {
			require.NoError(t, os.Chmod(filepath.Join(dir, "py312/infera_demo/empty"), 0o755))
		}, "empty: mode 0755, the index says 0750"},
		{"symlink retargeted", func(t *testing.T, dir string, _ *Options) {
			l := filepath.Join(dir, "native/rocm7-py312/lib/libdemo.so")
			require.NoError(t, os.Remove(l))
			require.NoError(t, os.Symlink("libdemo.so.1.0.0", l))
		}, "libdemo.so: -> libdemo.so.1.0.0, the index says -> libdemo.so.1"},
		{"file became a symlink", func(t *testing.T, dir string, _ *Options) {
			f := filepath.Join(dir, "native/rocm7-py312/CAPABILITIES")
			require.NoError(t, os.Remove(f))
			require.NoError(t, os.Symlink("lib/libdemo.so.1.0.0", f))
		}, "CAPABILITIES: a symlink, the index says file"},
		{"symlink out of the payload", func(t *testing.T, dir string, _ *Options) {
			require.NoError(t, os.Symlink("../../../etc/passwd", filepath.Join(dir, "py312/passwd")))
		}, "leads out of the payload"},
		{"named pipe", func(t *testing.T, dir string, _ *Options) {
			require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "py312/pipe"), 0o644))
		}, "a payload holds files, directories and symlinks only"},
		{"index lists another type", func(t *testing.T, dir string, _ *Options) {
			f := filepath.Join(dir, overlay.IndexName)
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(f, bytes.Replace(data, []byte(`"type": "symlink"`), []byte(`"type": "hardlink"`), 1), 0o644))
		}, `type "hardlink" is not dir, file or symlink`},
		{"no index", func(t *testing.T, dir string, _ *Options) {
			require.NoError(t, os.Remove(filepath.Join(dir, overlay.IndexName)))
		}, "payload index"},
		{"binary is not ELF", func(t *testing.T, dir string, _ *Options) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "bin/infera-exec"), []byte("#!/bin/sh\n"), 0o755))
			reindex(t, dir)
		}, "the image's entrypoint must be the static infera-exec"},
		{"binary is dynamically linked", func(t *testing.T, dir string, _ *Options) {
			dyn := dynamicELF(t)
			data, err := os.ReadFile(dyn)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "bin/infera-exec"), data, 0o755))
			reindex(t, dir)
		}, "is dynamically linked"},
		{"binary for another architecture", func(t *testing.T, _ string, o *Options) {
			o.Arch = otherArch
		}, "the image is for " + otherArch},
		{"busybox without its copyright", func(t *testing.T, _ string, o *Options) {
			o.Busybox = shim(t)
		}, "-busybox-copyright FILE is required with it"},
		{"busybox dynamically linked", func(t *testing.T, _ string, o *Options) {
			o.Busybox, o.BusyboxCopyright = dynamicELF(t), testCopyright(t)
		}, "use Debian's busybox-static"},
		{"busybox not ELF", func(t *testing.T, _ string, o *Options) {
			o.Busybox, o.BusyboxCopyright = testCopyright(t), testCopyright(t)
		}, "want a static busybox"},
		{"busybox copyright empty", func(t *testing.T, dir string, o *Options) {
			empty := filepath.Join(dir, "..", "empty-copyright")
			require.NoError(t, os.WriteFile(empty, nil, 0o644))
			o.Busybox, o.BusyboxCopyright = shim(t), empty
		}, "is empty"},
		{"payload holds /payload", func(t *testing.T, dir string, _ *Options) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "payload"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "payload/x"), nil, 0o644))
			reindex(t, dir)
		}, "the image keeps /payload for the v0.2.2 contract"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyPayload(t, p)
			out := tempDir(t)
			o := Options{
				Payload: dir, OCI: filepath.Join(out, "oci"), Archive: filepath.Join(out, "overlay.tar"),
				Tag: "latest", Name: "infera/overlay:test", Arch: runtime.GOARCH, OS: "linux",
			}
			c.change(t, dir, &o)
			_, err := Build(o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.NoFileExists(t, o.Archive)
			assert.NoDirExists(t, o.OCI)
		})
	}
}

// dynamicELF is a dynamically linked executable of this machine.
func dynamicELF(t *testing.T) string {
	for _, p := range []string{"/bin/true", "/usr/bin/true", "/bin/sh"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				f.Close()
				return p
			}
		}
		f.Close()
	}
	t.Skip("no dynamically linked executable on this machine")
	return ""
}

func TestTagSafe(t *testing.T) {
	for in, want := range map[string]string{
		"v0.3.0":                 "v0.3.0",
		"v0.3.0-4-gabc-dirty":    "v0.3.0-4-gabc-dirty",
		"v1.2.3+meta":            "v1.2.3-meta",
		"":                       "dev",
		"-x":                     "x",
		".hidden":                "hidden",
		"a/b c":                  "a-b-c",
		strings.Repeat("x", 200): strings.Repeat("x", 128),
	} {
		assert.Equal(t, want, tagSafe(in), in)
	}
}
