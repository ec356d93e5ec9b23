package linkchain_test

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/linkchain"
)

// tempDir is t.TempDir with its symlinks resolved, so expected chains can
// be compared with what Follow builds from real directories.
func tempDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return d
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("x"), 0o644))
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	require.NoError(t, os.Symlink(target, link))
}

func TestFollowPlainFile(t *testing.T) {
	d := tempDir(t)
	f := filepath.Join(d, "file")
	writeFile(t, f)

	chain, err := linkchain.Follow(f)
	require.NoError(t, err)
	assert.Equal(t, []string{f}, chain)
}

func TestFollowPlainDirectory(t *testing.T) {
	d := tempDir(t)
	chain, err := linkchain.Follow(d)
	require.NoError(t, err)
	assert.Equal(t, []string{d}, chain)
}

func TestFollowMissingStart(t *testing.T) {
	d := tempDir(t)
	p := filepath.Join(d, "nothing")
	chain, err := linkchain.Follow(p)
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.NotErrorIs(t, err, linkchain.ErrDangling, "a missing start is not a dangling link")
	assert.Equal(t, []string{p}, chain)
}

func TestFollowRelativeHops(t *testing.T) {
	d := tempDir(t)
	real := filepath.Join(d, "libx.so.1.2.3")
	writeFile(t, real)
	symlink(t, "libx.so.1.2.3", filepath.Join(d, "libx.so.1"))
	symlink(t, "libx.so.1", filepath.Join(d, "libx.so"))

	chain, err := linkchain.Follow(filepath.Join(d, "libx.so"))
	require.NoError(t, err)
	assert.Equal(t, []string{
		filepath.Join(d, "libx.so"),
		filepath.Join(d, "libx.so.1"),
		real,
	}, chain)
}

func TestFollowRelativeHopIntoOtherDirectory(t *testing.T) {
	d := tempDir(t)
	real := filepath.Join(d, "versions", "3.12", "bin", "python3.12")
	writeFile(t, real)
	symlink(t, "../versions/3.12/bin/python3.12", filepath.Join(d, "bin", "python3"))

	chain, err := linkchain.Follow(filepath.Join(d, "bin", "python3"))
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(d, "bin", "python3"), real}, chain)
}

func TestFollowAbsoluteHops(t *testing.T) {
	d := tempDir(t)
	real := filepath.Join(d, "a", "real")
	writeFile(t, real)
	mid := filepath.Join(d, "b", "mid")
	symlink(t, real, mid)
	start := filepath.Join(d, "c", "start")
	symlink(t, mid, start)

	chain, err := linkchain.Follow(start)
	require.NoError(t, err)
	assert.Equal(t, []string{start, mid, real}, chain)
}

func TestFollowMixedHops(t *testing.T) {
	d := tempDir(t)
	real := filepath.Join(d, "lib", "real.so")
	writeFile(t, real)
	symlink(t, real, filepath.Join(d, "lib", "abs.so"))  // absolute
	symlink(t, "lib/abs.so", filepath.Join(d, "rel.so")) // relative
	chain, err := linkchain.Follow(filepath.Join(d, "rel.so"))
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(d, "rel.so"), filepath.Join(d, "lib", "abs.so"), real}, chain)
}

// A relative target is resolved against the real directory of the link,
// as the kernel does: "../target" seen through a symlinked directory goes
// up from the directory the link really lives in.
func TestFollowRelativeHopThroughSymlinkedDirectory(t *testing.T) {
	d := tempDir(t)
	realDir := filepath.Join(d, "opt", "rocm-7.1.0", "lib")
	target := filepath.Join(d, "opt", "rocm-7.1.0", "real.so")
	writeFile(t, target)
	symlink(t, "../real.so", filepath.Join(realDir, "libx.so"))
	// d/rocm -> d/opt/rocm-7.1.0/lib ; the lexical answer d/real.so is wrong.
	symlink(t, realDir, filepath.Join(d, "rocm"))
	decoy := filepath.Join(d, "real.so")

	chain, err := linkchain.Follow(filepath.Join(d, "rocm", "libx.so"))
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(d, "rocm", "libx.so"), target}, chain)
	assert.NotContains(t, chain, decoy)

	// And the answer matches what the kernel opens.
	viaKernel, err := filepath.EvalSymlinks(filepath.Join(d, "rocm", "libx.so"))
	require.NoError(t, err)
	assert.Equal(t, viaKernel, chain[len(chain)-1])
}

