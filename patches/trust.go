package patches

import (
	"os"

	"golang.org/x/sys/unix"
)

// trustedStateFile reports whether file, in infera-exec's state
// directory dir, can be believed: the directory and the file belong to
// this user (or root) and nobody else can write them, and the file is a
// regular file, not a link. A cache or record that fails this is ignored
// and the full check runs, never a shortcut.
func trustedStateFile(dir, file string) bool {
	return trustedNode(dir, unix.S_IFDIR) && trustedNode(file, unix.S_IFREG)
}

func trustedNode(p string, kind uint32) bool {
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != kind {
		return false
	}
	uid := uint32(os.Geteuid())
	return (st.Uid == uid || st.Uid == 0) && st.Mode&0o022 == 0
}
