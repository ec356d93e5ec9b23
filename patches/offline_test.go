package patches

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An unpacked image root: vLLM installed in Debian's dist-packages of
// /usr/local, SGLang as an editable checkout recorded in a .pth file, a
// legacy develop install (its easy-install.pth line; the .egg-link beside
// it is read by no interpreter), and a PEP 660 finder installed by its
// .pth file.
func TestLocateOfflineImageRoot(t *testing.T) {
	root := t.TempDir()
	dp := filepath.Join(root, "usr/local/lib/python3.12/dist-packages")
	write(t, filepath.Join(dp, "vllm/__init__.py"), "")
	write(t, filepath.Join(dp, "vllm-0.11.1+rocm700.dist-info/METADATA"), "Name: vllm\nVersion: 0.11.1+rocm700\n")
	sp := filepath.Join(root, "opt/venv/lib/python3.10/site-packages")
	write(t, filepath.Join(sp, "__editable__.sglang-0.5.5.pth"), "/sgl-workspace/sglang/python\n")
	write(t, filepath.Join(root, "sgl-workspace/sglang/python/sglang/__init__.py"), "")
	write(t, filepath.Join(sp, "mooncake.egg-link"), "/src/mooncake\n.\n")
	write(t, filepath.Join(sp, "easy-install.pth"), "/src/mooncake\n")
	write(t, filepath.Join(root, "src/mooncake/mooncake/__init__.py"), "")
	write(t, filepath.Join(sp, "__editable__.kvd-1.0.pth"), "import __editable___kvd_1_0_finder; __editable___kvd_1_0_finder.install()\n")
	write(t, filepath.Join(sp, "__editable___kvd_1_0_finder.py"), finderModule("{'kvd': '/src/kvd/python/kvd'}"))
	write(t, filepath.Join(root, "src/kvd/python/kvd/__init__.py"), "")

	loc, err := LocateOffline(root, []string{"vllm", "sglang", "mooncake", "kvd", "absent"})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dp, "vllm"), loc.Packages["vllm"].Dir)
	assert.Equal(t, filepath.Join(root, "sgl-workspace/sglang/python/sglang"), loc.Packages["sglang"].Dir)
	assert.Equal(t, filepath.Join(root, "src/mooncake/mooncake"), loc.Packages["mooncake"].Dir)
	assert.Equal(t, filepath.Join(root, "src/kvd/python/kvd"), loc.Packages["kvd"].Dir)
	assert.False(t, loc.Packages["absent"].Found)
	assert.Contains(t, loc.Packages["absent"].Why, "absent not found in ")
	assert.Contains(t, loc.Packages["absent"].Why, dp)
	v, _ := distVersion("vllm", []string{dp})
	assert.Equal(t, "0.11.1+rocm700", v)
}

// Debian's python3.11 searches /usr/local/lib/python3.11/dist-packages,
// /usr/lib/python3/dist-packages, then /usr/lib/python3.11/dist-packages;
// name order (python3.11 before python3, /usr/lib before /usr/local)
// patched a copy that never runs. A directory without __init__ (what
// Debian's python3-numpy leaves in python3.11/dist-packages) is no
// package while a regular one is on the path.
func TestLocateOfflineFollowsDebiansOrder(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "usr/lib/python3.11/site.py"), `sitepackages.append(os.path.join(prefix, "lib", "python3", "dist-packages"))`)
	for _, d := range []string{"usr/lib/python3.11/dist-packages", "usr/lib/python3/dist-packages", "usr/local/lib/python3.11/dist-packages"} {
		write(t, filepath.Join(root, d, "vllm/__init__.py"), "")
	}
	write(t, filepath.Join(root, "usr/lib/python3.11/dist-packages/numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so"), "")
	write(t, filepath.Join(root, "usr/lib/python3/dist-packages/numpy/__init__.py"), "")
	write(t, filepath.Join(root, "usr/lib/python3/dist-packages/numpy/core/__init__.py"), "")

	loc, err := LocateOffline(root, []string{"vllm", "numpy"})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "usr/local/lib/python3.11/dist-packages/vllm"), loc.Packages["vllm"].Dir)
	assert.Contains(t, loc.Packages["vllm"].Why, "also present, not imported: "+filepath.Join(root, "usr/lib/python3/dist-packages/vllm"))
	assert.Equal(t, filepath.Join(root, "usr/lib/python3/dist-packages/numpy"), loc.Packages["numpy"].Dir)
	assert.Equal(t, []string{filepath.Join(root, "usr/lib/python3/dist-packages/numpy")}, loc.Packages["numpy"].Dirs)
}

func TestLocateOfflineErrors(t *testing.T) {
	_, err := LocateOffline(filepath.Join(t.TempDir(), "missing"), []string{"vllm"})
	require.Error(t, err)
	loc, err := LocateOffline(t.TempDir(), []string{"vllm"})
	require.NoError(t, err)
	assert.Contains(t, loc.Packages["vllm"].Why, "no Python installation (bin/python3.X, lib/python3.X) under")
}

// finderModule is a setuptools editable finder module (the parts the
// resolver reads) with mapping as its MAPPING literal.
func finderModule(mapping string) string {
	return "import sys\nMAPPING: dict[str, str] = " + mapping + "\nNAMESPACES: dict[str, list[str]] = {}\n" +
		"class _EditableFinder:\n    pass\n" +
		"def install():\n    if not any(finder == _EditableFinder for finder in sys.meta_path):\n        sys.meta_path.append(_EditableFinder)\n"
}

// A FIFO planted as a .pth file in an image root is skipped, not waited
// on, and named in a note.
func TestLocateOfflineIgnoresAFIFO(t *testing.T) {
	site := t.TempDir()
	write(t, filepath.Join(site, "vllm/__init__.py"), "")
	require.NoError(t, syscall.Mkfifo(filepath.Join(site, "x.pth"), 0o644))
	done := make(chan *Location)
	go func() {
		loc, err := LocateOffline(site, []string{"vllm"})
		assert.NoError(t, err)
		done <- loc
	}()
	select {
	case loc := <-done:
		require.NotNil(t, loc)
		assert.Equal(t, filepath.Join(site, "vllm"), loc.Packages["vllm"].Dir)
		require.Len(t, loc.Notes, 1)
		assert.Contains(t, loc.Notes[0], filepath.Join(site, "x.pth"))
	case <-time.After(10 * time.Second):
		t.Fatal("LocateOffline blocked on a FIFO .pth file")
	}
}
