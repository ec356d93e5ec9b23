package overlay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/beneath"
	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/progress"
	"github.com/infera/infera-exec/internal/statedir"
)

// Marker files in an install destination. While the first exists an
// install is under way or was interrupted; the second holds the index of
// the payload installed there, so a re-run knows what it owns.
const (
	installingName = ".infera-installing"
	installedName  = ".infera-installed.json"
	stagePrefix    = ".infera-stage-"
)

// DestError is an install destination that cannot take the payload (a
// file, a read-only mount, no permission), as opposed to a payload that
// is not what its index says.
type DestError struct{ Err error }

func (e *DestError) Error() string { return e.Err.Error() }
func (e *DestError) Unwrap() error { return e.Err }

// InstallResult is what --install did.
type InstallResult struct {
	Source    string   `json:"source"`
	Dest      string   `json:"dest"`
	Entries   int      `json:"entries"`
	Copied    []string `json:"copied,omitempty"`
	Unchanged int      `json:"unchanged"`
	// Recorded: of the unchanged files, those the install record vouched
	// for by their identity, not read again.
	Recorded int      `json:"recorded"`
	Removed  []string `json:"removed,omitempty"` // left by an earlier payload
	Notes    []string `json:"notes,omitempty"`
}

// Install copies the payload at src into dest (an emptyDir in a pod), so
// the overlay image needs no shell: every file is checked against src's
// index while it is copied, modes and symlinks are kept, entries that
// could land outside dest are refused, files already identical in dest are
// left alone (a re-run is a no-op), and new content is written into a
// staging directory inside dest and renamed into place only when all of it
// has been copied and checked. dest stays marked as incomplete until the
// last rename, so a worker never starts from half a payload.
//
// dest is trusted no further than its owner: an emptyDir is 0777 and
// not sticky, so any uid of the pod could have put links or files in it.
// It is opened once without following a link and worked on through
// descriptors (see destdir.go); it is made the installer's and closed to
// group and others before anything is written; whatever in it another
// uid owns is removed (an identical file of another uid is not "already
// identical": its owner could rewrite it later); and every directory in
// it is left writable by the installer alone. What had to change is said
// in the result's notes; once DEST is open the result is returned with
// an error too, for those notes.
func Install(src, dest string) (*InstallResult, error) { return install(src, dest, nil) }

// install is Install, saying how far along it is through say (nil: quiet).
func install(src, dest string, say func(string)) (*InstallResult, error) {
	ix, raw, err := ReadIndex(src)
	if err != nil {
		return nil, err
	}
	fd, pfd, st, err := openDest(dest)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	defer unix.Close(pfd)
	if sfi, err := os.Stat(src); err == nil {
		if s, ok := sfi.Sys().(*syscall.Stat_t); ok && s.Dev == st.Dev && s.Ino == st.Ino {
			return nil, fmt.Errorf("install destination %s is the payload itself", dest)
		}
	}
	in := &installer{
		src: src, dest: dest, ix: ix, raw: raw, fd: fd, pfd: pfd, name: destName(dest), dev: st.Dev,
		euid: uint32(unix.Geteuid()),
		r:    &InstallResult{Source: src, Dest: dest, Entries: len(ix.Entries)},
	}
	if say != nil {
		var size int64
		for _, e := range ix.Entries {
			size += e.Size
		}
		in.meter = progress.New("install", int64(len(ix.Entries)), size, say)
	}
	return in.r, in.run(st)
}

type installer struct {
	src, dest string
	ix        *Index
	raw       []byte
	fd        int    // dest, opened once
	pfd       int    // dest's parent (O_PATH)
	name      string // dest's name in it
	dev       uint64 // dest's filesystem: nothing below it on another is touched
	euid      uint32
	r         *InstallResult
	meter     *progress.Meter   // nil: quiet
	rec       *installRecord    // DEST's record of the last install, nil: none to believe
	ids       []fileid.Identity // by entry: the identity of the file this install checked (see writeRecord)
	recorded  atomic.Int64      // files identical by the record
}

