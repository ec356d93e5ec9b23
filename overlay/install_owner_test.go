package overlay

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nobody is the other uid of the hostile tests: what another container of
// the pod, running as a user, owns in a shared emptyDir.
const nobody = 65534

// needRoot skips a test that must create files of another uid.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files owned by another uid (os.Lchown); run the tests as root, as CI does")
	}
}

// emptyDir is an install destination as Kubernetes makes it: a directory
// of mode 0777, not sticky.
func emptyDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "overlay")
	require.NoError(t, os.Mkdir(d, 0o755))
	require.NoError(t, os.Chmod(d, 0o777))
	return d
}

func ownerOf(t *testing.T, p string) uint32 {
	t.Helper()
	fi, err := os.Lstat(p)
	require.NoError(t, err)
	return fi.Sys().(*syscall.Stat_t).Uid
}

// noOtherWritableDir checks that nobody but the installer can change
// anything under dest: every directory (dest too) is owned by the
// installer and writable neither by group nor by others, and every entry
// is the installer's.
func noOtherWritableDir(t *testing.T, dest string) {
	t.Helper()
	euid := uint32(os.Geteuid())
	require.NoError(t, filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		assert.Equal(t, euid, fi.Sys().(*syscall.Stat_t).Uid, "%s is owned by the installer", p)
		if fi.IsDir() {
			assert.Zero(t, fi.Mode().Perm()&0o022, "%s (mode %04o) is not writable by group or others", p, fi.Mode().Perm())
		}
		return nil
	}))
}

// (a) A link planted at the install marker by another uid in a 0777
// destination: the install writes no byte through it.
func TestInstallDoesNotWriteThroughAPlantedMarkerLink(t *testing.T) {
	needRoot(t)
	src := payloadDir(t)
	dest := emptyDir(t)
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("root's file\n"), 0o644))
	for _, name := range []string{installingName, installedName, IndexName} {
		// Planted as if before this install (DEST is 0777 again).
		link := filepath.Join(dest, name)
		require.NoError(t, os.Chmod(dest, 0o777))
		os.Remove(link)
		require.NoError(t, os.Symlink(victim, link))
		require.NoError(t, os.Lchown(link, nobody, nobody))
		_, err := Install(src, dest)
		require.NoError(t, err, "a link at %s", name)
		got, err := os.ReadFile(victim)
		require.NoError(t, err)
		assert.Equal(t, "root's file\n", string(got), "the target of the link planted at %s is unchanged", name)
		fi, err := os.Lstat(link)
		if err == nil {
			assert.True(t, fi.Mode().IsRegular(), "%s is the installer's own file now", name)
		}
		sameTree(t, src, dest)
	}
}

// (b) A file of another uid that is byte-identical to the payload's is
// not kept: that uid could rewrite it after the install. Nor is a
// directory of another uid on a payload path, nor what it holds.
func TestInstallReplacesWhatAnotherUidOwns(t *testing.T) {
	needRoot(t)
	src := payloadDir(t)
	dest := emptyDir(t)
	_, err := Install(src, dest)
	require.NoError(t, err)

	bin := filepath.Join(dest, "bin/infera-exec")
	require.NoError(t, os.Lchown(bin, nobody, nobody))
	link := filepath.Join(dest, "native/rocm7-py312/lib/libdemo.so.1")
	require.NoError(t, os.Lchown(link, nobody, nobody))
	// A directory of the payload, taken over (as a uid that could write
	// its parent would do it): its own, writable by all, with a module
	// the payload does not have.
	pkg := filepath.Join(dest, "native/rocm7-py312")
	require.NoError(t, os.Rename(pkg, pkg+".old"))
	require.NoError(t, os.Mkdir(pkg, 0o777))
	require.NoError(t, os.Chmod(pkg, 0o777))
	require.NoError(t, os.Lchown(pkg, nobody, nobody))
	require.NoError(t, os.Rename(pkg+".old/lib", pkg+"/lib"))
	require.NoError(t, os.Remove(pkg+".old"))
	put(t, filepath.Join(pkg, "evil.py"), "import os\n", 0o666)
	require.NoError(t, os.Lchown(filepath.Join(pkg, "evil.py"), nobody, nobody))

	r, err := Install(src, dest)
	require.NoError(t, err)
	assert.Contains(t, r.Copied, "bin/infera-exec", "a file of uid %d is not 'already identical'", nobody)
	assert.Contains(t, r.Copied, "native/rocm7-py312/lib/libdemo.so.1")
	assert.EqualValues(t, os.Geteuid(), ownerOf(t, bin))
	assert.EqualValues(t, os.Geteuid(), ownerOf(t, link))
	assert.EqualValues(t, os.Geteuid(), ownerOf(t, pkg))
	assert.NoFileExists(t, filepath.Join(pkg, "evil.py"))
	assert.NotEmpty(t, r.Notes, "the install says what it removed")
	sameTree(t, src, dest)
	noOtherWritableDir(t, dest)
}

