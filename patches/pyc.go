package patches

import (
	"encoding/binary"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/beneath"
	"github.com/infera/infera-exec/patches/patchdef"
)

// removeFile deletes cached bytecode; a variable so tests can make it fail.
var removeFile = os.Remove

// removePycs deletes the cached bytecode of a patched module. After a
// write every cache file goes; otherwise only unchecked-hash pycs (PEP 552
// flags = 0b01), which Python never revalidates and which would keep
// running the unpatched code after a start that died before this step.
// stuck names the ones that could not be removed (or, dry, would have to
// be) and would run instead of the source: unchecked-hash ones, and
// timestamp ones whose recorded mtime and size match the source's. The
// bytecode a pycache prefix keeps for the module (pp) is checked the same
// way (pycachePrefix.check); file is the edit's file, relative to the
// package.
func removePycs(pyFile, file string, all, dry bool, src onDisk, pp pycachePrefix) (removed, stuck []string) {
	if !strings.HasSuffix(pyFile, ".py") {
		return nil, nil
	}
	defer func() {
		r, s := pp.check(pyFile, file, all, dry, src)
		removed, stuck = append(removed, r...), append(stuck, s...)
	}()
	dir, base := filepath.Split(pyFile)
	matches, _ := filepath.Glob(filepath.Join(dir, "__pycache__", strings.TrimSuffix(base, ".py")+".*.pyc"))
	for _, m := range matches {
		flags, stamp, ok := pycHeader(m)
		unchecked := ok && flags == 0b01
		if !all && !unchecked {
			continue
		}
		if dry {
			if unchecked {
				stuck = append(stuck, m+" (unchecked-hash)")
			}
			continue
		}
		err := removeFile(m)
		if err == nil || errors.Is(err, iofs.ErrNotExist) {
			removed = append(removed, m)
			continue
		}
		switch {
		case unchecked:
			stuck = append(stuck, fmt.Sprintf("%s (unchecked-hash, never revalidated): %v", m, err))
		case ok && flags == 0 && src.verified && stamp == uint64(uint32(src.id.Mtime/1e9))|uint64(uint32(src.id.Size))<<32:
			stuck = append(stuck, fmt.Sprintf("%s (its mtime and size match the new source): %v", m, err))
		}
	}
	return removed, stuck
}

// pycHeader reads a .pyc's PEP 552 flags and, for a timestamp pyc, its
// source mtime (low 32 bits) and size (high 32 bits).
func pycHeader(pyc string) (flags uint32, stamp uint64, ok bool) {
	fd, err := unix.Open(pyc, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, 0, false // a FIFO or device named *.pyc is not bytecode
	}
	return pycHeaderFd(fd)
}

// pycHeaderFd is pycHeader of the regular file open at fd.
func pycHeaderFd(fd int) (flags uint32, stamp uint64, ok bool) {
	var hdr [16]byte
	n, err := unix.Pread(fd, hdr[:], 0)
	if err != nil || n < 8 {
		return 0, 0, false
	}
	if n == 16 {
		stamp = binary.LittleEndian.Uint64(hdr[8:16])
	}
	return binary.LittleEndian.Uint32(hdr[4:8]), stamp, true
}

// pycachePrefix is where the worker's interpreter keeps bytecode instead
// of __pycache__ (sys.pycache_prefix, the probe's answer): for a source
// file /d/n.py it reads Root + /d/n.<tag>.pyc (importlib's
// cache_from_source: the source's directory as the import system names
// it, made absolute, below the prefix). Root "" is none. PkgDir is the
// package directory as the import system names it (Package.Dir), which
// the edited file's path as imported begins with; the real path (links
// resolved) is looked at too. Owner is the uid the worker runs as
// (--user), whose bytecode and directories are as trusted as root's and
// infera-exec's own; -1 when it runs as infera-exec's.
type pycachePrefix struct {
	Root   string
	PkgDir string
	Owner  int
}