// openDest opens dest as a directory without following a link at its
// name, from its parent reached by statedir.OpenParents: every directory
// on the way must be one that only root or the installer can change (a
// sticky one such as /tmp only when what lies below it is root's or the
// installer's), since whoever could change one could put a tree of their
// own at dest after the install, and root would run it. dest and its
// parents are created when missing. It returns dest's descriptor and its
// parent's (an O_PATH descriptor), which the caller closes.
func openDest(dest string) (fd, pfd int, st unix.Stat_t, err error) {
	dest = absDest(dest)
	if dest == "/" {
		return -1, -1, st, &DestError{fmt.Errorf("install destination %s is the root directory; give a directory of its own, e.g. an emptyDir mounted at /overlay", dest)}
	}
	parent, name := filepath.Dir(dest), filepath.Base(dest)
	pfd, err = statedir.OpenParents(parent)
	if errors.Is(err, unix.ENOENT) {
		if merr := os.MkdirAll(parent, 0o755); merr != nil {
			return -1, -1, st, &DestError{fmt.Errorf("install destination %s: %w", dest, boundedread.BareErr(merr))}
		}
		pfd, err = statedir.OpenParents(parent)
	}
	if err != nil {
		return -1, -1, st, &DestError{fmt.Errorf("install destination %s: %v: whoever can change it could put a tree of their own at %s after the install, and root would run it; give a destination below directories that only root (or the installer) can change, e.g. an emptyDir mounted at /overlay", dest, err, dest)}
	}
	fd, err = unix.Openat(pfd, name, dirFlags, 0)
	if err == unix.ENOENT {
		if err := unix.Mkdirat(pfd, name, 0o755); err != nil && err != unix.EEXIST {
			unix.Close(pfd)
			return -1, -1, st, &DestError{fmt.Errorf("install destination %s: %w", dest, err)}
		}
		fd, err = unix.Openat(pfd, name, dirFlags, 0)
	}
	if err != nil {
		defer unix.Close(pfd)
		fi, lerr := os.Lstat(dest)
		switch {
		case lerr == nil && fi.Mode()&fs.ModeSymlink != 0:
			return -1, -1, st, &DestError{fmt.Errorf("install destination %s is a symbolic link; give the directory itself (whoever can change the link would decide where the payload goes)", dest)}
		case lerr == nil && !fi.IsDir():
			return -1, -1, st, &DestError{fmt.Errorf("install destination %s is not a directory (%s)", dest, kind(fi))}
		}
		return -1, -1, st, &DestError{fmt.Errorf("install destination %s: %w", dest, err)}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		unix.Close(pfd)
		return -1, -1, st, &DestError{fmt.Errorf("install destination %s: %w", dest, err)}
	}
	return fd, pfd, st, nil
}

// absDest is dest as an absolute, clean path.
func absDest(dest string) string {
	if abs, err := filepath.Abs(dest); err == nil {
		return abs
	}
	return filepath.Clean(dest)
}

// destName is dest's last component.
func destName(dest string) string { return filepath.Base(absDest(dest)) }

func (in *installer) note(format string, args ...any) {
	in.r.Notes = append(in.r.Notes, fmt.Sprintf(format, args...))
}

// at is dest/rel, for messages.
func (in *installer) at(rel string) string {
	if rel == "" || rel == "." {
		return in.dest
	}
	return filepath.Join(in.dest, filepath.FromSlash(rel))
}

// failed is an error of writing rel in dest: a *DestError (exit 73)
// when it is the destination's problem.
func (in *installer) failed(op, rel string, err error) error {
	return destErr(fmt.Errorf("install destination %s: %s %s: %w", in.dest, op, in.at(rel), err))
}

// installPerm is the mode an entry gets in dest: the payload's, without
// write access for group and others.
func installPerm(e Entry) uint32 { return uint32(e.Perm() &^ 0o022) }

