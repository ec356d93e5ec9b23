package shadowtree

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blockedChildEnv makes the test binary answer Blocked(DIR, [FILE]) as
// UID:GID for "UID GID DIR FILE" and print "nil" or the error.
const blockedChildEnv = "SHADOWTREE_BLOCKED_CHILD"

func TestMain(m *testing.M) {
	if q := os.Getenv(blockedChildEnv); q != "" {
		var uid, gid int
		var dir, file string
		if _, err := fmt.Sscanf(q, "%d %d %s %s", &uid, &gid, &dir, &file); err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		// The child drops to the uid asked for itself: the test binary is
		// in a directory only root may enter.
		if err := syscall.Setgroups(nil); err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		if err := syscall.Setgid(gid); err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		if err := syscall.Setuid(uid); err != nil {
			fmt.Println(err)
			os.Exit(2)
		}
		if err := Blocked(dir, []string{file}); err != nil {
			fmt.Println(err)
		} else {
			fmt.Println("nil")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runBlocked(t *testing.T, uid, gid int, dir, file string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s %s", blockedChildEnv, uid, gid, dir, file))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

// Which uid may write a file in place, over the owners and the mode bits
// of its directory and of the file: the decision that sends a package to
// a shadow tree. A read-only mount (EROFS) is the container stories'
// (patches_container, read_only in make test-runtime).
func TestBlockedOverOwnersAndBits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the owners of the table need root to set them: run the tests as root (make test does)")
	}
	base := t.TempDir()
	require.NoError(t, os.Chmod(base, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(base), 0o755)) // the test's own directory, for the other uid to reach base
	for _, tc := range []struct {
		name           string
		dirUID, dirGID int
		dirMode        os.FileMode
		fileUID        int
		asUID, asGID   int
		want           string // "nil", or a part of the error
	}{
		{"the user's own directory and file", 1000, 1000, 0o755, 1000, 1000, 1000, "nil"},
		{"root's directory, mode 0755", 0, 0, 0o755, 1000, 1000, 1000, "cannot be written in place: permission denied"},
		{"root's directory, group-writable for the user's group", 0, 1000, 0o775, 1000, 1000, 1000, "nil"},
		{"root's directory, group-writable for another group", 0, 50, 0o775, 1000, 1000, 1000, "permission denied"},
		{"a directory open to all, the file root's", 0, 0, 0o777, 0, 1000, 1000, "belongs to uid 0, not to uid 1000"},
		{"the user's directory, mode 0555", 1000, 1000, 0o555, 1000, 1000, 1000, "permission denied"},
		{"root, a directory of mode 0555 of another uid", 1000, 1000, 0o555, 1000, 0, 0, "nil"},
		{"root, a file of another uid", 1000, 1000, 0o755, 1000, 0, 0, "nil"},
		{"a directory the user cannot search", 0, 0, 0o700, 0, 1000, 1000, "cannot be written in place: permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp(base, "d")
			require.NoError(t, err)
			f := filepath.Join(dir, "mod.py")
			require.NoError(t, os.WriteFile(f, []byte("x = 1\n"), 0o644))
			require.NoError(t, os.Chown(f, tc.fileUID, tc.fileUID))
			require.NoError(t, os.Chown(dir, tc.dirUID, tc.dirGID))
			require.NoError(t, os.Chmod(dir, tc.dirMode))
			got := runBlocked(t, tc.asUID, tc.asGID, dir, "mod.py")
			if tc.want == "nil" {
				assert.Equal(t, "nil", got)
			} else {
				assert.Contains(t, got, tc.want)
			}
			absent := runBlocked(t, tc.asUID, tc.asGID, dir, "absent.py")
			if strings.Contains(tc.name, "cannot search") {
				assert.Contains(t, absent, "permission denied", "a file that cannot be looked up is not taken for absent")
			} else {
				assert.Equal(t, "nil", absent, "an absent file is nothing to write")
			}
		})
	}
}
