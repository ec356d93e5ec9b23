package statedir

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
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
	writeCache(dir, name, bytes.NewReader(b))
}

// blobHeader begins every blob infera-exec writes: for a cache file that
// is not JSON (name.blob), what proves it is infera-exec's own, as a JSON
// object does for the others.
const blobHeader = "infera-exec blob\n"

// WriteBlob is WriteCache of a blob, name ending in ".blob": blobHeader,
// then parts one after another, each written from where it is rather
// than gathered into one buffer first.
func WriteBlob(dir, name string, parts []string) {
	readers := []io.Reader{strings.NewReader(blobHeader)}
	for _, p := range parts {
		readers = append(readers, strings.NewReader(p))
	}
	writeCache(dir, name, io.MultiReader(readers...))
}

// OpenBlob opens a blob that can be believed, as ReadCache reads a cache
// file: parts reads its parts as WriteBlob wrote them, one after another,
// in place (the caller reads what it needs, through buffers of its own);
// close closes the file.
func OpenBlob(dir, name string) (parts *io.SectionReader, close func(), ok bool) {
	f, ok := openCache(dir, name)
	if !ok {
		return nil, nil, false
	}
	var st unix.Stat_t
	head := make([]byte, len(blobHeader))
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Size < int64(len(head)) {
		f.Close()
		return nil, nil, false
	}
	if _, err := f.ReadAt(head, 0); err != nil || string(head) != blobHeader {
		f.Close()
		return nil, nil, false
	}
	return io.NewSectionReader(f, int64(len(head)), st.Size-int64(len(head))), func() { f.Close() }, true
}

func writeCache(dir, name string, r io.Reader) {
	if Dir(dir) != nil {
		return
	}
	if atomicfile.Write(filepath.Join(dir, name), r, atomicfile.Options{Mode: 0o644, NoSync: true}) != nil {
		return
	}
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return
	}
	prune(dir, name[:i+1], filepath.Ext(name), KeepPerKind)
}

// prune removes, of the files in dir that are provably ours and named
// prefix<key>ext, those beyond the keep most recently modified.
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
		key, ok := strings.CutPrefix(n, prefix)
		if !ok || !strings.HasSuffix(key, ext) || !isKey(strings.TrimSuffix(key, ext)) || !e.Type().IsRegular() {
			continue
		}
		if fi, err := e.Info(); err == nil && ours(filepath.Join(dir, n), fi) {
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

// isKey reports whether k is a cache file's key as infera-exec writes it:
// hexadecimal digits of a digest, at least 16 of them.
func isKey(k string) bool {
	if len(k) < 16 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ours reports whether the file at path, with info fi, is one infera-exec
// wrote: owned by this process's user and holding a JSON object (a blob:
// beginning with blobHeader). A name is no proof: a user's own
// probe-*.json in a shared directory is left alone.
func ours(path string, fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() {
		return false
	}
	if strings.HasSuffix(path, ".blob") {
		f, err := boundedread.Open(path, unix.O_NOFOLLOW)
		if err != nil {
			return false
		}
		defer f.Close()
		head := make([]byte, len(blobHeader))
		n, _ := io.ReadFull(f, head)
		return string(head[:n]) == blobHeader
	}
	data, err := boundedread.FileNoFollow(path, maxOurs)
	if err != nil {
		return false
	}
	data = bytes.TrimSpace(data)
	return len(data) > 0 && data[0] == '{' && json.Valid(data)
}

// maxOurs bounds the read of a file that may be ours: infera-exec's own
// state files are well under it.
const maxOurs = 16 << 20

// StaleAfter is how old a temporary file of ours must be before Sweep
// takes it for one a killed start left: a write takes milliseconds, so a
// younger one may belong to a start at work right now.
const StaleAfter = time.Minute

// Sweep removes, from dir, the temporary files of infera-exec's own
// writes (".NAME.tmp-N" of a report or a cache file) that a start killed
// between creating and renaming left behind: only regular files of this
// user, older than StaleAfter. It returns what it removed.
func Sweep(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range ents {
		n := e.Name()
		base, rest, ok := strings.Cut(strings.TrimPrefix(n, "."), ".tmp-")
		if !ok || !strings.HasPrefix(n, ".") || !e.Type().IsRegular() || !ourName(base) || !allDigits(rest) {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < StaleAfter {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if os.Remove(filepath.Join(dir, n)) == nil {
			removed = append(removed, n)
		}
	}
	return removed
}

// ourName reports whether name is one infera-exec gives a file in its
// state directory: the report, or a cache file of some kind with its key.
func ourName(name string) bool {
	if name == "report.json" {
		return true
	}
	i := strings.LastIndexByte(name, '-')
	ext := filepath.Ext(name)
	return i > 0 && (ext == ".json" || ext == ".blob") && isKey(strings.TrimSuffix(name[i+1:], ext))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// ReadCache returns the cache file dir/name when it can be believed: dir
// and the file belong to this user (or root) and nobody else can write
// them, and the file is a regular file, not a link, within max bytes. A
// cache that fails any of this is not used, and the caller runs the full
// check instead; which of them failed does not matter to it.
func ReadCache(dir, name string, max int64) ([]byte, bool) {
	f, ok := openCache(dir, name)
	if !ok {
		return nil, false
	}
	defer f.Close()
	data, err := boundedread.ReadAll(f, f.Name(), max)
	if err != nil {
		return nil, false
	}
	return data, true
}

// openCache opens dir/name when it can be believed (see ReadCache).
func openCache(dir, name string) (*os.File, bool) {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || !believed(&st) {
		return nil, false
	}
	f, err := boundedread.Open(filepath.Join(dir, name), unix.O_NOFOLLOW)
	if err != nil {
		return nil, false
	}
	if unix.Fstat(int(f.Fd()), &st) != nil || !believed(&st) {
		f.Close()
		return nil, false
	}
	return f, true
}

// believed: owned by this user or root, and writable by nobody else.
func believed(st *unix.Stat_t) bool {
	return OwnProblem(st.Uid, st.Mode, uint32(os.Geteuid()), true) == ""
}