// sourceDirs are the directories the bytecode of the edited file real
// (file relative to the package) may be kept for: as imported, and as
// its real path names it.
func (pp pycachePrefix) sourceDirs(real, file string) []string {
	dirs := []string{filepath.Dir(real)}
	if pp.PkgDir != "" && file != "" {
		if d := filepath.Dir(filepath.Join(pp.PkgDir, file)); d != dirs[0] {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// check does for the prefix tree what removePycs does for __pycache__:
// the bytecode of pyFile (file relative to the package) kept there is
// removed when it could run instead of the source (after a write, all
// of it), and stuck names what could run instead of it and stays. The
// trust rules of a directory infera-exec writes in hold: every
// directory from / to the prefix is owned by root, infera-exec's uid or
// the worker's, and writable by nobody else unless sticky (as /tmp), a
// link on the way followed only when one of them owns it; below the
// prefix no link is followed (bytecode reached through one is looked at,
// never removed); the directory holding the bytecode is one nobody else
// can write (sticky or not: others could add a file); and a .pyc there
// is believed only when it is a regular file of one of those owners that
// nobody else can write; any other is removed, or, when it cannot be,
// stuck. A directory that does not exist holds no bytecode: the worker
// compiles the source.
func (pp pycachePrefix) check(pyFile, file string, all, dry bool, src onDisk) (removed, stuck []string) {
	if pp.Root == "" || !strings.HasSuffix(pyFile, ".py") {
		return nil, nil
	}
	stem := strings.TrimSuffix(filepath.Base(pyFile), ".py")
	for _, d := range pp.sourceDirs(pyFile, file) {
		r, s := pp.checkDir(d, stem, all, dry, src)
		removed, stuck = append(removed, r...), append(stuck, s...)
	}
	return removed, stuck
}

func (pp pycachePrefix) trusted(uid uint32) bool {
	return uid == 0 || uid == uint32(unix.Geteuid()) || pp.Owner >= 0 && uid == uint32(pp.Owner)
}

// checkDir checks the bytecode of stem kept for the source directory dir.
func (pp pycachePrefix) checkDir(dir, stem string, all, dry bool, src onDisk) (removed, stuck []string) {
	cache := filepath.Join(pp.Root, dir)
	fd, link, err := pp.walk(filepath.Clean(pp.Root), strings.TrimPrefix(filepath.Clean(dir), "/"))
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return nil, nil // no such directory: no bytecode the worker could load
	case err != nil:
		return nil, []string{fmt.Sprintf("%s (the bytecode cache prefix %s: %v: bytecode put there would run instead of the source; no start removes it)", cache, pp.Root, err)}
	case link != "":
		// The worker follows the link; this does not. Bytecode it would
		// load there is looked at, and stays.
		matches, _ := filepath.Glob(filepath.Join(cache, stem+".*.pyc"))
		for _, m := range matches {
			flags, stamp, ok := pycHeader(m)
			if why := pycShadows(flags, stamp, ok, src); why != "" {
				stuck = append(stuck, fmt.Sprintf("%s (%s; reached through the link %s, which is not followed: no start removes it)", m, why, link))
			}
		}
		return nil, stuck
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, []string{fmt.Sprintf("%s (cannot stat it: %v)", cache, err)}
	}
	if !pp.trusted(st.Uid) || st.Mode&0o022 != 0 {
		return nil, []string{fmt.Sprintf("%s (a bytecode cache directory owned by uid %d, mode %04o: others can put bytecode there that would run instead of the source; no start removes it)", cache, st.Uid, st.Mode&0o7777)}
	}
	names, err := beneath.Names(fd, cache)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s (cannot list it: %v)", cache, err)}
	}
	for _, n := range names {
		if ok, _ := filepath.Match(stem+".*.pyc", n); !ok {
			continue
		}
		m := filepath.Join(cache, n)
		why, mustGo := pp.judge(fd, n, src)
		if !all && !mustGo {
			continue
		}
		if dry {
			if mustGo {
				stuck = append(stuck, m+" ("+why+")")
			}
			continue
		}
		err := unix.Unlinkat(fd, n, 0)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			removed = append(removed, m)
		case why != "":
			stuck = append(stuck, fmt.Sprintf("%s (%s): %v", m, why, err))
		}
	}
	return removed, stuck
}

// judge says why the .pyc name in the directory fd could run instead of
// the source src ("" when it cannot: bytecode revalidated against the
// source, of a trusted owner). mustGo: it goes even when the source was
// not written (as unchecked-hash bytecode goes from __pycache__), being
// unchecked-hash or not believed (not a regular file of a trusted owner
// that nobody else can write); timestamp bytecode that matches the source
// goes only after a write, when everything goes.
func (pp pycachePrefix) judge(fd int, name string, src onDisk) (why string, mustGo bool) {
	f, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("not readable as a file: %v", err), true
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "not a regular file", true
	}
	if !pp.trusted(st.Uid) || st.Mode&0o022 != 0 {
		return fmt.Sprintf("owned by uid %d, mode %04o: not believed", st.Uid, st.Mode&0o7777), true
	}
	flags, stamp, ok := pycHeaderFd(f)
	return pycShadows(flags, stamp, ok, src), ok && flags == 0b01
}

