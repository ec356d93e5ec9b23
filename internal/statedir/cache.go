package statedir

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/boundedread"
	"golang.org/x/sys/unix"
)

// KeepPerKind is how many cache files of one kind WriteCache leaves in a
// directory. A kind is the file name up to its last '-' ("probe",
// "patches", "native-load"); the rest is a key that changes when the
// engine, the payload or infera-exec itself is upgraded, so without a
// bound every upgrade would leave its files behind for the life of the
// directory. A few configurations sharing one directory (containers of a
// pod with different engines) each keep theirs.
const KeepPerKind = 8

// WriteCache stores b as dir/name when dir is one of infera-exec's own
// directories (Dir), atomically and without fsync: a cache lost or torn
// by a crash is only checked again and rewritten. It then removes the
// oldest files of name's kind beyond KeepPerKind. Best effort: a cache
// that cannot be written or pruned costs the next start a full check,
// never a wrong answer, so it reports nothing.
func WriteCache(dir, name string, b []byte) {
	if Dir(dir) != nil {
		return
	}
	if atomicfile.WriteBytes(filepath.Join(dir, name), b, atomicfile.Options{Mode: 0o644, NoSync: true}) != nil {
		return
	}
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return
	}
	prune(dir, name[:i+1], filepath.Ext(name), KeepPerKind)
}

// prune removes the regular files named prefix*ext in dir beyond the keep
// most recently modified.
func prune(dir, prefix, ext string, keep int) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type file struct {
		name string
		mod  time.Time
	}
	var files []file
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, prefix) || !strings.HasSuffix(n, ext) {
			continue
		}
		if fi, err := e.Info(); err == nil {
			files = append(files, file{n, fi.ModTime()})
		}
	}
	if len(files) <= keep {
		return
	}
	sort.Slice(files, func(a, b int) bool { return files[a].mod.After(files[b].mod) })
	for _, f := range files[keep:] {
		os.Remove(filepath.Join(dir, f.name))
	}
}

// ReadCache returns the cache file dir/name when it can be believed: dir
// and the file belong to this user (or root) and nobody else can write
// them, and the file is a regular file, not a link, within max bytes. A
// cache that fails any of this is not used, and the caller runs the full
// check instead; which of them failed does not matter to it.
func ReadCache(dir, name string, max int64) ([]byte, bool) {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || !believed(&st) {
		return nil, false
	}
	path := filepath.Join(dir, name)
	f, err := boundedread.Open(path, unix.O_NOFOLLOW)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	if unix.Fstat(int(f.Fd()), &st) != nil || !believed(&st) {
		return nil, false
	}
	data, err := boundedread.ReadAll(f, path, max)
	if err != nil {
		return nil, false
	}
	return data, true
}

// believed: owned by this user or root, and writable by nobody else.
func believed(st *unix.Stat_t) bool {
	uid := uint32(os.Geteuid())
	return (st.Uid == uid || st.Uid == 0) && st.Mode&0o022 == 0
}
