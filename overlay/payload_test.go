package overlay_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/overlay"
)

// payload lays out a payload root in a fresh directory: each entry ending
// in "/" is a directory, anything else a file with the given content.
func payload(t *testing.T, entries map[string]string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "payload")
	require.NoError(t, os.MkdirAll(root, 0o755))
	for name, content := range entries {
		p := filepath.Join(root, name)
		if name[len(name)-1] == '/' {
			require.NoError(t, os.MkdirAll(p, 0o755))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return root
}

func rocm7py312() abi.Family {
	return abi.Family{ROCm: abi.ROCm{Found: true, Major: 7}, Python: abi.Python{Major: 3, Minor: 12}}
}

func noROCmPy312() abi.Family {
	return abi.Family{
		ROCm:   abi.ROCm{Searched: []string{"/opt/rocm/lib"}},
		Python: abi.Python{Major: 3, Minor: 12},
	}
}

func open(t *testing.T, root string) *overlay.Payload {
	t.Helper()
	p, err := overlay.Open(root)
	require.NoError(t, err)
	require.NotNil(t, p)
	return p
}

func nativeNames(p *overlay.Payload) []string {
	var out []string
	for _, n := range p.NativeTrees {
		out = append(out, n.Name)
	}
	return out
}

func TestOpenMissingRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "overlay")
	p, err := overlay.Open(root)
	require.Error(t, err)
	assert.Nil(t, p)
	var pe *overlay.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, root, pe.Path)
	assert.Contains(t, err.Error(), "does not exist")
	assert.Contains(t, err.Error(), "PAYLOAD_ROOT")
	assert.Contains(t, err.Error(), "payload "+root+":")
}

func TestOpenRootIsAFile(t *testing.T) {
	root := filepath.Join(t.TempDir(), "payload.tar")
	require.NoError(t, os.WriteFile(root, []byte("x"), 0o644))
	_, err := overlay.Open(root)
	var pe *overlay.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, root, pe.Path)
	assert.Contains(t, err.Error(), "is not a directory")
	assert.Contains(t, err.Error(), "a regular file")
}

func TestOpenRootThroughSymlink(t *testing.T) {
	root := payload(t, map[string]string{"py312/": ""})
	link := filepath.Join(t.TempDir(), "overlay")
	require.NoError(t, os.Symlink(root, link))
	p := open(t, link)
	assert.Equal(t, link, p.Root)
	assert.Equal(t, []string{"py312"}, p.PyTrees)
}

func TestOpenListsTrees(t *testing.T) {
	root := payload(t, map[string]string{
		"py310/":                    "",
		"py39/":                     "",
		"py313/":                    "",
		"py312/":                    "",
		"pyfoo/":                    "",
		"py2/":                      "",
		"py27/":                     "",
		"py3/":                      "",
		"py311":                     "a file, not a tree",
		"py312.bak/":                "",
		"native/rocm7-py312/":       "",
		"native/rocm10-py39/":       "",
		"native/rocm6-py312/":       "",
		"native/rocm7-py310/":       "",
		"native/rocm7-py312.bak/":   "",
		"native/rocm7-py311":        "a file",
		"native/cuda12-py312/":      "",
		"native/README":             "x",
		"native/rocm7/":             "",
		"native/py312/":             "",
		"native/rocm7-py312/lib/":   "",
		"native/rocm7-py312/py312/": "",
	})
	p := open(t, root)
	assert.Equal(t, root, p.Root)
	assert.Equal(t, []string{"py39", "py310", "py312", "py313"}, p.PyTrees)
	assert.Equal(t, []string{"rocm6-py312", "rocm7-py310", "rocm7-py312", "rocm10-py39"}, nativeNames(p))
	for _, n := range p.NativeTrees {
		assert.Equal(t, filepath.Join(root, "native", n.Name), n.Dir)
	}
	assert.Empty(t, p.Bin, "no bin/ in this payload")
}

func TestOpenEmpty(t *testing.T) {
	p := open(t, payload(t, nil))
	assert.Empty(t, p.PyTrees)
	assert.Empty(t, p.NativeTrees)
	assert.Empty(t, p.Bin)
}

func TestOpenBin(t *testing.T) {
	t.Run("directory", func(t *testing.T) {
		root := payload(t, map[string]string{"bin/infera-exec": "x"})
		assert.Equal(t, filepath.Join(root, "bin"), open(t, root).Bin)
	})
	t.Run("file is not a bin dir", func(t *testing.T) {
		root := payload(t, map[string]string{"bin": "x"})
		assert.Empty(t, open(t, root).Bin)
	})
}