func (in *installer) run(st unix.Stat_t) error {
	if err := in.takeDest(st); err != nil {
		return err
	}
	// DEST is marked unfinished at every instant: the marker an earlier,
	// interrupted install left (a regular file of ours) is kept as it is,
	// since removing and creating it again would leave a moment without
	// it; anything else at the name (a link, another uid's file) is
	// replaced.
	var mst unix.Stat_t
	if err := unix.Fstatat(in.fd, installingName, &mst, unix.AT_SYMLINK_NOFOLLOW); err != nil || mst.Mode&unix.S_IFMT != unix.S_IFREG || mst.Uid != in.euid || mst.Nlink != 1 {
		if err := replaceFileAt(in.fd, installingName, []byte("an infera-exec --install is under way or was interrupted\n"), in.dev); err != nil {
			return &DestError{fmt.Errorf("install destination %s is not writable: %w", in.dest, err)}
		}
	}
	if err := in.removeLeftovers(); err != nil {
		return err
	}
	if err := in.secure(in.fd, ""); err != nil {
		return err
	}
	in.rec = in.loadRecord()
	stageName, err := in.mkStage()
	if err != nil {
		return err
	}
	stage, err := beneath.OpenAt(in.fd, stageName)
	if err != nil {
		return in.failed("open", stageName, err)
	}
	defer func() {
		unix.Close(stage)
		beneath.RemoveAll(in.fd, stageName, in.dev)
	}()

	// Copy and check everything that differs into the stage, a few files
	// at a time. Entries of dest are compared without following any link
	// on the way: an old link py39 -> py310 does not make py39/x "already
	// identical".
	staged, err := in.stageAll(stage)
	if err != nil {
		return err
	}
	// One flush of the filesystem for every staged file, before any is
	// renamed into place: a crash after a rename finds the file's bytes
	// on disk (it used to be one fsync per file).
	if err := unix.Syncfs(stage); err != nil {
		return in.failed("sync", stageName, err)
	}
	var todo []int
	for i, ok := range staged {
		if ok {
			todo = append(todo, i)
			if e := in.ix.Entries[i]; e.Type == "file" && e.Perm()&0o022 != 0 {
				in.note("%s: the payload's mode %04o lets group or others write it; installed as %04o", in.at(e.Path), uint32(e.Perm()), installPerm(e))
			}
		}
	}

	// What an earlier install put there that this payload no longer has
	// goes first, without following links, while every directory of the
	// old payload is still a directory: once the new links are in place a
	// stale path could lead through one of them into the new payload (or
	// out of dest).
	if in.r.Removed, err = removeStale(in.fd, in.dest, in.ix); err != nil {
		return err
	}
	// From here on, what DEST may hold of ours is the new payload: record
	// it before placing anything, so that an install killed half-way and
	// followed by one of another payload still knows what to remove.
	if err := writeAtomicAt(in.fd, installedName, in.raw); err != nil {
		return in.failed("write", installedName, err)
	}
	if err := in.placeDirs(); err != nil {
		return err
	}
	if err := in.placeStaged(stage, todo); err != nil {
		return err
	}
	// Directory modes last, so a read-only directory was writable while
	// it was filled.
	w := &dirWalker{root: in.fd}
	for _, e := range in.ix.Entries {
		if e.Type != "dir" {
			continue
		}
		dfd, err := w.at(e.Path)
		if err == nil {
			err = unix.Fchmod(dfd, installPerm(e))
		}
		if err != nil {
			w.close()
			return in.failed("chmod", e.Path, err)
		}
	}
	w.close()
	if err := writeAtomicAt(in.fd, IndexName, in.raw); err != nil {
		return in.failed("write", IndexName, err)
	}
	in.writeRecord(in.ids)
	// The (now empty) stage goes before the marker, so that a finished
	// install holds exactly the payload.
	if err := beneath.RemoveAll(in.fd, stageName, in.dev); err != nil {
		return in.failed("remove", stageName, err)
	}
	// Every rename and mode on disk before the marker goes, on any
	// filesystem: a crash never finds DEST unmarked and half placed.
	if err := unix.Syncfs(in.fd); err != nil {
		return in.failed("sync", "", err)
	}
	if err := unix.Unlinkat(in.fd, installingName, 0); err != nil {
		return in.failed("remove", installingName, err)
	}
	if err := unix.Fsync(in.fd); err != nil && err != unix.EINVAL {
		return in.failed("fsync", "", err)
	}
	return nil
}