func TestFollowLoop(t *testing.T) {
	d := tempDir(t)
	a := filepath.Join(d, "a")
	b := filepath.Join(d, "b")
	symlink(t, "b", a)
	symlink(t, "a", b)

	chain, err := linkchain.Follow(a)
	require.Error(t, err)
	assert.ErrorIs(t, err, linkchain.ErrLoop)
	assert.Contains(t, err.Error(), "loop")
	assert.Contains(t, err.Error(), a)
	assert.Equal(t, []string{a, b, a}, chain)

	var le *linkchain.Error
	require.ErrorAs(t, err, &le)
	assert.Equal(t, chain, le.Chain)
}

func TestFollowSelfLoop(t *testing.T) {
	d := tempDir(t)
	a := filepath.Join(d, "self")
	symlink(t, "self", a)
	chain, err := linkchain.Follow(a)
	require.ErrorIs(t, err, linkchain.ErrLoop)
	assert.Equal(t, []string{a, a}, chain)
}

// A loop entered through a path Follow cannot compare literally (the start
// goes through a symlinked directory) still ends, at the hop limit.
func TestFollowLoopThroughSymlinkedDirectory(t *testing.T) {
	d := tempDir(t)
	realDir := filepath.Join(d, "real")
	symlink(t, "b", filepath.Join(realDir, "a"))
	symlink(t, "a", filepath.Join(realDir, "b"))
	symlink(t, realDir, filepath.Join(d, "alias"))

	_, err := linkchain.Follow(filepath.Join(d, "alias", "a"))
	require.Error(t, err)
	assert.ErrorIs(t, err, linkchain.ErrLoop)
}

// chainOf builds n0 (a file) and n1 -> n0 ... nN -> nN-1 in d.
func chainOf(t *testing.T, d string, n int) string {
	t.Helper()
	writeFile(t, filepath.Join(d, "n0"))
	for i := 1; i <= n; i++ {
		symlink(t, "n"+strconv.Itoa(i-1), filepath.Join(d, "n"+strconv.Itoa(i)))
	}
	return filepath.Join(d, "n"+strconv.Itoa(n))
}

func TestFollowLongChainWithoutLoop(t *testing.T) {
	d := tempDir(t)
	chain, err := linkchain.Follow(chainOf(t, d, 10))
	require.NoError(t, err)
	require.Len(t, chain, 11)
	assert.Equal(t, filepath.Join(d, "n10"), chain[0])
	assert.Equal(t, filepath.Join(d, "n0"), chain[10])
}

// The hop limit is the kernel's: a chain the kernel can open (40 links)
// is followed; one it refuses with ELOOP (41 links) is a loop.
func TestFollowHopLimitMatchesKernel(t *testing.T) {
	d := tempDir(t)
	start40 := chainOf(t, filepath.Join(d, "forty"), 40)
	_, kerr := os.Stat(start40)
	require.NoError(t, kerr, "the kernel follows 40 links")
	chain, err := linkchain.Follow(start40)
	require.NoError(t, err)
	assert.Len(t, chain, 41)

	start41 := chainOf(t, filepath.Join(d, "fortyone"), 41)
	_, kerr = os.Stat(start41)
	require.ErrorIs(t, kerr, syscall.ELOOP, "the kernel refuses 41 links")
	_, err = linkchain.Follow(start41)
	require.ErrorIs(t, err, linkchain.ErrLoop)
	assert.Contains(t, err.Error(), "more than 40 links")
}

func TestFollowDangling(t *testing.T) {
	d := tempDir(t)
	mid := filepath.Join(d, "libx.so.1")
	symlink(t, "libx.so.1.0.0", mid)
	start := filepath.Join(d, "libx.so")
	symlink(t, "libx.so.1", start)
	missing := filepath.Join(d, "libx.so.1.0.0")

	chain, err := linkchain.Follow(start)
	require.Error(t, err)
	assert.ErrorIs(t, err, linkchain.ErrDangling)
	assert.Contains(t, err.Error(), "dangling")
	assert.Contains(t, err.Error(), missing)
	assert.Contains(t, err.Error(), start)
	assert.Equal(t, []string{start, mid, missing}, chain)
}

func TestFollowDanglingAbsolute(t *testing.T) {
	d := tempDir(t)
	missing := filepath.Join(d, "gone", "python3.12")
	start := filepath.Join(d, "python3")
	symlink(t, missing, start)

	chain, err := linkchain.Follow(start)
	require.ErrorIs(t, err, linkchain.ErrDangling)
	assert.Contains(t, err.Error(), missing)
	assert.Equal(t, []string{start, missing}, chain)
}