func TestOpenNativeIsAFile(t *testing.T) {
	root := payload(t, map[string]string{"py312/": "", "native": "not a dir"})
	_, err := overlay.Open(root)
	var pe *overlay.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, filepath.Join(root, "native"), pe.Path)
	assert.Contains(t, err.Error(), "cannot list it")
}

func TestOpenCapabilities(t *testing.T) {
	root := payload(t, map[string]string{
		"native/rocm7-py312/CAPABILITIES": "mooncake hipfile\n",
		"native/rocm6-py312/":             "",
		"native/rocm7-py311/CAPABILITIES": "",
		"native/rocm7-py313/CAPABILITIES": "mooncake\r\nhipfile\r\n",
	})
	p := open(t, root)
	byName := map[string]overlay.NativeTree{}
	for _, n := range p.NativeTrees {
		byName[n.Name] = n
	}
	require.Len(t, byName, 4)

	t.Run("present", func(t *testing.T) {
		n := byName["rocm7-py312"]
		assert.Equal(t, []string{"hipfile", "mooncake"}, n.Declared)
		assert.Equal(t, filepath.Join(root, "native", "rocm7-py312", "CAPABILITIES"), n.CapFile)
		assert.Empty(t, n.CapNotes)
	})
	t.Run("absent", func(t *testing.T) {
		n := byName["rocm6-py312"]
		assert.Empty(t, n.Declared)
		assert.NotNil(t, n.Declared, "an empty set, not a missing one")
		assert.Equal(t, "", n.CapFile)
		assert.Empty(t, n.CapNotes)
	})
	t.Run("empty file", func(t *testing.T) {
		n := byName["rocm7-py311"]
		assert.Empty(t, n.Declared)
		assert.Equal(t, filepath.Join(root, "native", "rocm7-py311", "CAPABILITIES"), n.CapFile)
		require.Len(t, n.CapNotes, 1)
		assert.Contains(t, n.CapNotes[0], "is empty")
	})
	t.Run("CRLF on several lines", func(t *testing.T) {
		n := byName["rocm7-py313"]
		assert.Equal(t, []string{"hipfile", "mooncake"}, n.Declared)
		assert.Contains(t, n.CapNotes, "has CRLF line endings")
		assert.Contains(t, n.CapNotes, "spans 2 lines (expected one line)")
	})
}

func TestOpenCapabilitiesIsADirectory(t *testing.T) {
	root := payload(t, map[string]string{"native/rocm7-py312/CAPABILITIES/": ""})
	_, err := overlay.Open(root)
	var pe *overlay.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, filepath.Join(root, "native", "rocm7-py312", "CAPABILITIES"), pe.Path)
	assert.Contains(t, err.Error(), "is a directory")
}

func TestSelectPythonTreeMissing(t *testing.T) {
	t.Run("others present", func(t *testing.T) {
		root := payload(t, map[string]string{"py311/": "", "py310/": "", "py39/": "", "native/rocm7-py312/": ""})
		f := rocm7py312()
		f.Python.DecidedBy = "interpreter name /usr/bin/python3.12"
		s, err := open(t, root).Select(f)
		require.Error(t, err)
		assert.Nil(t, s)
		var pe *overlay.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, root, pe.Path)
		assert.Contains(t, err.Error(), "no Python tree py312 for CPython 3.12")
		assert.Contains(t, err.Error(), "interpreter name /usr/bin/python3.12", "says how the version was decided")
		assert.Contains(t, err.Error(), "trees present: py39 py310 py311")
	})
	t.Run("none present", func(t *testing.T) {
		root := payload(t, map[string]string{"bin/": "", "native/rocm7-py312/": ""})
		_, err := open(t, root).Select(rocm7py312())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no Python tree py312")
		assert.Contains(t, err.Error(), "trees present: none")
	})
}