// takeDest makes dest itself the installer's and not writable by group or
// others, before anything is written into it: from then on no other uid
// can add, rename or remove an entry at its top level. When that cannot
// be done (an installer that is not root, in a directory it does not
// own), the install is refused: another uid could replace what is
// installed, and root would run it. Then dest's name must still lead to
// the directory it holds open: below a sticky parent (as /tmp) the uid
// that owned dest could have renamed it away and put another in its
// place before the chown; once dest is the installer's, nobody else can.
func (in *installer) takeDest(st unix.Stat_t) error {
	var problems []string
	if st.Uid != in.euid {
		if err := unix.Fchown(in.fd, int(in.euid), -1); err != nil {
			problems = append(problems, fmt.Sprintf("owned by uid %d (chown: %v)", st.Uid, err))
		} else {
			in.note("install destination %s was owned by uid %d; made it uid %d's, so that only the installer can change what is installed", in.dest, st.Uid, in.euid)
			// chown may clear set-id bits; read the mode again.
			unix.Fstat(in.fd, &st)
		}
	}
	if mode := st.Mode & 0o7777; mode&0o022 != 0 {
		if err := unix.Fchmod(in.fd, mode&^0o022); err != nil {
			problems = append(problems, fmt.Sprintf("mode %04o (chmod: %v)", mode, err))
		} else {
			in.note("install destination %s was writable by group or others (mode %04o); made it %04o, so that only the installer can change what is installed", in.dest, mode, mode&^0o022)
		}
	}
	if len(problems) > 0 {
		return &DestError{fmt.Errorf("install destination %s is %s: another uid could replace what is installed, and root would run it; run the install as root or as the directory's owner", in.dest, strings.Join(problems, " and "))}
	}
	if lst, err := lstatAt(in.pfd, in.name); err != nil || lst.Dev != st.Dev || lst.Ino != st.Ino {
		return &DestError{fmt.Errorf("install destination %s was replaced by another directory while the install opened it; run the install again", in.dest)}
	}
	return nil
}

// removeLeftovers removes what an install killed half-way left: its
// staging directories, and the temporary files of its index writes.
func (in *installer) removeLeftovers() error {
	names, err := beneath.Names(in.fd, in.dest)
	if err != nil {
		return in.failed("list", "", err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, stagePrefix) || strings.HasPrefix(n, "."+installedName+".tmp-") || strings.HasPrefix(n, "."+IndexName+".tmp-") || strings.HasPrefix(n, "."+recordName+".tmp-") {
			if err := beneath.RemoveAll(in.fd, n, in.dev); err != nil {
				return in.failed("remove", n, err)
			}
		}
	}
	return nil
}