// pycShadows says why bytecode with this PEP 552 header would run instead
// of the source src: unchecked-hash bytecode is never revalidated, and
// timestamp bytecode whose recorded mtime and size are the source's is
// taken as compiled from it. "" when it is revalidated and found stale.
func pycShadows(flags uint32, stamp uint64, ok bool, src onDisk) string {
	switch {
	case ok && flags == 0b01:
		return "unchecked-hash, never revalidated"
	case ok && flags == 0 && src.verified && stamp == uint64(uint32(src.id.Mtime/1e9))|uint64(uint32(src.id.Size))<<32:
		return "its mtime and size match the new source"
	}
	return ""
}

// walk opens root/rel's directory as the bytecode the worker loads is
// reached: from /, each directory on the way to root one that only
// trusted owners can change (owned by one, and not writable by others
// unless sticky), a link there followed only when a trusted owner owns
// it; below root, each directory judged the same way and no link
// followed: link names the first one met, and then fd is -1. The error
// wraps ENOENT or ENOTDIR when the directory does not exist.
func (pp pycachePrefix) walk(root, rel string) (fd int, link string, err error) {
	fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("cannot open /: %v", err)
	}
	split := func(p string) []string {
		var out []string
		for _, c := range strings.Split(p, "/") {
			if c != "" && c != "." {
				out = append(out, c)
			}
		}
		return out
	}
	above := split(root)
	below := split(rel)
	cur, links := "/", 0
	for len(above)+len(below) > 0 {
		inside := len(above) == 0
		var name string
		if inside {
			name, below = below[0], below[1:]
		} else {
			name, above = above[0], above[1:]
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, "", fmt.Errorf("cannot stat %s: %v", cur, err)
		}
		if !pp.trusted(st.Uid) || st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			unix.Close(fd)
			return -1, "", fmt.Errorf("%s on the way is owned by uid %d, mode %04o: others can change what is below it", cur, st.Uid, st.Mode&0o7777)
		}
		next := filepath.Join(cur, name)
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Close(fd)
			return -1, "", fmt.Errorf("%s: %w", next, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if inside {
				unix.Close(fd)
				return -1, next, nil
			}
			if !pp.trusted(st.Uid) {
				unix.Close(fd)
				return -1, "", fmt.Errorf("%s on the way is a symbolic link owned by uid %d", next, st.Uid)
			}
			if links++; links > 40 {
				unix.Close(fd)
				return -1, "", fmt.Errorf("too many symbolic links on the way to %s: %w", root, unix.ELOOP)
			}
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(fd, name, buf)
			unix.Close(fd)
			if err != nil {
				return -1, "", fmt.Errorf("cannot read the link %s: %v", next, err)
			}
			target := string(buf[:n])
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			if fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
				return -1, "", fmt.Errorf("cannot open /: %v", err)
			}
			cur, above = "/", append(split(target), above...)
			continue
		}
		flags := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if len(above)+len(below) == 0 {
			flags = beneath.Flags // the last one is listed
		}
		nfd, err := unix.Openat(fd, name, flags, 0)
		unix.Close(fd)
		if err != nil {
			return -1, "", fmt.Errorf("%s: %w", next, err)
		}
		fd, cur = nfd, next
	}
	if cur == "/" {
		unix.Close(fd)
		return -1, "", fmt.Errorf("the bytecode cache prefix is /: %w", unix.ENOTDIR)
	}
	return fd, "", nil
}

// onDisk is what the patch knows of an edited file on disk: its identity,
// and whether that identity is known to be the content's (verified).
type onDisk struct {
	id       identity
	verified bool
}

// checkBytecode removes the cached bytecode that could run instead of the
// patched source (after a write: every .pyc of the module; otherwise the
// unchecked-hash ones) and makes the patch shadowed when some cannot be
// removed (plan.Bytecode: of gives each edited file's identity on disk).
// A dry run removes nothing: bytecode that would have to go makes the
// patch shadowed there, saying that a start removes it. prefix is where a
// pycache prefix keeps the module's bytecode instead of __pycache__,
// checked alike.
func checkBytecode(r *Result, of func(path string) (identity, bool), wrote, dry bool, prefix pycachePrefix) {
	var shadows []string
	for i := range r.Edits {
		e := &r.Edits[i]
		if e.State == patchdef.NotApplicable || e.Path == "" {
			continue
		}
		id, verified := of(e.Path)
		removed, stuck := removePycs(e.Path, e.File, wrote, dry, onDisk{id, verified}, prefix)
		e.PycsRemoved = removed
		shadows = append(shadows, stuck...)
	}
	if len(shadows) > 0 {
		r.State = patchdef.Shadowed
		if dry {
			r.Why = "stale bytecode would run instead of the patched source (a start removes it): " + strings.Join(shadows, "; ")
		} else {
			r.Why = "stale bytecode that could not be removed would run instead of the patched source: " + strings.Join(shadows, "; ")
		}
	}
}