func TestSelectNativeTreeMissing(t *testing.T) {
	t.Run("others present", func(t *testing.T) {
		root := payload(t, map[string]string{
			"py312/":              "",
			"bin/":                "",
			"native/rocm6-py312/": "",
			"native/rocm7-py311/": "",
		})
		s, err := open(t, root).Select(rocm7py312())
		require.NoError(t, err)
		assert.Equal(t, "rocm7-py312", s.Family)
		assert.Nil(t, s.Native)
		assert.Equal(t, "the payload has no native tree rocm7-py312", s.NoNativeWhy)
		require.Len(t, s.Warnings, 1)
		assert.Contains(t, s.Warnings[0], "no native tree rocm7-py312")
		assert.Contains(t, s.Warnings[0], filepath.Join(root, "native"))
		assert.Contains(t, s.Warnings[0], "native trees present: rocm6-py312 rocm7-py311")
		assert.Equal(t, []string{filepath.Join(root, "py312")}, s.PythonPath)
		assert.Empty(t, s.LibraryPath)
		assert.Equal(t, []string{filepath.Join(root, "bin")}, s.Path)
	})
	t.Run("no native dir", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": ""})
		s, err := open(t, root).Select(rocm7py312())
		require.NoError(t, err)
		assert.Nil(t, s.Native)
		require.Len(t, s.Warnings, 1)
		assert.Contains(t, s.Warnings[0], "no native tree rocm7-py312")
		assert.Contains(t, s.Warnings[0], "native trees present: none")
	})
}

func TestSelectNoROCm(t *testing.T) {
	root := payload(t, map[string]string{
		"py312/":                          "",
		"bin/":                            "",
		"native/rocm7-py312/lib/":         "",
		"native/rocm7-py312/CAPABILITIES": "mooncake\r\n",
	})
	p := open(t, root)

	t.Run("detected", func(t *testing.T) {
		s, err := p.Select(noROCmPy312())
		require.NoError(t, err)
		assert.Equal(t, "py312", s.Family)
		assert.Nil(t, s.Native)
		assert.Contains(t, s.NoNativeWhy, "no ROCm")
		assert.Contains(t, s.NoNativeWhy, "/opt/rocm/lib")
		assert.Empty(t, s.Warnings, "no ROCm is not a reason to warn, and the unused tree's CAPABILITIES notes do not matter")
		assert.Equal(t, []string{filepath.Join(root, "py312")}, s.PythonPath)
		assert.Empty(t, s.LibraryPath)
		assert.Equal(t, []string{filepath.Join(root, "bin")}, s.Path)
	})
	t.Run("overridden", func(t *testing.T) {
		c, err := config.ParseFamily("py312")
		require.NoError(t, err)
		f := abi.FromConfig(c)
		s, err := p.Select(f)
		require.NoError(t, err)
		assert.Nil(t, s.Native)
		assert.Equal(t, "INFERA_ABI_FAMILY=py312 names no ROCm major", s.NoNativeWhy)
		assert.Empty(t, s.Warnings)
	})
}

func TestSelectPathComposition(t *testing.T) {
	t.Run("native with lib and bin, payload bin", func(t *testing.T) {
		root := payload(t, map[string]string{
			"py311/":                  "",
			"py312/":                  "",
			"bin/":                    "",
			"native/rocm7-py312/lib/": "",
			"native/rocm7-py312/bin/": "",
			"native/rocm6-py312/lib/": "",
		})
		s, err := open(t, root).Select(rocm7py312())
		require.NoError(t, err)
		native := filepath.Join(root, "native", "rocm7-py312")
		require.NotNil(t, s.Native)
		assert.Equal(t, "rocm7-py312", s.Native.Name)
		assert.Equal(t, native, s.Native.Dir)
		assert.Empty(t, s.NoNativeWhy)
		assert.Empty(t, s.Warnings)
		assert.Equal(t, filepath.Join(root, "py312"), s.PyTree)
		assert.Equal(t, filepath.Join(root, "bin"), s.Bin)
		assert.Equal(t, []string{native, filepath.Join(root, "py312")}, s.PythonPath)
		assert.Equal(t, []string{filepath.Join(native, "lib")}, s.LibraryPath)
		assert.Equal(t, []string{filepath.Join(native, "bin"), filepath.Join(root, "bin")}, s.Path)
	})
	t.Run("native without lib or bin", func(t *testing.T) {
		root := payload(t, map[string]string{
			"py312/":                         "",
			"bin/":                           "",
			"native/rocm7-py312/mooncake.py": "",
			"native/rocm7-py312/lib":         "a file, not a dir",
		})
		s, err := open(t, root).Select(rocm7py312())
		require.NoError(t, err)
		native := filepath.Join(root, "native", "rocm7-py312")
		require.NotNil(t, s.Native)
		assert.Equal(t, []string{native, filepath.Join(root, "py312")}, s.PythonPath)
		assert.Empty(t, s.LibraryPath)
		assert.Equal(t, []string{filepath.Join(root, "bin")}, s.Path)
	})
	t.Run("payload without bin", func(t *testing.T) {
		root := payload(t, map[string]string{
			"py312/":                  "",
			"native/rocm7-py312/bin/": "",
		})
		s, err := open(t, root).Select(rocm7py312())
		require.NoError(t, err)
		native := filepath.Join(root, "native", "rocm7-py312")
		assert.Empty(t, s.Bin)
		assert.Equal(t, []string{filepath.Join(native, "bin")}, s.Path)
	})
	t.Run("nothing but the python tree", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": ""})
		s, err := open(t, root).Select(noROCmPy312())
		require.NoError(t, err)
		assert.Empty(t, s.Bin)
		assert.Empty(t, s.Path)
		assert.Empty(t, s.LibraryPath)
		assert.Equal(t, []string{filepath.Join(root, "py312")}, s.PythonPath)
	})
}