// secure walks the directory dirfd (rel in dest) without following links:
// an entry another uid owns is removed, with everything in it (whether
// the payload has it or not, it is not the installer's to vouch for, and
// its owner could change it after the install); every directory left is
// made not writable by group or others before it is entered. Another
// filesystem mounted inside dest is left as it is, with a warning.
func (in *installer) secure(dirfd int, rel string) error {
	names, err := beneath.Names(dirfd, in.at(rel))
	if err != nil {
		return in.failed("list", rel, err)
	}
	for _, n := range names {
		p := path.Join(rel, n)
		st, err := lstatAt(dirfd, n)
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			return in.failed("stat", p, err)
		}
		if isDirMode(st.Mode) && st.Dev != in.dev {
			in.note("warning: %s is another filesystem mounted in the install destination; left as it is", in.at(p))
			continue
		}
		if st.Uid != in.euid {
			if err := beneath.RemoveAll(dirfd, n, in.dev); err != nil {
				return in.failed("remove", p, fmt.Errorf("owned by uid %d, which could change it after the install: %w", st.Uid, err))
			}
			in.note("removed %s: owned by uid %d, not by uid %d that installs, which could change it after the install", in.at(p), st.Uid, in.euid)
			continue
		}
		if !isDirMode(st.Mode) {
			continue
		}
		sub, err := beneath.OpenAt(dirfd, n)
		if err != nil {
			return in.failed("open", p, err)
		}
		if mode := st.Mode & 0o7777; mode&0o022 != 0 {
			if err := unix.Fchmod(sub, mode&^0o022); err != nil {
				unix.Close(sub)
				return in.failed("chmod", p, err)
			}
			in.note("%s was writable by group or others (mode %04o); made it %04o", in.at(p), mode, mode&^0o022)
		}
		err = in.secure(sub, p)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// mkStage creates a fresh staging directory in dest.
func (in *installer) mkStage() (string, error) {
	for i := 0; ; i++ {
		name := tmpName(stagePrefix)
		err := unix.Mkdirat(in.fd, name, 0o700)
		if err == nil {
			return name, nil
		}
		if err != unix.EEXIST || i == 10 {
			return "", in.failed("create", name, err)
		}
	}
}

// installWorkers bounds the files in flight at once: enough to keep the
// disk busy while another file is hashed, few enough that the buffers
// (copyBuffer each) stay small.
func installWorkers() int { return min(max(2*runtime.GOMAXPROCS(0), 4), 8) }

// stageJob is one entry for a worker: its index in the entries, and a
// descriptor of dest's directory that would hold it (a duplicate the
// worker closes), or -1 when dest has no such directory.
type stageJob struct{ i, dirfd int }

// stageAll settles every entry that is not a directory, installWorkers
// at a time: kept when dest already holds it (identical), else copied
// and checked into the stage under its index as a name. It returns, by
// entry, whether it was staged; the first failure (in the order of the
// entries) stops the rest.
func (in *installer) stageAll(stage int) ([]bool, error) {
	n := len(in.ix.Entries)
	staged, errs := make([]bool, n), make([]error, n)
	in.ids = make([]fileid.Identity, n)
	var failed atomic.Bool
	jobs := make(chan stageJob, installWorkers())
	var wg sync.WaitGroup
	for range installWorkers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, copyBuffer)
			for j := range jobs {
				if !failed.Load() {
					if staged[j.i], errs[j.i] = in.settle(stage, j, buf); errs[j.i] != nil {
						failed.Store(true)
					}
				}
				if j.dirfd >= 0 {
					unix.Close(j.dirfd)
				}
			}
		}()
	}
	dw := &dirWalker{root: in.fd}
	for i, e := range in.ix.Entries {
		if e.Type == "dir" {
			continue
		}
		if failed.Load() {
			break
		}
		j := stageJob{i: i, dirfd: -1}
		dir, _ := splitRel(e.Path)
		if dfd, err := dw.at(dir); err == nil {
			if fd, err := unix.FcntlInt(uintptr(dfd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
				j.dirfd = fd
			}
		}
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	dw.close()
	in.r.Recorded = int(in.recorded.Load())
	for i, err := range errs {
		if err != nil {
			return nil, err
		}
		if !staged[i] && in.ix.Entries[i].Type != "dir" {
			in.r.Unchanged++
		}
	}
	return staged, nil
}

// settle is stageAll's work on one entry: false when dest already holds
// it, true when it was copied into the stage.
func (in *installer) settle(stage int, j stageJob, buf []byte) (bool, error) {
	e := in.ix.Entries[j.i]
	_, name := splitRel(e.Path)
	if j.dirfd >= 0 && in.identical(j.dirfd, name, e, j.i, buf) {
		in.meter.Add(1, e.Size)
		return false, nil
	}
	sname := strconv.Itoa(j.i)
	switch e.Type {
	case "file":
		if err := in.copyChecked(stage, sname, e, buf); err != nil {
			return false, err
		}
	case "symlink":
		if t, rerr := os.Readlink(filepath.Join(in.src, filepath.FromSlash(e.Path))); rerr != nil || t != e.Target {
			return false, fmt.Errorf("payload %s: symlink %s %s (index says -> %s)", in.src, e.Path, describeLink(t, rerr), e.Target)
		}
		if err := unix.Symlinkat(e.Target, stage, sname); err != nil {
			return false, in.failed("stage", e.Path, err)
		}
	}
	in.meter.Add(1, e.Size)
	return true, nil
}

// identical reports whether name in the directory dirfd of dest already
// holds exactly entry e (entry i), as the installer's: a file is the
// installer's own (one link, its owner), of the payload's size and mode,
// and either the file the install record vouches for (its identity
// unchanged since an install checked it) or, read now, of the payload's
// SHA-256; a link is the installer's, with the payload's target. A file
// found identical has its identity kept for the next record.
func (in *installer) identical(dirfd int, name string, e Entry, i int, buf []byte) bool {
	st, err := lstatAt(dirfd, name)
	if err != nil || st.Uid != in.euid {
		return false
	}
	switch e.Type {
	case "symlink":
		if !isLinkMode(st.Mode) {
			return false
		}
		b := make([]byte, len(e.Target)+1)
		n, err := unix.Readlinkat(dirfd, name, b)
		return err == nil && string(b[:n]) == e.Target
	case "file":
		if !isRegMode(st.Mode) || st.Size != e.Size || st.Mode&0o7777 != installPerm(e) || st.Nlink != 1 {
			return false
		}
		if in.rec.holds(e, &st, in.euid) {
			in.ids[i] = fileid.Of(&st)
			in.recorded.Add(1)
			return true
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return false
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		var fst unix.Stat_t
		if unix.Fstat(fd, &fst) != nil || fst.Ino != st.Ino || fst.Dev != st.Dev {
			return false
		}
		h := sha256.New()
		n, err := io.CopyBuffer(io.MultiWriter(h, in.meter.Partial(e.Size)), f, buf)
		if err != nil || n != e.Size || hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
			return false
		}
		// The identity it had while it was read; one that moved meanwhile
		// is not kept.
		var after unix.Stat_t
		if unix.Fstat(fd, &after) == nil && fileid.Of(&after) == fileid.Of(&fst) {
			in.ids[i] = fileid.Of(&after)
		}
		return true
	}
	return false
}

// copyChecked copies the payload's file e into name in the staging
// directory sfd with the entry's mode (without group or other write),
// and checks the copy (copyVerified: the bytes hashed are the staged
// file's, which is what is renamed into place); a file that differs from
// the index in size or content is refused.
func (in *installer) copyChecked(sfd int, name string, e Entry, buf []byte) error {
	src := filepath.Join(in.src, filepath.FromSlash(e.Path))
	// Opened without blocking and checked on the descriptor: a FIFO put
	// in the payload would otherwise hold the install.
	f, err := boundedread.Open(src, 0)
	if err != nil {
		if errors.Is(err, boundedread.ErrNotRegular) {
			return fmt.Errorf("payload file %s: not a regular file %w", src, errMismatch)
		}
		return fmt.Errorf("payload file %s: %w", src, boundedread.Reason(err))
	}
	defer f.Close()
	fd, err := unix.Openat(sfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return in.failed("stage", e.Path, err)
	}
	out := os.NewFile(uintptr(fd), name)
	n, got, err := copyVerified(out, f, e.Size, buf, in.meter.Partial(e.Size))
	if err == nil && n >= copyBuffer {
		// Its writeback started now rather than by the sync before the
		// renames, so that the disk writes it while other files are
		// copied (asynchronous; no durability is taken from it).
		unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}
	if err == nil {
		err = out.Chmod(fs.FileMode(installPerm(e)))
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return destErr(fmt.Errorf("copy %s: %w", src, err))
	}
	if n != e.Size || got != e.SHA256 {
		// The text line leaves the hashes to the record's detail.
		if n > e.Size {
			return logging.WithBrief(fmt.Errorf("payload file %s %w: more than %d bytes, the index says %d bytes with SHA-256 %s (tampered or truncated; rebuild the payload)", src, errMismatch, e.Size, e.Size, e.SHA256),
				fmt.Sprintf("payload file %s %v: more than the index's %d bytes (tampered or truncated; rebuild the payload)", src, errMismatch, e.Size))
		}
		differs := fmt.Sprintf("%d bytes, the index says %d", n, e.Size)
		if n == e.Size {
			differs = "its SHA-256 is not the index's"
		}
		return logging.WithBrief(fmt.Errorf("payload file %s %w: %d bytes with SHA-256 %s, the index says %d bytes with %s (tampered or truncated; rebuild the payload)", src, errMismatch, n, got, e.Size, e.SHA256),
			fmt.Sprintf("payload file %s %v: %s (tampered or truncated; rebuild the payload)", src, errMismatch, differs))
	}
	return nil
}

// placeDirs makes every directory of the payload a real directory of the
// installer in dest (idempotent): a link or file where the payload has a
// directory is removed first, never followed.
func (in *installer) placeDirs() error {
	w := &dirWalker{root: in.fd}
	defer w.close()
	for _, e := range in.ix.Entries {
		if e.Type != "dir" {
			continue
		}
		dir, name := splitRel(e.Path)
		pfd, err := w.at(dir)
		if err != nil {
			return in.failed("open", dir, err)
		}
		st, err := lstatAt(pfd, name)
		if err == nil && (!isDirMode(st.Mode) || st.Uid != in.euid) {
			if err := beneath.RemoveAll(pfd, name, in.dev); err != nil {
				return in.failed("remove", e.Path, err)
			}
			err = unix.ENOENT
		}
		switch {
		case err == unix.ENOENT:
			if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
				return in.failed("mkdir", e.Path, err)
			}
			st.Mode = 0
		case err != nil:
			return in.failed("stat", e.Path, err)
		}
		if e.Perm()&0o022 != 0 && st.Mode&0o7777 != installPerm(e) {
			in.note("%s: the payload's mode %04o lets group or others write it; installed as %04o", in.at(e.Path), uint32(e.Perm()), installPerm(e))
		}
		if st.Mode != 0 && st.Mode&0o700 != 0o700 {
			// A read-only directory of an earlier install: writable by
			// the installer while it is filled.
			dfd, err := w.at(e.Path)
			if err == nil {
				err = unix.Fchmod(dfd, st.Mode&0o7777|0o700)
			}
			if err != nil {
				return in.failed("chmod", e.Path, err)
			}
		}
	}
	return nil
}

