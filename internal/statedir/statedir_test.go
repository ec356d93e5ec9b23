package statedir

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestDirCreatesAndAccepts(t *testing.T) {
	base := t.TempDir()
	d := filepath.Join(base, "a/b/infera-exec")
	require.NoError(t, Dir(d))
	fi, err := os.Lstat(d)
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.Zero(t, fi.Mode().Perm()&0o022)
	require.NoError(t, Dir(d), "an existing directory of ours is accepted again")
}

// A directory planted by another user in a shared /tmp, a link, or a
// directory others can write, must never receive a root write or reach
// the loader.
func TestDirRefusesWhatItDoesNotOwn(t *testing.T) {
	base := t.TempDir()
	require.NoError(t, os.Chmod(base, os.ModeSticky|0o777)) // as /tmp

	link := filepath.Join(base, "link")
	target := filepath.Join(base, "target")
	require.NoError(t, os.Mkdir(target, 0o755))
	require.NoError(t, os.Symlink(target, link))
	err := Dir(link)
	assert.ErrorContains(t, err, "symbolic link")

	dangling := filepath.Join(base, "dangling")
	require.NoError(t, os.Symlink(filepath.Join(base, "nowhere"), dangling))
	assert.ErrorContains(t, Dir(dangling), "symbolic link")
	_, statErr := os.Lstat(filepath.Join(base, "nowhere"))
	assert.True(t, os.IsNotExist(statErr), "a dangling link is not followed to create its target")

	writable := filepath.Join(base, "writable")
	require.NoError(t, os.Mkdir(writable, 0o755))
	require.NoError(t, os.Chmod(writable, 0o777))
	assert.ErrorContains(t, Dir(writable), "mode 0777")

	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	assert.ErrorContains(t, Dir(file), "not a directory")

	if unix.Geteuid() != 0 {
		t.Skip("the foreign-owner case needs root (chown to another uid)")
	}
	foreign := filepath.Join(base, "foreign")
	require.NoError(t, os.Mkdir(foreign, 0o755))
	require.NoError(t, os.Chown(foreign, 4242, 4242))
	err = Dir(foreign)
	assert.ErrorContains(t, err, foreign)
	assert.ErrorContains(t, err, "owned by uid 4242")

	open := t.TempDir()
	require.NoError(t, os.Chmod(open, 0o777))
	assert.ErrorContains(t, Dir(filepath.Join(open, "x")), "not sticky")

	// A parent someone else owns: they could rename our directory away
	// and put theirs in its place, whatever its mode.
	theirs := filepath.Join(base, "theirs")
	require.NoError(t, os.Mkdir(theirs, 0o755))
	require.NoError(t, os.Chown(theirs, 4242, 4242))
	err = Dir(filepath.Join(theirs, "rdma"))
	assert.ErrorContains(t, err, "owned by uid 4242")
	assert.NoDirExists(t, filepath.Join(theirs, "rdma"))
}

func TestPickSkipsRefusedCandidates(t *testing.T) {
	base := t.TempDir()
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(t.TempDir(), link))
	d, _, whys := Pick(link)
	assert.Empty(t, d)
	require.Len(t, whys, 1)
	assert.ErrorContains(t, whys[0], link)
	assert.True(t, Unsafe(whys[0]))

	good := filepath.Join(base, "state")
	d, _, whys = Pick(good)
	assert.Equal(t, good, d)
	assert.Empty(t, whys)
}

// A link anywhere on the way, not only at the last component, is followed
// only when root or this uid owns it: /tmp/infera-exec planted as a link
// by another uid must not steer /tmp/infera-exec/rdma into its target.
func TestDirRefusesALinkOfAnotherUidOnTheWay(t *testing.T) {
	if unix.Geteuid() != 0 {
		t.Skip("needs root to give a link to another uid (lchown); run the tests as root")
	}
	base := t.TempDir()
	require.NoError(t, os.Chmod(base, os.ModeSticky|0o777)) // as /tmp
	target := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.Mkdir(target, 0o755))
	planted := filepath.Join(base, "infera-exec")
	require.NoError(t, os.Symlink(target, planted))
	require.NoError(t, os.Lchown(planted, 4242, 4242))

	err := Dir(filepath.Join(planted, "rdma"))
	require.Error(t, err)
	assert.ErrorContains(t, err, planted+" on the way is a symbolic link owned by uid 4242")
	assert.True(t, Unsafe(err), "worth a warning: someone else's link where ours should be")
	assert.NoDirExists(t, filepath.Join(target, "rdma"), "nothing created in the link's target")

	// The same link owned by root names a place root chose (as
	// /var/run -> /run): followed.
	require.NoError(t, os.Lchown(planted, 0, 0))
	require.NoError(t, Dir(filepath.Join(planted, "rdma")))
	assert.DirExists(t, filepath.Join(target, "rdma"))

	// A link owned by another uid further up, with a relative target.
	deep := filepath.Join(base, "deep")
	require.NoError(t, os.Mkdir(deep, 0o755))
	rel := filepath.Join(deep, "rel")
	require.NoError(t, os.Symlink("../infera-exec", rel))
	require.NoError(t, os.Lchown(rel, 4242, 4242))
	assert.ErrorContains(t, Dir(filepath.Join(rel, "x", "y")), "owned by uid 4242")
}