func TestSelectCapabilities(t *testing.T) {
	t.Run("present", func(t *testing.T) {
		root := payload(t, map[string]string{
			"py312/":                          "",
			"native/rocm7-py312/CAPABILITIES": "mooncake\n",
		})
		s, err := open(t, root).Select(rocm7py312())
		require.NoError(t, err)
		require.NotNil(t, s.Native)
		assert.Equal(t, []string{"mooncake"}, s.Native.Declared)
		assert.Equal(t, filepath.Join(root, "native", "rocm7-py312", "CAPABILITIES"), s.Native.CapFile)
		assert.Empty(t, s.Warnings)
	})
	t.Run("absent", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": "", "native/rocm7-py312/": ""})
		s, err := open(t, root).Select(rocm7py312())
		require.NoError(t, err)
		require.NotNil(t, s.Native)
		assert.Empty(t, s.Native.Declared)
		assert.Equal(t, "", s.Native.CapFile)
		assert.Empty(t, s.Warnings)
	})
	t.Run("CRLF and several lines", func(t *testing.T) {
		root := payload(t, map[string]string{
			"py312/":                          "",
			"native/rocm7-py312/CAPABILITIES": "mooncake\r\nhipfile\r\n",
		})
		s, err := open(t, root).Select(rocm7py312())
		require.NoError(t, err)
		require.NotNil(t, s.Native)
		capFile := filepath.Join(root, "native", "rocm7-py312", "CAPABILITIES")
		assert.Equal(t, []string{"hipfile", "mooncake"}, s.Native.Declared)
		assert.Contains(t, s.Warnings, capFile+" has CRLF line endings")
		assert.Contains(t, s.Warnings, capFile+" spans 2 lines (expected one line)")
		assert.Len(t, s.Warnings, 2)
	})
}

// As root, access(2) grants read and search on a mode-000 directory
// (CAP_DAC_OVERRIDE), so the check can only be seen failing as another user.
func TestSelectUnreadableTree(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root can read a mode-000 directory; this case needs a non-root user")
	}
	t.Run("python tree", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": ""})
		p := open(t, root)
		tree := filepath.Join(root, "py312")
		require.NoError(t, os.Chmod(tree, 0))
		t.Cleanup(func() { _ = os.Chmod(tree, 0o755) })

		s, err := p.Select(rocm7py312())
		require.Error(t, err)
		assert.Nil(t, s)
		var pe *overlay.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, tree, pe.Path)
		assert.Contains(t, err.Error(), "not readable by uid")
		assert.Contains(t, err.Error(), "mode ----------")
		assert.Contains(t, err.Error(), "chmod -R a+rX")
	})
	t.Run("native lib", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": "", "native/rocm7-py312/lib/": ""})
		p := open(t, root)
		lib := filepath.Join(root, "native", "rocm7-py312", "lib")
		require.NoError(t, os.Chmod(lib, 0))
		t.Cleanup(func() { _ = os.Chmod(lib, 0o755) })

		_, err := p.Select(rocm7py312())
		var pe *overlay.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, lib, pe.Path)
		assert.Contains(t, err.Error(), "not readable by uid")
	})
	t.Run("native dir cannot be listed", func(t *testing.T) {
		root := payload(t, map[string]string{"py312/": "", "native/rocm7-py312/": ""})
		native := filepath.Join(root, "native")
		require.NoError(t, os.Chmod(native, 0))
		t.Cleanup(func() { _ = os.Chmod(native, 0o755) })

		_, err := overlay.Open(root)
		var pe *overlay.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, native, pe.Path)
		assert.Contains(t, err.Error(), "cannot list it: permission denied")
	})
}
