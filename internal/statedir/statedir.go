// Package statedir answers where infera-exec keeps its own files (the
// package probe's cached answer, the report, a provider directory when the
// library directory is read-only) and whether a directory may be one of
// them. They live in the container's own filesystem, so they are exactly
// as old as the files they describe.
//
// infera-exec runs as root; /tmp and /dev/shm are shared with every other
// process of the pod. A directory someone else made, or can write, could
// hold a planted library or a link that redirects a root write, so every
// directory infera-exec writes into or hands to the loader goes through
// Dir first.
package statedir

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/beneath"
)

// Defaults are tried in order: /run is a tmpfs on most hosts and in most
// pods; /tmp is writable for a non-root user.
var Defaults = []string{"/run/infera-exec", "/tmp/infera-exec"}

// Candidates are the directories to try: the one the operator named, or
// the defaults.
func Candidates(explicit string) []string {
	if explicit != "" {
		return []string{explicit}
	}
	return Defaults
}

// Pick returns the first candidate that Dir accepts and that this process
// can write, or "" when none is; refused says why each candidate was
// not used, naming the path (and its owner when that was the reason).
// A candidate that is a volume of this uid mounted open to others is
// claimed first (see Claim); claimed says what that changed.
func Pick(explicit string) (dir string, claimed []string, refused []error) {
	for _, d := range Candidates(explicit) {
		claimed = append(claimed, Claim(d)...)
		if err := Dir(d); err != nil {
			refused = append(refused, err)
			continue
		}
		if err := unix.Access(d, unix.W_OK|unix.X_OK); err != nil {
			refused = append(refused, &Error{d, fmt.Sprintf("not writable: %v", err), false})
			continue
		}
		return d, claimed, refused
	}
	return "", claimed, refused
}

// Claim makes path infera-exec's own when it is a volume mounted there
// (its mount is not its parent's), owned by this uid, that group or
// others can write: a Kubernetes emptyDir is mode 0777, and one kept as
// the state directory carries the probe cache and the record across the
// container's restarts. The group and other write bits are cleared
// first, so that nobody else can add to it, and then everything in it
// that another uid owns (planted while it was open) is removed, with
// everything below it, from the directory's descriptor without following
// a link; it returns one line for each change. Anything else is left as
// it is, for Dir to judge: a directory that is not a mount of its own (a
// directory made open on purpose), another uid's, or one below a parent
// someone else could change.
func Claim(path string) []string {
	path = filepath.Clean(path)
	var st unix.Stat_t
	if !filepath.IsAbs(path) || path == "/" || unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o022 == 0 {
		return nil // the usual case, at one stat: nothing to claim (what is there is judged from descriptors below)
	}
	pfd, err := openSafe(filepath.Dir(path))
	if err != nil {
		return nil
	}
	defer unix.Close(pfd)
	fd, err := beneath.OpenAt(pfd, filepath.Base(path))
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	euid := uint32(unix.Geteuid())
	if unix.Fstat(fd, &st) != nil || st.Uid != euid || st.Mode&0o022 == 0 || !mountRoot(fd, pfd, &st) {
		return nil
	}
	mode := st.Mode & 0o7777 &^ 0o022
	if err := unix.Fchmod(fd, mode); err != nil {
		return nil
	}
	out := []string{fmt.Sprintf("state directory %s (a volume of uid %d mounted there) could be written by group or others (mode %04o); made it %04o, so that only uid %d can change it",
		path, euid, st.Mode&0o7777, mode, euid)}
	names, err := beneath.Names(fd, path)
	if err != nil {
		return out
	}
	for _, n := range names {
		var est unix.Stat_t
		if unix.Fstatat(fd, n, &est, unix.AT_SYMLINK_NOFOLLOW) != nil || est.Uid == euid {
			continue
		}
		if err := beneath.RemoveAll(fd, n, st.Dev); err != nil {
			out = append(out, fmt.Sprintf("state directory %s: cannot remove %s, owned by uid %d: %v", path, n, est.Uid, err))
			continue
		}
		out = append(out, fmt.Sprintf("state directory %s: removed %s, owned by uid %d, not by uid %d that infera-exec runs as", path, n, est.Uid, euid))
	}
	return out
}

// mountRoot reports whether the directory open at fd is the root of a
// mount other than that of its parent, open at pfd: by mount ID where
// the kernel gives one (statx, Linux 5.8), else by device number.
func mountRoot(fd, pfd int, st *unix.Stat_t) bool {
	var a, b unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &a) == nil && unix.Statx(pfd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &b) == nil &&
		a.Mask&unix.STATX_MNT_ID != 0 && b.Mask&unix.STATX_MNT_ID != 0 {
		return a.Mnt_id != b.Mnt_id
	}
	var pst unix.Stat_t
	return unix.Fstat(pfd, &pst) == nil && pst.Dev != st.Dev
}