// tmpfsAt mounts a tmpfs with opts on path, a new directory; the caller
// unmounts it.
func tmpfsAt(path, opts string) error {
	if err := os.Mkdir(path, 0o755); err != nil {
		return err
	}
	return unix.Mount("tmpfs", path, "tmpfs", 0, opts)
}

// inMountNamespace runs f on a thread of its own in a private mount
// namespace (the thread ends with it), where it may mount what it likes.
func inMountNamespace(t *testing.T, f func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN) for a private mount namespace of one thread; run the tests as root, as CI does")
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread and its namespace end here
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	require.NoError(t, <-errc)
}

// A volume of this uid mounted open to everyone (a Kubernetes emptyDir is
// mode 0777) is claimed: closed to others first, then cleared of what
// other uids put in it, without following their links; infera-exec's
// own files in it stay. A directory open on purpose (no mount of its
// own) and another uid's volume are not claimed, and stay refused.
func TestClaimTakesAnOpenVolume(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("root's\n"), 0o644))
	const other = 65534
	inMountNamespace(t, func() error {
		state := filepath.Join(base, "state")
		if err := tmpfsAt(state, "mode=0777"); err != nil {
			return err
		}
		defer unix.Unmount(state, unix.MNT_DETACH)
		// What another uid of the pod put there while it was open, and
		// what an earlier start of infera-exec wrote.
		// (No require here: this is not the test's goroutine.)
		for _, p := range []struct {
			path string
			mk   func(string) error
		}{
			{"planted.so", func(p string) error { return os.WriteFile(p, nil, 0o644) }},
			{"rdma", func(p string) error { return os.Mkdir(p, 0o777) }},
			{"rdma/libionic-rdmav34.so", func(p string) error { return os.WriteFile(p, nil, 0o644) }},
			{"report.json", func(p string) error { return os.Symlink(victim, p) }},
		} {
			if err := p.mk(filepath.Join(state, p.path)); err != nil {
				return err
			}
			if err := os.Lchown(filepath.Join(state, p.path), other, other); err != nil {
				return err
			}
		}
		ours := filepath.Join(state, "patches-0123456789abcdef.json")
		if err := os.WriteFile(ours, []byte("{}"), 0o644); err != nil {
			return err
		}

		dir, claimed, refused := Pick(state)
		if !assert.Equal(t, state, dir, "refused: %v", refused) {
			return nil
		}
		joined := strings.Join(claimed, "\n")
		assert.Contains(t, joined, "mode 0777); made it 0755")
		for _, n := range []string{"planted.so", "rdma", "report.json"} {
			assert.Contains(t, joined, "removed "+n+", owned by uid 65534")
			assert.NoFileExists(t, filepath.Join(state, n))
			assert.NoDirExists(t, filepath.Join(state, n))
		}
		assert.FileExists(t, ours, "infera-exec's own file stays")
		b, err := os.ReadFile(victim)
		if err != nil {
			return err
		}
		assert.Equal(t, "root's\n", string(b), "the link's target is untouched")
		fi, err := os.Stat(state)
		if err != nil {
			return err
		}
		assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())

		_, claimed, _ = Pick(state)
		assert.Empty(t, claimed, "claimed once")

		// Open on purpose, no mount of its own: refused as before.
		open := filepath.Join(base, "open")
		if err := os.Mkdir(open, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(open, 0o777); err != nil {
			return err
		}
		dir, claimed, refused = Pick(open)
		assert.Empty(t, dir)
		assert.Empty(t, claimed)
		if assert.Len(t, refused, 1) {
			assert.ErrorContains(t, refused[0], "can be written by group or others (mode 0777)")
		}

		// Another uid's volume: refused as before.
		theirs := filepath.Join(base, "theirs")
		if err := tmpfsAt(theirs, "mode=0777,uid=65534"); err != nil {
			return err
		}
		defer unix.Unmount(theirs, unix.MNT_DETACH)
		dir, claimed, refused = Pick(theirs)
		assert.Empty(t, dir)
		assert.Empty(t, claimed)
		if assert.Len(t, refused, 1) {
			assert.ErrorContains(t, refused[0], "owned by uid 65534")
		}
		return nil
	})
}