// placeStaged renames the staged entries (todo, by index) over whatever
// dest has at their paths; a directory there (where the payload now has
// a file or link) is removed first. A placed file's identity is kept for
// the record (the rename is its last change).
func (in *installer) placeStaged(stage int, todo []int) error {
	dw := &dirWalker{root: in.fd}
	defer dw.close()
	for _, i := range todo {
		e := in.ix.Entries[i]
		dir, name := splitRel(e.Path)
		dfd, err := dw.at(dir)
		if err != nil {
			return in.failed("open", dir, err)
		}
		if st, err := lstatAt(dfd, name); err == nil && isDirMode(st.Mode) {
			if err := beneath.RemoveAll(dfd, name, in.dev); err != nil {
				return in.failed("remove", e.Path, err)
			}
		}
		if err := unix.Renameat(stage, strconv.Itoa(i), dfd, name); err != nil {
			return in.failed("install", e.Path, err)
		}
		if st, err := lstatAt(dfd, name); err == nil && e.Type == "file" && isRegMode(st.Mode) && st.Uid == in.euid && st.Nlink == 1 {
			in.ids[i] = fileid.Of(&st)
		}
		in.r.Copied = append(in.r.Copied, e.Path)
	}
	return nil
}

// removeStale deletes what an earlier install put in dest that the new
// payload no longer has; entries dest had before any install are left.
// Nothing is followed: each entry is removed with unlinkat relative to its
// parent directory, reached from dest one O_NOFOLLOW directory at a time,
// so an entry whose parent is now a link (into the new payload, or out of
// dest) is not touched.
func removeStale(destfd int, dest string, ix *Index) ([]string, error) {
	data, err := readFileAt(destfd, installedName, boundedread.Index)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("install destination %s: %w", dest, err)
	}
	var old Index
	if json.Unmarshal(data, &old) != nil {
		return nil, nil
	}
	keep := map[string]bool{}
	for _, e := range ix.Entries {
		keep[e.Path] = true
	}
	var removed []string
	for i := len(old.Entries) - 1; i >= 0; i-- { // children before parents
		e := old.Entries[i]
		if keep[e.Path] || e.check() != nil {
			continue
		}
		err := unlinkBeneath(destfd, e.Path, e.Type == "dir")
		switch {
		case err == nil:
			removed = append(removed, e.Path)
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EROFS):
			return removed, destErr(err)
		}
	}
	return removed, nil
}