// Sub is dir/name for every candidate, e.g. the report file or the
// fallback provider directory in each.
func Sub(explicit, name string) []string {
	var out []string
	for _, d := range Candidates(explicit) {
		out = append(out, filepath.Join(d, name))
	}
	return out
}

// Error is a directory that must not be used, and why. Unsafe is set
// when the directory exists but is not safely ours (a link, another
// owner, writable by others): that is worth a warning, whereas a
// read-only /run is ordinary.
type Error struct {
	Path   string
	Why    string
	Unsafe bool
}

// Unsafe reports whether err refuses a directory that exists but is not
// safely infera-exec's own.
func Unsafe(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Unsafe
}

func (e *Error) Error() string { return e.Path + ": " + e.Why + "; not using it" }

// maxLinks bounds the symbolic links followed on the way to a directory,
// as the kernel's own limit does (ELOOP).
const maxLinks = 40

// openSafe opens dir, a directory that will hold infera-exec's own, by
// walking its path from / one component at a time without following links
// implicitly: a link is followed only when root or this uid owns it (as
// /var/run -> /run), and every directory on the way must be one nobody
// else can change: owned by root or this uid, and not writable by others
// unless sticky (as /tmp). Otherwise the owner of a link or of a parent
// could steer where infera-exec writes, or rename a checked directory
// away and put their own in its place. The error is ENOENT (wrapped) when
// a component does not exist.
func openSafe(dir string) (int, error) { return walkSafe(dir, true) }

// walkSafe is openSafe; checkLast false leaves dir itself to the caller,
// which judges it by a rule of its own (Guarded).
func walkSafe(dir string, checkLast bool) (int, error) {
	euid := uint32(unix.Geteuid())
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("cannot open /: %v", err)
	}
	cur, rest, links := "/", strings.Split(strings.TrimPrefix(filepath.Clean(dir), "/"), "/"), 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if err := checkDir(fd, cur, euid); err != nil {
			unix.Close(fd)
			return -1, err
		}
		next := filepath.Join(cur, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("cannot stat %s: %w", next, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if st.Uid != 0 && st.Uid != euid {
				unix.Close(fd)
				return -1, fmt.Errorf("%s on the way is a symbolic link owned by uid %d", next, st.Uid)
			}
			if links++; links > maxLinks {
				unix.Close(fd)
				return -1, fmt.Errorf("too many symbolic links on the way to %s", dir)
			}
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(fd, name, buf)
			if err != nil {
				unix.Close(fd)
				return -1, fmt.Errorf("cannot read the link %s: %v", next, err)
			}
			target := string(buf[:n])
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			// Start again from / along the link's target, then the rest.
			unix.Close(fd)
			if fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
				return -1, fmt.Errorf("cannot open /: %v", err)
			}
			cur = "/"
			rest = append(strings.Split(strings.TrimPrefix(filepath.Clean(target), "/"), "/"), rest...)
			continue
		}
		nfd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("cannot open %s: %w", next, err)
		}
		fd, cur = nfd, next
	}
	if !checkLast {
		return fd, nil
	}
	if err := checkDir(fd, cur, euid); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// OpenParents opens dir as openSafe does (an O_PATH descriptor): every
// directory on the way from / one that nobody but root and this uid can
// change (a sticky one, as /tmp, only when what is reached below it is
// root's or this uid's), and a link followed only when root or this uid
// owns it. For a caller that makes a directory of its own below dir
// (--install), whose owner or mode it then judges itself; the error
// names the path, its owner and its mode, and is ENOENT (wrapped) when a
// component does not exist.
func OpenParents(dir string) (int, error) { return openSafe(dir) }

// Guarded says whether nobody but root and this uid can change what dir
// holds, for a directory infera-exec does not write but hands to the
// worker and the loader (the payload root): dir itself owned by root or
// this uid and writable by nobody else, sticky or not (a group or others
// who can write it can add a tree it lacks), reached as openSafe reaches
// a state directory (every directory on the way owned by root or this uid
// and not writable by others unless sticky, no link of another uid on
// the way). nil when so; else an *Error naming the path at fault, Unsafe
// unless dir merely does not exist or cannot be searched.
func Guarded(dir string) error {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		return &Error{dir, "not an absolute path", false}
	}
	fd, err := walkSafe(dir, false)
	if err != nil {
		return &Error{dir, err.Error(), !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EACCES)}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &Error{dir, fmt.Sprintf("cannot stat it: %v", err), false}
	}
	if why := OwnProblem(st.Uid, st.Mode, uint32(unix.Geteuid()), true); why != "" {
		return &Error{dir, why, true}
	}
	return nil
}

// Reason is the error without the state directory's "not using it": the
// path and why.
func (e *Error) Reason() string { return e.Path + ": " + e.Why }

// checkDir refuses a directory on the way that someone other than root or
// this uid could change.
func checkDir(fd int, path string, euid uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("cannot stat its parent %s: %v", path, err)
	}
	if why := AncestorProblem(st.Uid, st.Mode, euid); why != "" {
		return fmt.Errorf("its parent %s %s", path, why)
	}
	return nil
}

