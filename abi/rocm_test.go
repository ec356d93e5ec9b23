package abi_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
)

// rocmRoot is a fresh directory (symlinks resolved, so chains compare
// literally) to lay a ROCm installation out in.
func rocmRoot(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return d
}

func rocmSymlink(t *testing.T, target, link string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	require.NoError(t, os.Symlink(target, link))
}

func TestDetectROCm7Chain(t *testing.T) {
	root := rocmRoot(t)
	require.NoError(t, fixture.ROCm(root, 7, "7.1.70100"))
	lib := filepath.Join(root, "lib")

	r, err := abi.DetectROCm([]string{root})
	require.NoError(t, err)
	assert.True(t, r.Found)
	assert.Equal(t, 7, r.Major)
	assert.Equal(t, "libamdhip64.so.7", r.Soname)
	assert.Equal(t, filepath.Join(lib, "libamdhip64.so"), r.Library)
	assert.Equal(t, []string{
		filepath.Join(lib, "libamdhip64.so"),
		filepath.Join(lib, "libamdhip64.so.7"),
		filepath.Join(lib, "libamdhip64.so.7.1.70100"),
	}, r.Chain)
	assert.Contains(t, r.DecidedBy, "SONAME libamdhip64.so.7")
	assert.Contains(t, r.DecidedBy, filepath.Join(lib, "libamdhip64.so.7.1.70100"))
	assert.Equal(t, []string{lib}, r.Searched)
	assert.Empty(t, r.Notes)
}

func TestDetectROCm6Chain(t *testing.T) {
	root := rocmRoot(t)
	require.NoError(t, fixture.ROCm(root, 6, "6.4.60400"))

	r, err := abi.DetectROCm([]string{root})
	require.NoError(t, err)
	assert.True(t, r.Found)
	assert.Equal(t, 6, r.Major)
	assert.Equal(t, "libamdhip64.so.6", r.Soname)
	assert.Len(t, r.Chain, 3)
	assert.Contains(t, r.DecidedBy, "SONAME libamdhip64.so.6")
}

// The SONAME decides, not the file names: a file named for ROCm 7 whose
// SONAME says 6 is ROCm 6.
func TestDetectROCmSonameBeatsFileName(t *testing.T) {
	root := rocmRoot(t)
	lib := filepath.Join(root, "lib")
	require.NoError(t, fixture.SharedObject(filepath.Join(lib, "libamdhip64.so.7.0.0"), "libamdhip64.so.6"))
	rocmSymlink(t, "libamdhip64.so.7.0.0", filepath.Join(lib, "libamdhip64.so"))

	r, err := abi.DetectROCm([]string{root})
	require.NoError(t, err)
	assert.True(t, r.Found)
	assert.Equal(t, 6, r.Major)
	assert.Equal(t, "libamdhip64.so.6", r.Soname)
}

func TestDetectROCmOnlyVersionedNames(t *testing.T) {
	root := rocmRoot(t)
	require.NoError(t, fixture.ROCm(root, 7, "7.1.70100"))
	lib := filepath.Join(root, "lib")
	require.NoError(t, os.Remove(filepath.Join(lib, "libamdhip64.so")))

	r, err := abi.DetectROCm([]string{root})
	require.NoError(t, err)
	assert.True(t, r.Found)
	assert.Equal(t, 7, r.Major)
	assert.Equal(t, "libamdhip64.so.7", r.Soname)
	// The newest versioned name is where the search starts.
	assert.Equal(t, filepath.Join(lib, "libamdhip64.so.7.1.70100"), r.Library)
	assert.Equal(t, []string{filepath.Join(lib, "libamdhip64.so.7.1.70100")}, r.Chain)
}

func TestDetectROCmOnlyMajorLink(t *testing.T) {
	root := rocmRoot(t)
	lib := filepath.Join(root, "lib")
	require.NoError(t, fixture.SharedObject(filepath.Join(root, "real", "hip.so"), "libamdhip64.so.7"))
	rocmSymlink(t, "../real/hip.so", filepath.Join(lib, "libamdhip64.so.7"))

	r, err := abi.DetectROCm([]string{root})
	require.NoError(t, err)
	assert.True(t, r.Found)
	assert.Equal(t, 7, r.Major)
	assert.Equal(t, []string{filepath.Join(lib, "libamdhip64.so.7"), filepath.Join(root, "real", "hip.so")}, r.Chain)
}

