package overlay

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A re-install over an unchanged DEST reads none of its files: every one
// is vouched for by the identity the first install recorded.
func TestReinstallTrustsTheRecordedIdentities(t *testing.T) {
	src := payloadDir(t)
	dest := filepath.Join(t.TempDir(), "overlay")
	r, err := Install(src, dest)
	require.NoError(t, err)
	assert.Zero(t, r.Recorded, "nothing was recorded before the first install")

	r, err = Install(src, dest)
	require.NoError(t, err)
	assert.Empty(t, r.Copied)
	assert.Equal(t, 4, r.Unchanged)
	assert.Equal(t, 3, r.Recorded, "the three files by their recorded identities, not read")
	sameTree(t, src, dest)
}

// What the record cannot vouch for is read again in full: a file
// rewritten with the same size and modification time (its change time
// moved), one whose mode moved and came back, a record that another uid
// owns or that others could write, one of another payload's digest.
// Each case changes one thing; a check that ignored it would leave the
// rewritten file in place, or count it as recorded.
func TestReinstallFallsBackToAFullCheck(t *testing.T) {
	needRoot(t)
	const lib = "native/rocm7-py312/lib/libdemo.so.1.0"
	for name, tc := range map[string]struct {
		change       func(t *testing.T, src, dest string)
		wantCopied   []string
		wantRecorded int
	}{
		"content rewritten, size and mtime kept": {
			change: func(t *testing.T, src, dest string) {
				p := filepath.Join(dest, lib)
				fi, err := os.Stat(p)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(p, []byte("EVL"), 0o644))
				require.NoError(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
			},
			wantCopied: []string{lib}, wantRecorded: 2,
		},
		"mode changed and back": {
			change: func(t *testing.T, src, dest string) {
				p := filepath.Join(dest, lib)
				require.NoError(t, os.Chmod(p, 0o600))
				require.NoError(t, os.Chmod(p, 0o644))
			},
			wantRecorded: 2, // read again, found identical
		},
		"record owned by another uid": {
			change: func(t *testing.T, src, dest string) {
				require.NoError(t, os.Lchown(filepath.Join(dest, recordName), nobody, nobody))
			},
			wantRecorded: 0,
		},
		"record writable by others": {
			change: func(t *testing.T, src, dest string) {
				require.NoError(t, os.Chmod(filepath.Join(dest, recordName), 0o666))
			},
			wantRecorded: 0,
		},
		"record of another digest": {
			change: func(t *testing.T, src, dest string) {
				p := filepath.Join(dest, recordName)
				data, err := os.ReadFile(p)
				require.NoError(t, err)
				var rec installRecord
				require.NoError(t, json.Unmarshal(data, &rec))
				f := rec.Files[lib]
				f.SHA256 = strings.Repeat("0", 64)
				rec.Files[lib] = f
				data, err = json.Marshal(rec)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(p, data, 0o644))
			},
			wantRecorded: 2,
		},
	} {
		t.Run(name, func(t *testing.T) {
			src := payloadDir(t)
			dest := filepath.Join(t.TempDir(), "overlay")
			_, err := Install(src, dest)
			require.NoError(t, err)
			tc.change(t, src, dest)
			r, err := Install(src, dest)
			require.NoError(t, err)
			assert.Equal(t, tc.wantCopied, r.Copied)
			assert.Equal(t, tc.wantRecorded, r.Recorded)
			sameTree(t, src, dest)
		})
	}
}

// An entry DEST already holds with the payload's content but another
// mode is installed again with the payload's mode: the mode is part of
// "already identical". Over the bits a file can have.
func TestInstallComparesTheModeOfAnExistingEntry(t *testing.T) {
	const file = "bin/infera-exec" // 0755 in the payload
	for _, mode := range []uint32{0o644, 0o700, 0o775, 0o777, 0o4755, 0o2755, 0o1755, 0o555} {
		t.Run(strconv.FormatUint(uint64(mode), 8), func(t *testing.T) {
			src := payloadDir(t)
			dest := filepath.Join(t.TempDir(), "overlay")
			_, err := Install(src, dest)
			require.NoError(t, err)
			p := filepath.Join(dest, file)
			require.NoError(t, syscall.Chmod(p, mode))
			r, err := Install(src, dest)
			require.NoError(t, err)
			assert.Equal(t, []string{file}, r.Copied, "a file of mode %04o is not the payload's 0755", mode)
			var st syscall.Stat_t
			require.NoError(t, syscall.Lstat(p, &st))
			assert.Equal(t, uint32(0o755), st.Mode&0o7777)
		})
	}
}