// unlinkBeneath removes rel below the directory destfd without following
// any link on the way: every directory down is opened
// O_DIRECTORY|O_NOFOLLOW relative to the one before, and the last name is
// unlinked in it.
func unlinkBeneath(destfd int, rel string, dir bool) error {
	parent, name := splitRel(rel)
	w := &dirWalker{root: destfd}
	defer w.close()
	fd, err := w.at(parent)
	if err != nil {
		return err
	}
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	return unix.Unlinkat(fd, name, flags)
}

// destErr marks an error of writing into the destination (a full disk, a
// read-only mount, no permission) so that it exits 73, not as a payload
// error.
func destErr(err error) error {
	if err == nil {
		return nil
	}
	var de *DestError
	if errors.As(err, &de) {
		return err
	}
	for _, errno := range []error{unix.ENOSPC, unix.EDQUOT, unix.EROFS, unix.EACCES, unix.EPERM} {
		if errors.Is(err, errno) {
			return &DestError{err}
		}
	}
	return err
}

// Interrupted reports whether dir is an install destination whose install
// did not finish.
func Interrupted(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, installingName))
	return err == nil
}

func describeLink(t string, err error) string {
	if err != nil {
		return "cannot be read: " + boundedread.BareErr(err).Error()
	}
	return "-> " + t
}

// InstallAnswering is Install after asking, through answers, whether the
// filesystems of src and dest answer in time: the copy would otherwise
// block on a dead mount. A destination that does not answer is a
// *DestError, as any destination that cannot be written. say, unless nil,
// gets a line at most every progress.Interval on how far the copy is.
func InstallAnswering(src, dest string, answers func(paths ...string) error, say func(string)) (*InstallResult, error) {
	if err := answers(src); err != nil {
		return nil, &Refusal{fmt.Errorf("payload %w", err)}
	}
	if err := answers(dest); err != nil {
		return nil, &DestError{fmt.Errorf("destination %w", err)}
	}
	r, err := install(src, dest, say)
	var de *DestError
	if err != nil && !errors.As(err, &de) {
		// Not the destination's fault: the payload is not what its
		// index says.
		err = &Refusal{err}
	}
	return r, err
}