func TestDetectROCmSeveralMajorsNoted(t *testing.T) {
	root := rocmRoot(t)
	require.NoError(t, fixture.ROCm(root, 7, "7.1.70100"))
	lib := filepath.Join(root, "lib")
	require.NoError(t, fixture.SharedObject(filepath.Join(lib, "libamdhip64.so.6.4.60400"), "libamdhip64.so.6"))

	r, err := abi.DetectROCm([]string{root})
	require.NoError(t, err)
	assert.Equal(t, 7, r.Major, "libamdhip64.so leads to 7")
	require.Len(t, r.Notes, 1)
	assert.Contains(t, r.Notes[0], "several libamdhip64 majors")
	assert.Contains(t, r.Notes[0], lib)
}

func TestDetectROCmRootsInOrder(t *testing.T) {
	base := rocmRoot(t)
	empty := filepath.Join(base, "rocm-path") // no lib dir at all
	require.NoError(t, os.MkdirAll(empty, 0o755))
	opt := filepath.Join(base, "opt", "rocm")
	require.NoError(t, fixture.ROCm(opt, 7, "7.1.70100"))

	r, err := abi.DetectROCm([]string{empty, opt})
	require.NoError(t, err)
	assert.True(t, r.Found)
	assert.Equal(t, 7, r.Major)
	assert.Equal(t, []string{filepath.Join(empty, "lib"), filepath.Join(opt, "lib")}, r.Searched)
	assert.Equal(t, filepath.Join(opt, "lib", "libamdhip64.so"), r.Library)
}

func TestDetectROCmFirstRootWins(t *testing.T) {
	base := rocmRoot(t)
	first := filepath.Join(base, "first")
	second := filepath.Join(base, "second")
	require.NoError(t, fixture.ROCm(first, 6, "6.4.60400"))
	require.NoError(t, fixture.ROCm(second, 7, "7.1.70100"))

	r, err := abi.DetectROCm([]string{first, second})
	require.NoError(t, err)
	assert.Equal(t, 6, r.Major)
	assert.Equal(t, []string{filepath.Join(first, "lib")}, r.Searched, "the search stops at the first ROCm found")
}