// DEST below a directory another uid could change is refused before
// anything is written: that uid could put a tree of its own at DEST after
// the install, and root would run it. A sticky directory open to all (as
// /tmp) is safe only when what lies below it is root's or the
// installer's. Table over the parents' owners and modes.
func TestInstallRefusesADestinationOthersCanReplace(t *testing.T) {
	needRoot(t)
	type dir struct {
		uid  int
		mode os.FileMode // with os.ModeSticky for the sticky bit
	}
	root := func(m os.FileMode) dir { return dir{0, m} }
	other := func(m os.FileMode) dir { return dir{nobody, m} }
	for name, tc := range map[string]struct {
		parents []dir // outermost first, below a root-owned 0700 temp dir; DEST is made below the last
		refused string
	}{
		"root 0755":                          {parents: []dir{root(0o755)}},
		"root 0755, root 0700":               {parents: []dir{root(0o755), root(0o700)}},
		"root sticky 1777 (as /tmp)":         {parents: []dir{root(0o777 | os.ModeSticky)}},
		"root sticky 1777, root 0755 below":  {parents: []dir{root(0o777 | os.ModeSticky), root(0o755)}},
		"root sticky 1777, other 0755 below": {parents: []dir{root(0o777 | os.ModeSticky), other(0o755)}, refused: "owned by uid 65534"},
		"root 0777, not sticky":              {parents: []dir{root(0o777)}, refused: "can be written by others and is not sticky"},
		"root 0775, group writable":          {parents: []dir{root(0o775)}, refused: "can be written by others and is not sticky"},
		"root 0757, other writable":          {parents: []dir{root(0o757)}, refused: "can be written by others and is not sticky"},
		"other 0755":                         {parents: []dir{other(0o755)}, refused: "owned by uid 65534"},
		"other 0755 two up":                  {parents: []dir{other(0o755), root(0o755)}, refused: "owned by uid 65534"},
		"root 0777 two up":                   {parents: []dir{root(0o777), root(0o755)}, refused: "can be written by others and is not sticky"},
	} {
		t.Run(name, func(t *testing.T) {
			src := payloadDir(t)
			p := t.TempDir()
			var made []string
			for i := range tc.parents {
				p = filepath.Join(p, "p"+strconv.Itoa(i))
				require.NoError(t, os.Mkdir(p, 0o755))
				made = append(made, p)
			}
			// Owners and modes last, outermost last, so that the
			// fixture's own mkdirs are not refused.
			for i := len(made) - 1; i >= 0; i-- {
				require.NoError(t, os.Lchown(made[i], tc.parents[i].uid, tc.parents[i].uid))
				require.NoError(t, os.Chmod(made[i], tc.parents[i].mode))
			}
			dest := filepath.Join(p, "overlay")
			_, err := Install(src, dest)
			if tc.refused == "" {
				require.NoError(t, err)
				sameTree(t, src, dest)
				return
			}
			var de *DestError
			require.ErrorAs(t, err, &de)
			assert.Contains(t, err.Error(), tc.refused)
			assert.Contains(t, err.Error(), "install destination "+dest)
			assert.NoDirExists(t, dest, "nothing was written")
		})
	}
}

// A link on the way to DEST that another uid owns is refused (its owner
// decides where the payload goes); one of root's is followed.
func TestInstallFollowsOnlyLinksOfRootOnTheWay(t *testing.T) {
	needRoot(t)
	for name, tc := range map[string]struct {
		uid     int
		refused bool
	}{"root's": {0, false}, "another uid's": {nobody, true}} {
		t.Run(name, func(t *testing.T) {
			src := payloadDir(t)
			base := t.TempDir()
			real := filepath.Join(base, "real")
			require.NoError(t, os.Mkdir(real, 0o755))
			link := filepath.Join(base, "link")
			require.NoError(t, os.Symlink("real", link))
			require.NoError(t, os.Lchown(link, tc.uid, tc.uid))
			_, err := Install(src, filepath.Join(link, "overlay"))
			if !tc.refused {
				require.NoError(t, err)
				sameTree(t, src, filepath.Join(real, "overlay"))
				return
			}
			var de *DestError
			require.ErrorAs(t, err, &de)
			assert.Contains(t, err.Error(), "symbolic link owned by uid 65534")
			assert.NoDirExists(t, filepath.Join(real, "overlay"))
		})
	}
}

// An installer that cannot take DEST (not root, in an emptyDir of root's
// open to all) is refused rather than leaving a tree another uid could
// change: the test binary runs Install as uid 65534 (INFERA_INSTALL_AS).
func TestInstallAsAnotherUidRefusesADestItCannotTake(t *testing.T) {
	needRoot(t)
	// t.TempDir's directories are 0700: open the two levels above p to
	// uid 65534.
	reach := func(p string) string {
		require.NoError(t, os.Chmod(filepath.Dir(p), 0o755))
		require.NoError(t, os.Chmod(filepath.Dir(filepath.Dir(p)), 0o755))
		return p
	}
	// The test binary, where uid 65534 can run it.
	bin := reach(filepath.Join(t.TempDir(), "overlay.test"))
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, self, 0o755))
	src := reach(payloadDir(t))
	for name, tc := range map[string]struct {
		owner int
		want  string
	}{
		"emptyDir of root's, 0777": {0, "is owned by uid 0"},
		"its own directory, 0777":  {nobody, ""},
	} {
		t.Run(name, func(t *testing.T) {
			dest := reach(emptyDir(t))
			require.NoError(t, os.Lchown(dest, tc.owner, tc.owner))
			cmd := exec.Command(bin, "-test.run=^$")
			cmd.Env = append(os.Environ(), "INFERA_INSTALL_CHILD="+src+"\n"+dest)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			out, err := cmd.CombinedOutput()
			if tc.want == "" {
				require.NoError(t, err, "%s", out)
				sameTree(t, src, dest)
				return
			}
			require.Error(t, err)
			assert.Contains(t, string(out), "install destination "+dest+" "+tc.want)
			assert.Contains(t, string(out), "another uid could replace what is installed")
			entries, _ := os.ReadDir(dest)
			for _, e := range entries {
				assert.NotEqual(t, "bin", e.Name(), "nothing of the payload was installed")
			}
		})
	}
}