// (c) An emptyDir is 0777: left so, another uid could rename bin/ away
// and put its own infera-exec in its place. After an install nothing
// under DEST can be changed by another uid, and the install says it
// changed the modes.
func TestInstallLeavesNoDirectoryWritableByOthers(t *testing.T) {
	needRoot(t)
	src := payloadDir(t)
	dest := emptyDir(t)
	// What the operator put there before (owned by the installer) stays,
	// but not writable by others either.
	require.NoError(t, os.Mkdir(filepath.Join(dest, "notes"), 0o777))
	require.NoError(t, os.Chmod(filepath.Join(dest, "notes"), 0o777))
	r, err := Install(src, dest)
	require.NoError(t, err)
	noOtherWritableDir(t, dest)
	assert.DirExists(t, filepath.Join(dest, "notes"))
	require.NoError(t, os.Remove(filepath.Join(dest, "notes")))
	joined := strings.Join(r.Notes, "\n")
	assert.Contains(t, joined, dest+" ")
	assert.Contains(t, joined, "0777")
	assert.Contains(t, joined, "0755")

	// A payload that ships a directory writable by others is installed
	// without that write bit, said once.
	require.NoError(t, os.Chmod(filepath.Join(src, "py312/pkg"), 0o777))
	_, err = WriteIndex(src)
	require.NoError(t, err)
	r, err = Install(src, dest)
	require.NoError(t, err)
	noOtherWritableDir(t, dest)
	assert.Contains(t, strings.Join(r.Notes, "\n"), "py312/pkg")
	r, err = Install(src, dest)
	require.NoError(t, err)
	assert.Equal(t, 4, r.Unchanged, "a re-run is a no-op: %v", r.Copied)
	assert.Empty(t, r.Notes, "and says nothing")
	require.NoError(t, os.Chmod(filepath.Join(src, "py312/pkg"), 0o755))
	_, err = WriteIndex(src)
	require.NoError(t, err)

	// Another uid's files and directories planted anywhere in DEST are
	// gone, and a link planted at a directory of the payload is not
	// followed.
	other := t.TempDir()
	put(t, filepath.Join(other, "keep"), "keep", 0o644)
	require.NoError(t, os.Chmod(dest, 0o777))
	require.NoError(t, os.RemoveAll(filepath.Join(dest, "bin")))
	require.NoError(t, os.Symlink(other, filepath.Join(dest, "bin")))
	require.NoError(t, os.Lchown(filepath.Join(dest, "bin"), nobody, nobody))
	require.NoError(t, os.MkdirAll(filepath.Join(dest, "py311/x"), 0o777))
	for _, p := range []string{"py311", "py311/x"} {
		require.NoError(t, os.Chmod(filepath.Join(dest, p), 0o777))
		require.NoError(t, os.Lchown(filepath.Join(dest, p), nobody, nobody))
	}
	_, err = Install(src, dest)
	require.NoError(t, err)
	assert.NoDirExists(t, filepath.Join(dest, "py311"))
	assert.NoFileExists(t, filepath.Join(other, "infera-exec"), "nothing written through the link")
	assert.FileExists(t, filepath.Join(other, "keep"))
	sameTree(t, src, dest)
	noOtherWritableDir(t, dest)
}

// Item 11: a link to a directory in the old install that is a real
// directory in the new payload (py39 -> py310 becoming its own py39/ with
// the same files) is compared without following the old link: the new
// files are installed in a real py39/.
func TestInstallLinkThatBecameADirectory(t *testing.T) {
	for name, link := range map[string]string{
		"top level": "py39",
		"deeper":    "native/rocm7-py310/lib",
	} {
		t.Run(name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "dest")
			target := filepath.Join(filepath.Dir(link), "real")
			mk := func(withLink bool) string {
				src := filepath.Join(t.TempDir(), "payload")
				for _, dir := range []string{target, link} {
					if dir == link && withLink {
						continue
					}
					put(t, filepath.Join(src, dir, "a.py"), "a = 1\n", 0o644)
					put(t, filepath.Join(src, dir, "sub/b.py"), "b = 2\n", 0o644)
				}
				if withLink {
					require.NoError(t, os.Symlink("real", filepath.Join(src, link)))
				}
				_, err := WriteIndex(src)
				require.NoError(t, err)
				return src
			}
			old, now := mk(true), mk(false)
			_, err := Install(old, dest)
			require.NoError(t, err)
			r, err := Install(now, dest)
			require.NoError(t, err)
			fi, err := os.Lstat(filepath.Join(dest, link))
			require.NoError(t, err)
			assert.True(t, fi.IsDir(), "%s is a real directory now", link)
			assert.Contains(t, r.Copied, link+"/a.py")
			assert.Contains(t, r.Copied, link+"/sub/b.py")
			sameTree(t, now, dest)

			// And back: the directory becomes the link again.
			_, err = Install(old, dest)
			require.NoError(t, err)
			sameTree(t, old, dest)
		})
	}
}