// An existing lib dir without libamdhip64 does not stop the search.
func TestDetectROCmLibDirWithoutHIP(t *testing.T) {
	base := rocmRoot(t)
	first := filepath.Join(base, "first")
	require.NoError(t, os.MkdirAll(filepath.Join(first, "lib"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(first, "lib", "libhsa-runtime64.so.1"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(first, "lib", "libamdhip64.a"), []byte("x"), 0o644))
	second := filepath.Join(base, "second")
	require.NoError(t, fixture.ROCm(second, 7, "7.1.70100"))

	r, err := abi.DetectROCm([]string{first, second})
	require.NoError(t, err)
	assert.True(t, r.Found)
	assert.Equal(t, 7, r.Major)
	assert.Equal(t, []string{filepath.Join(first, "lib"), filepath.Join(second, "lib")}, r.Searched)
}

func TestDetectROCmRootsSkipEmptyAndDuplicates(t *testing.T) {
	base := rocmRoot(t)
	a := filepath.Join(base, "a")
	r, err := abi.DetectROCm([]string{"", a, a, ""})
	require.NoError(t, err)
	assert.False(t, r.Found)
	assert.Equal(t, []string{filepath.Join(a, "lib")}, r.Searched)
}

func TestDetectROCmNone(t *testing.T) {
	base := rocmRoot(t)
	a := filepath.Join(base, "rocm-a")
	b := filepath.Join(base, "rocm-b")
	require.NoError(t, os.MkdirAll(filepath.Join(b, "lib"), 0o755))

	r, err := abi.DetectROCm([]string{a, b})
	require.NoError(t, err)
	assert.False(t, r.Found)
	assert.Zero(t, r.Major)
	assert.Empty(t, r.Library)
	assert.Empty(t, r.Chain)
	assert.Empty(t, r.DecidedBy)
	assert.Equal(t, []string{filepath.Join(a, "lib"), filepath.Join(b, "lib")}, r.Searched)
}

func TestDetectROCmSymlinkLoop(t *testing.T) {
	root := rocmRoot(t)
	lib := filepath.Join(root, "lib")
	rocmSymlink(t, "a", filepath.Join(lib, "libamdhip64.so"))
	rocmSymlink(t, "libamdhip64.so", filepath.Join(lib, "a"))

	r, err := abi.DetectROCm([]string{root})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "loop")
	assert.Contains(t, err.Error(), filepath.Join(lib, "libamdhip64.so"))
	assert.Contains(t, err.Error(), "INFERA_ABI_FAMILY", "the error says how to get past it")
	assert.False(t, r.Found)
	assert.Equal(t, []string{filepath.Join(lib, "libamdhip64.so"), filepath.Join(lib, "a"), filepath.Join(lib, "libamdhip64.so")}, r.Chain)
}

func TestDetectROCmDangling(t *testing.T) {
	root := rocmRoot(t)
	lib := filepath.Join(root, "lib")
	rocmSymlink(t, "libamdhip64.so.7", filepath.Join(lib, "libamdhip64.so"))
	rocmSymlink(t, "libamdhip64.so.7.1.70100", filepath.Join(lib, "libamdhip64.so.7"))

	r, err := abi.DetectROCm([]string{root})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dangling")
	assert.Contains(t, err.Error(), filepath.Join(lib, "libamdhip64.so.7.1.70100"))
	assert.False(t, r.Found)
	assert.Zero(t, r.Major)
}

// A broken ROCm in the first root is an error, not a reason to look at the
// next one: guessing from elsewhere could pick the wrong native tree.
func TestDetectROCmBrokenFirstRootStops(t *testing.T) {
	base := rocmRoot(t)
	first := filepath.Join(base, "first")
	rocmSymlink(t, "missing.so", filepath.Join(first, "lib", "libamdhip64.so"))
	second := filepath.Join(base, "second")
	require.NoError(t, fixture.ROCm(second, 7, "7.1.70100"))

	r, err := abi.DetectROCm([]string{first, second})
	require.ErrorContains(t, err, "dangling")
	assert.False(t, r.Found)
	assert.Equal(t, []string{filepath.Join(first, "lib")}, r.Searched)
}

func TestDetectROCmNotELF(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
	}{
		{"text", "this is not an ELF file\n"},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := rocmRoot(t)
			lib := filepath.Join(root, "lib")
			require.NoError(t, os.MkdirAll(lib, 0o755))
			final := filepath.Join(lib, "libamdhip64.so.7.0.1")
			require.NoError(t, os.WriteFile(final, []byte(tc.content), 0o644))
			rocmSymlink(t, "libamdhip64.so.7.0.1", filepath.Join(lib, "libamdhip64.so.7"))
			rocmSymlink(t, "libamdhip64.so.7", filepath.Join(lib, "libamdhip64.so"))

			r, err := abi.DetectROCm([]string{root})
			require.NoError(t, err)
			assert.True(t, r.Found)
			assert.Equal(t, 7, r.Major)
			assert.Empty(t, r.Soname)
			assert.Contains(t, r.DecidedBy, "file name")
			assert.Contains(t, r.DecidedBy, "libamdhip64.so.7")
			require.Len(t, r.Notes, 1)
			assert.Contains(t, r.Notes[0], final)
			assert.Contains(t, r.Notes[0], "not a readable ELF file")
			assert.Contains(t, r.Notes[0], "file names of the symlink chain")
		})
	}
}

// Not an ELF file and no versioned name anywhere in the chain: nothing
// says which major it is.
func TestDetectROCmNotELFNoVersionedName(t *testing.T) {
	root := rocmRoot(t)
	lib := filepath.Join(root, "lib")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "real"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "real", "hip"), []byte("text"), 0o644))
	rocmSymlink(t, "../real/hip", filepath.Join(lib, "libamdhip64.so"))

	r, err := abi.DetectROCm([]string{root})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no SONAME")
	assert.Contains(t, err.Error(), filepath.Join(root, "real", "hip"))
	assert.False(t, r.Found)
}