// AncestorProblem says why a directory on the way to one infera-exec
// relies on, owned by uid with mode (st_mode bits), lets someone other
// than root or euid change what is below it; "" when nobody else can.
// Its owner can rename any entry; a group or others who can write it can
// too, unless it is sticky (as /tmp): then the kernel lets only an
// entry's owner (or the directory's) rename or remove it, so the entries
// of root and euid stay put.
func AncestorProblem(uid, mode, euid uint32) string {
	if uid != 0 && uid != euid {
		return fmt.Sprintf("is owned by uid %d", uid)
	}
	if mode&0o022 != 0 && mode&unix.S_ISVTX == 0 {
		return fmt.Sprintf("(owner uid %d, mode %04o) can be written by others and is not sticky", uid, mode&0o7777)
	}
	return ""
}

// OwnProblem says why a directory or file infera-exec keeps or believes,
// owned by uid with mode, could be changed by someone other than euid
// (or root, when rootToo: a file root wrote is as trusted as one of
// euid's); "" when nobody else can. Sticky or not, a group or others who
// can write a directory can add to it, and a file they can write they
// can rewrite.
func OwnProblem(uid, mode, euid uint32, rootToo bool) string {
	if uid != euid && !(rootToo && uid == 0) {
		return fmt.Sprintf("is owned by uid %d, not by uid %d that infera-exec runs as", uid, euid)
	}
	if mode&0o022 != 0 {
		return fmt.Sprintf("can be written by group or others (mode %04o)", mode&0o7777)
	}
	return ""
}

// Dir makes path one of infera-exec's own directories, or says why it
// cannot be. A missing directory (and missing parents) is created with
// mkdirat, which never follows a link at the name; then the name is
// opened O_DIRECTORY|O_NOFOLLOW and fstat must show a real directory
// owned by the effective uid and writable by nobody else, below parents
// reached without following a link another uid owns and that nobody else
// can rename it out of (openSafe). Anything else (a link, a directory
// made first by another uid, a group- or world-writable one) is refused:
// the caller skips it with a warning.
func Dir(path string) error {
	path = filepath.Clean(path)
	if !filepath.IsAbs(path) {
		return &Error{path, "not an absolute path", false}
	}
	if path == "/" {
		return &Error{path, "the root directory", false}
	}
	parent, name := filepath.Dir(path), filepath.Base(path)
	pfd, err := openSafe(parent)
	if errors.Is(err, unix.ENOENT) {
		if err := Dir(parent); err != nil {
			var e *Error
			if errors.As(err, &e) {
				return &Error{path, e.Path + ": " + e.Why, e.Unsafe}
			}
			return err
		}
		pfd, err = openSafe(parent)
	}
	if err != nil {
		return &Error{path, err.Error(), !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EACCES)}
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return &Error{path, fmt.Sprintf("cannot create it: %v", err), false}
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return &Error{path, "is a symbolic link", true}
	case errors.Is(err, unix.ENOTDIR):
		var lst unix.Stat_t
		if unix.Fstatat(pfd, name, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil && lst.Mode&unix.S_IFMT == unix.S_IFLNK {
			return &Error{path, fmt.Sprintf("is a symbolic link (owner uid %d)", lst.Uid), true}
		}
		return &Error{path, "is not a directory", true}
	case err != nil:
		return &Error{path, fmt.Sprintf("cannot open it: %v", err), false}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &Error{path, fmt.Sprintf("cannot stat it: %v", err), false}
	}
	if why := OwnProblem(st.Uid, st.Mode, uint32(unix.Geteuid()), false); why != "" {
		return &Error{path, why, true}
	}
	return nil
}

// Choose is Pick for a start: a candidate refused as unsafe is a warning
// (someone else's directory where ours should be), one merely unusable a
// debug line; without a directory, why says why none was taken.
func Choose(explicit string, log *slog.Logger) (dir, why string) {
	dir, claimed, refused := Pick(explicit)
	for _, c := range claimed {
		log.Info(c)
	}
	var whys []string
	for _, err := range refused {
		if Unsafe(err) {
			log.Warn("state directory " + err.Error())
		} else {
			log.Debug("state directory " + err.Error())
		}
		whys = append(whys, err.Error())
	}
	if dir != "" {
		for _, n := range Sweep(dir) {
			log.Debug("state directory: removed " + n + ", left by a start that was killed while writing it")
		}
		return dir, ""
	}
	return "", strings.Join(whys, "; ")
}

// ProviderDirs are where the host RDMA provider may go when the library
// directory is read-only: rdma/ in the state directory the run picked,
// then in every other candidate (the provider's directory must not be
// mounted noexec, which the picked one may be), then a directory in
// /dev/shm.
func ProviderDirs(picked, explicit string) []string {
	var out []string
	if picked != "" {
		out = append(out, filepath.Join(picked, "rdma"))
	}
	for _, d := range Sub(explicit, "rdma") {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return append(out, "/dev/shm/infera-exec-rdma")
}
