package statedir

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The owners a trust check meets: root, the uid infera-exec runs as (not
// root here, so that the two are told apart), another uid.
const (
	testEUID  = 1000
	otherUID  = 4242
	sticky    = unix.S_ISVTX
	dirFormat = unix.S_IFDIR
)

// A directory on the way may be changed by root and euid only: every
// write bit of group or others lets them rename what is below it, unless
// the sticky bit keeps each entry to its owner.
func TestAncestorProblemOverBitsAndOwners(t *testing.T) {
	for _, owner := range []uint32{0, testEUID, otherUID} {
		for _, mode := range []uint32{0o755, 0o700, 0o775, 0o757, 0o777, 0o770, 0o707, 0o720, 0o702, sticky | 0o777, sticky | 0o775, sticky | 0o757, sticky | 0o755, 0o2775, 0o4777} {
			t.Run(fmt.Sprintf("uid%d-%04o", owner, mode), func(t *testing.T) {
				others := mode&0o022 != 0 && mode&sticky == 0
				want := owner == otherUID || others
				why := AncestorProblem(owner, dirFormat|mode, testEUID)
				assert.Equal(t, want, why != "", "refused: %q", why)
				if owner == otherUID {
					assert.Contains(t, why, "owned by uid 4242")
				} else if others {
					assert.Contains(t, why, fmt.Sprintf("mode %04o", mode))
				}
			})
		}
	}
}

// What infera-exec keeps or believes must be writable by its owner only,
// sticky or not, and owned by euid (or root, where root's is trusted).
func TestOwnProblemOverBitsAndOwners(t *testing.T) {
	for _, owner := range []uint32{0, testEUID, otherUID} {
		for _, rootToo := range []bool{false, true} {
			for _, mode := range []uint32{0o644, 0o600, 0o664, 0o646, 0o666, 0o660, 0o606, 0o620, 0o602, 0o755, 0o775, 0o757, sticky | 0o777, sticky | 0o755, 0o2775} {
				t.Run(fmt.Sprintf("uid%d-root%v-%04o", owner, rootToo, mode), func(t *testing.T) {
					ownerOK := owner == testEUID || rootToo && owner == 0
					want := !ownerOK || mode&0o022 != 0
					why := OwnProblem(owner, mode, testEUID, rootToo)
					assert.Equal(t, want, why != "", "refused: %q", why)
				})
			}
		}
	}
}

// The checks as the files meet them: a cache file and its directory are
// believed only in the modes and owners above, whatever bit lets another
// uid write.
func TestReadCacheOverBitsAndOwners(t *testing.T) {
	if unix.Geteuid() != 0 {
		t.Skip("the owner cases need root (chown to another uid)")
	}
	for _, c := range []struct {
		fileMode, dirMode os.FileMode
		fileUID, dirUID   int
		believed          bool
	}{
		{0o644, 0o755, 0, 0, true},
		{0o600, 0o700, 0, 0, true},
		{0o444, 0o755, 0, 0, true},
		{0o664, 0o755, 0, 0, false},
		{0o646, 0o755, 0, 0, false},
		{0o666, 0o755, 0, 0, false},
		{0o620, 0o755, 0, 0, false},
		{0o602, 0o755, 0, 0, false},
		{0o644, 0o775, 0, 0, false},
		{0o644, 0o757, 0, 0, false},
		{0o644, 0o777 | os.ModeSticky, 0, 0, false},
		{0o644, 0o755, otherUID, 0, false},
		{0o644, 0o755, 0, otherUID, false},
	} {
		t.Run(fmt.Sprintf("file%04o-uid%d-dir%v-uid%d", c.fileMode, c.fileUID, c.dirMode, c.dirUID), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			require.NoError(t, os.Mkdir(dir, 0o700))
			p := filepath.Join(dir, "probe-a.json")
			require.NoError(t, os.WriteFile(p, []byte("{}"), 0o600))
			require.NoError(t, os.Chmod(p, c.fileMode))
			require.NoError(t, os.Chown(p, c.fileUID, c.fileUID))
			require.NoError(t, os.Chmod(dir, c.dirMode))
			require.NoError(t, os.Chown(dir, c.dirUID, c.dirUID))
			_, ok := ReadCache(dir, "probe-a.json", 100)
			assert.Equal(t, c.believed, ok)
			_, closeBlob, ok := OpenBlob(dir, "probe-a.json")
			if ok {
				closeBlob()
			}
			assert.False(t, ok, "not a blob")
		})
	}
}

// Dir accepts a state directory only below parents that nobody but root
// and euid can change: each write bit of group or others on a parent is
// refused unless the parent is sticky, and so is a parent of another uid.
func TestDirOverParentBitsAndOwners(t *testing.T) {
	if unix.Geteuid() != 0 {
		t.Skip("the owner cases need root (chown to another uid)")
	}
	for _, c := range []struct {
		mode     os.FileMode
		uid      int
		accepted bool
	}{
		{0o755, 0, true},
		{0o700, 0, true},
		{0o775, 0, false},
		{0o757, 0, false},
		{0o777, 0, false},
		{0o770, 0, false},
		{0o775 | os.ModeSticky, 0, true},
		{0o777 | os.ModeSticky, 0, true},
		{0o757 | os.ModeSticky, 0, true},
		{0o755, otherUID, false},
		{0o777 | os.ModeSticky, otherUID, false},
	} {
		t.Run(fmt.Sprintf("%v-uid%d", c.mode, c.uid), func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "parent")
			require.NoError(t, os.Mkdir(parent, 0o755))
			require.NoError(t, os.Chmod(parent, c.mode))
			require.NoError(t, os.Chown(parent, c.uid, c.uid))
			state := filepath.Join(parent, "state")
			err := Dir(state)
			if c.accepted {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, Unsafe(err), "a warning, not a debug line: %v", err)
			assert.Contains(t, err.Error(), parent)
			assert.NoDirExists(t, state, "nothing made below a parent another uid can change")
		})
	}
}