func TestDetectROCmELFWithoutSoname(t *testing.T) {
	root := rocmRoot(t)
	lib := filepath.Join(root, "lib")
	require.NoError(t, fixture.SharedObject(filepath.Join(lib, "libamdhip64.so.7.1.70100"), ""))
	rocmSymlink(t, "libamdhip64.so.7.1.70100", filepath.Join(lib, "libamdhip64.so"))

	r, err := abi.DetectROCm([]string{root})
	require.NoError(t, err)
	assert.True(t, r.Found)
	assert.Equal(t, 7, r.Major)
	assert.Equal(t, "file name "+filepath.Join(lib, "libamdhip64.so.7.1.70100"), r.DecidedBy)
	require.Len(t, r.Notes, 1)
	assert.Contains(t, r.Notes[0], "no DT_SONAME")
}

func TestDetectROCmForeignSoname(t *testing.T) {
	for _, soname := range []string{"libfoo.so.1", "libamdhip64.so", "libamdhip64.so.x"} {
		t.Run(soname, func(t *testing.T) {
			root := rocmRoot(t)
			lib := filepath.Join(root, "lib")
			require.NoError(t, fixture.SharedObject(filepath.Join(lib, "libamdhip64.so.7.1.70100"), soname))
			rocmSymlink(t, "libamdhip64.so.7.1.70100", filepath.Join(lib, "libamdhip64.so.7"))
			rocmSymlink(t, "libamdhip64.so.7", filepath.Join(lib, "libamdhip64.so"))

			r, err := abi.DetectROCm([]string{root})
			require.Error(t, err)
			assert.Contains(t, err.Error(), `SONAME "`+soname+`"`)
			assert.Contains(t, err.Error(), "not libamdhip64.so.N")
			assert.False(t, r.Found)
		})
	}
}

func TestDetectROCmChainEndsAtDirectory(t *testing.T) {
	root := rocmRoot(t)
	lib := filepath.Join(root, "lib")
	require.NoError(t, os.MkdirAll(filepath.Join(lib, "libamdhip64.so.7"), 0o755))
	rocmSymlink(t, "libamdhip64.so.7", filepath.Join(lib, "libamdhip64.so"))

	r, err := abi.DetectROCm([]string{root})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a regular file")
	assert.Contains(t, err.Error(), filepath.Join(lib, "libamdhip64.so.7"))
	assert.False(t, r.Found)
}

func TestDetectROCmLibIsAFile(t *testing.T) {
	root := rocmRoot(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "lib"), []byte("x"), 0o644))

	_, err := abi.DetectROCm([]string{root})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "read ROCm library directory "+filepath.Join(root, "lib"))
}

func TestDetectROCmLibDirUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads a mode-000 directory anyway (CAP_DAC_OVERRIDE); this case needs a non-root user")
	}
	root := rocmRoot(t)
	require.NoError(t, fixture.ROCm(root, 7, "7.1.70100"))
	lib := filepath.Join(root, "lib")
	require.NoError(t, os.Chmod(lib, 0))
	t.Cleanup(func() { _ = os.Chmod(lib, 0o755) })

	r, err := abi.DetectROCm([]string{root})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "read ROCm library directory "+lib)
	assert.ErrorIs(t, err, os.ErrPermission)
	assert.False(t, r.Found)
}

// A FIFO (or any non-directory) at <rocm>/lib is refused at once: opening
// it must not wait for a writer that never comes.
func TestDetectROCmLibIsAFIFO(t *testing.T) {
	root := rocmRoot(t)
	lib := filepath.Join(root, "lib")
	require.NoError(t, syscall.Mkfifo(lib, 0o644))

	done := make(chan error, 1)
	go func() {
		_, err := abi.DetectROCm([]string{root})
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "read ROCm library directory "+lib)
		assert.ErrorIs(t, err, syscall.ENOTDIR)
	case <-time.After(5 * time.Second):
		// Unblock the open so the goroutine ends with the test binary.
		if f, err := os.OpenFile(lib, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("DetectROCm blocked opening a FIFO at the ROCm lib path")
	}
}
