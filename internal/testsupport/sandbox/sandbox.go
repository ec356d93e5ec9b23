// Package sandbox runs a command the way a container runtime would start
// an entrypoint, using only Linux namespaces and util-linux unshare(1): a
// private mount table whose root is a fresh tmpfs with the host's
// directories bound in, a fresh /proc of a new PID namespace (the command is
// PID 1), fixtures bound at their real paths (/opt/rocm, /overlay,
// /host-libionic, ...), and optionally a read-only root, another user and a
// lowered open-file limit. Tests and `make demo` use it; infera-exec does
// not.
package sandbox

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/internal/statedir"
	"golang.org/x/sys/unix"
)

const innerMarker = "INFERA_SANDBOX_INNER"

// Spec is what the container looks like.
type Spec struct {
	Binds    []Bind
	Tmpfs    []string
	Noexec   map[string]bool   // tmpfs mounted noexec
	TmpSize  map[string]string // tmpfs size= option
	Overlays []string          // host directories made writable by an overlay, changes kept in memory
	ReadOnly bool
	FakeDev  bool    // /dev is a tmpfs with only the basic nodes, so fixtures can add /dev/infiniband
	User     *[2]int // uid, gid
	Nofile   *[2]uint64
	Cwd      string
	Command  []string
}

// Bind is a host path mounted at a container path.
type Bind struct {
	Src, Dst string
	RW       bool // stays writable under ReadOnly
	RO       bool // read-only even without ReadOnly
}

// Host directories that are not bound in: the container gets its own.
var own = map[string]bool{"proc": true, "dev": true, "run": true, "opt": true, "mnt": true, "lost+found": true, "tmp": true}

const usage = `usage: sandbox [flags] -- COMMAND [ARG...]
  -bind SRC:DST[:ro|:rw]  bind a host path at DST (repeatable)
  -tmpfs DST[:OPT,...]    fresh tmpfs at DST (repeatable); OPT: noexec, size=64m
  -overlay DST            DST (a host directory) writable, changes in a tmpfs (repeatable)
  -ro                     read-only root: every mount but :rw binds and -tmpfs
  -fakedev                /dev holds only null, zero, full, random, urandom, tty, pts, shm
  -user UID:GID           run COMMAND as this user
  -nofile SOFT[:HARD]     RLIMIT_NOFILE for COMMAND (HARD: keep the current one)
  -cwd DIR                working directory of COMMAND (default /)
`

// Main is the sandbox command.
func Main() int {
	spec, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox: %v\n%s", err, usage)
		return 2
	}
	if os.Getenv(innerMarker) == "" {
		return outer()
	}
	os.Unsetenv(innerMarker)
	if err := inner(spec); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox: %v\n", err)
		return 125
	}
	return 0 // not reached: inner execs
}

func parse(args []string) (*Spec, error) {
	s := &Spec{Cwd: "/"}
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	fs.Func("bind", "", func(v string) error {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !filepath.IsAbs(parts[1]) {
			return fmt.Errorf("-bind %q: want SRC:/DST[:ro|:rw]", v)
		}
		b := Bind{Src: parts[0], Dst: filepath.Clean(parts[1])}
		if len(parts) == 3 {
			switch parts[2] {
			case "ro":
				b.RO = true
			case "rw":
				b.RW = true
			default:
				return fmt.Errorf("-bind %q: mode must be ro or rw", v)
			}
		}
		s.Binds = append(s.Binds, b)
		return nil
	})
	fs.Func("tmpfs", "", func(v string) error {
		dst, opts, _ := strings.Cut(v, ":")
		if !filepath.IsAbs(dst) {
			return fmt.Errorf("-tmpfs %q: want /DST[:noexec,size=N]", v)
		}
		dst = filepath.Clean(dst)
		s.Tmpfs = append(s.Tmpfs, dst)
		for _, o := range strings.Split(opts, ",") {
			switch {
			case o == "":
			case o == "noexec":
				if s.Noexec == nil {
					s.Noexec = map[string]bool{}
				}
				s.Noexec[dst] = true
			case strings.HasPrefix(o, "size="):
				if s.TmpSize == nil {
					s.TmpSize = map[string]string{}
				}
				s.TmpSize[dst] = o
			default:
				return fmt.Errorf("-tmpfs %q: option %q is not noexec or size=N", v, o)
			}
		}
		return nil
	})
	fs.Func("overlay", "", func(v string) error {
		if !filepath.IsAbs(v) {
			return fmt.Errorf("-overlay %q: want an absolute path", v)
		}
		s.Overlays = append(s.Overlays, filepath.Clean(v))
		return nil
	})
	fs.BoolVar(&s.ReadOnly, "ro", false, "")
	fs.BoolVar(&s.FakeDev, "fakedev", false, "")
	fs.Func("user", "", func(v string) error {
		u, g, ok := strings.Cut(v, ":")
		uid, err1 := strconv.Atoi(u)
		gid, err2 := strconv.Atoi(g)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("-user %q: want UID:GID", v)
		}
		s.User = &[2]int{uid, gid}
		return nil
	})
	fs.Func("nofile", "", func(v string) error {
		a, b, ok := strings.Cut(v, ":")
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err != nil {
			return err
		}
		if !ok {
			b = strconv.FormatUint(cur.Max, 10) // keep the hard limit
		}
		soft, err1 := strconv.ParseUint(a, 10, 64)
		hard, err2 := strconv.ParseUint(b, 10, 64)
		if err1 != nil || err2 != nil || soft > hard {
			return fmt.Errorf("-nofile %q: want SOFT[:HARD] with SOFT <= HARD", v)
		}
		s.Nofile = &[2]uint64{soft, hard}
		return nil
	})
	fs.StringVar(&s.Cwd, "cwd", "/", "")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	s.Command = fs.Args()
	if len(s.Command) == 0 {
		return nil, errors.New("no command")
	}
	return s, nil
}

// outer re-runs this program inside new mount and PID namespaces. unshare
// forks, so the re-run program is PID 1 of the new namespace; it then execs
// the command, which stays PID 1.
func outer() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox: %v\n", err)
		return 125
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox: unshare(1) from util-linux is needed: %v\n", err)
		return 125
	}
	args := []string{"unshare", "--mount", "--pid", "--fork", "--propagation", "private"}
	if os.Geteuid() != 0 {
		args = append(args, "--user", "--map-root-user")
	}
	args = append(args, "--", self)
	args = append(args, os.Args[1:]...)
	env := append(os.Environ(), innerMarker+"=1")
	err = syscall.Exec(unshare, args, env)
	fmt.Fprintf(os.Stderr, "sandbox: exec %s: %v\n", unshare, err)
	return 125
}

func inner(s *Spec) error {
	root := "/mnt"
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		if root, err = os.MkdirTemp("", "sandbox-root-"); err != nil {
			return err
		}
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", root, err)
	}
	// Mount points to make read-only at the end, container paths.
	var mounts []string
	overridden := map[string]bool{}
	for _, b := range s.Binds {
		overridden[b.Dst] = true
	}
	for _, t := range s.Tmpfs {
		overridden[t] = true
	}

	skipRoot := func(name string) bool { return own[name] || overridden["/"+name] }
	if err := mirror("/", root, skipRoot, false, &mounts); err != nil {
		return err
	}
	if !overridden["/tmp"] {
		if err := containerTmp(filepath.Join(root, "tmp"), &mounts); err != nil {
			return err
		}
	}
	for _, d := range []string{"dev", "run", "opt", "proc"} {
		if overridden["/"+d] {
			continue
		}
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	switch {
	case overridden["/dev"]:
	case s.FakeDev:
		if err := fakeDev(filepath.Join(root, "dev")); err != nil {
			return err
		}
	default:
		if err := unix.Mount("/dev", filepath.Join(root, "dev"), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind /dev: %w", err)
		}
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount proc: %w", err)
	}
	for _, d := range []string{"/run", "/opt"} {
		if overridden[d] {
			continue
		}
		if err := unix.Mount("tmpfs", filepath.Join(root, d), "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", d, err)
		}
		mounts = append(mounts, d)
	}

	// Fixtures, shortest destination first so that /opt/rocm goes onto a
	// fresh /opt and a file bind goes into an already bound directory.
	type fixture struct {
		dst   string
		bind  *Bind
		tmpfs bool
	}
	var fx []fixture
	for i := range s.Binds {
		fx = append(fx, fixture{dst: s.Binds[i].Dst, bind: &s.Binds[i]})
	}
	for _, t := range s.Tmpfs {
		fx = append(fx, fixture{dst: t, tmpfs: true})
	}
	sortByDepth(fx, func(f fixture) string { return f.dst })
	rw := map[string]bool{}
	for _, f := range fx {
		target := filepath.Join(root, f.dst)
		if f.tmpfs {
			if err := mkdirInside(root, f.dst, true); err != nil {
				return err
			}
			var flags uintptr
			if s.Noexec[f.dst] {
				flags |= unix.MS_NOEXEC
			}
			data := "mode=1777"
			if sz := s.TmpSize[f.dst]; sz != "" {
				data += "," + sz
			}
			if err := unix.Mount("tmpfs", target, "tmpfs", flags, data); err != nil {
				return fmt.Errorf("mount tmpfs on %s: %w", f.dst, err)
			}
			rw[f.dst] = true
			continue
		}
		fi, err := os.Stat(f.bind.Src)
		if err != nil {
			return fmt.Errorf("-bind source: %w", err)
		}
		if err := mkdirInside(root, f.dst, fi.IsDir()); err != nil {
			return err
		}
		if err := bindMount(f.bind.Src, target, true); err != nil {
			return err
		}
		switch {
		case f.bind.RO:
			if err := remountRO(target); err != nil {
				return err
			}
		case f.bind.RW:
			rw[f.dst] = true
		default:
			mounts = append(mounts, f.dst)
		}
	}

	// Overlays after the binds, so an overlay can sit on a bound fixture
	// too: reads see the directory, writes go to a tmpfs and vanish with
	// the sandbox.
	for i, o := range s.Overlays {
		scratch := filepath.Join(root, fmt.Sprintf(".overlay-%d", i))
		if err := os.MkdirAll(scratch, 0o700); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", scratch, "tmpfs", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount tmpfs for overlay %s: %w", o, err)
		}
		for _, d := range []string{"upper", "work"} {
			if err := os.Mkdir(filepath.Join(scratch, d), 0o755); err != nil {
				return err
			}
		}
		target := filepath.Join(root, o)
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", target, scratch, scratch)
		if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
			return fmt.Errorf("mount overlay on %s: %w", o, err)
		}
		rw[o] = true
	}

	if s.ReadOnly {
		if err := remountRO(root); err != nil {
			return err
		}
		for _, m := range mounts {
			if rw[m] {
				continue
			}
			if err := remountRO(filepath.Join(root, m)); err != nil {
				return err
			}
		}
	}

	if err := unix.Chroot(root); err != nil {
		return fmt.Errorf("chroot %s: %w", root, err)
	}
	if err := os.Chdir(s.Cwd); err != nil {
		return err
	}
	if s.Nofile != nil {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: s.Nofile[0], Max: s.Nofile[1]}); err != nil {
			return fmt.Errorf("setrlimit NOFILE %v: %w", *s.Nofile, err)
		}
	}
	if s.User != nil {
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(s.User[1]); err != nil {
			return fmt.Errorf("setgid %d: %w", s.User[1], err)
		}
		if err := syscall.Setuid(s.User[0]); err != nil {
			return fmt.Errorf("setuid %d: %w", s.User[0], err)
		}
	}
	path, err := exec.LookPath(s.Command[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, s.Command, os.Environ())
}

// containerTmp makes dir the container's own /tmp: a fresh tmpfs holding
// the host's /tmp entries, each bound in (tests keep their work
// directories and binaries there), except infera-exec's own state
// directories there (statedir.Defaults): a host that ever ran infera-exec
// has one, owned by whoever ran it, and a container starts without it.
// The tmpfs and each bind join mounts, which a read-only root remounts
// read-only.
func containerTmp(dir string, mounts *[]string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=1777"); err != nil {
		return fmt.Errorf("mount tmpfs on /tmp: %w", err)
	}
	*mounts = append(*mounts, "/tmp")
	hidden := func(name string) bool {
		return slices.Contains(statedir.Defaults, filepath.Join("/tmp", name))
	}
	return mirror("/tmp", dir, hidden, true, mounts)
}

// mirror recreates the entries of hostDir in dir, except those skip
// names: symlinks as symlinks with the same text, directories (and, with
// files, regular files) bound in, each bind appended to mounts. Sockets,
// FIFOs and devices are left out.
func mirror(hostDir, dir string, skip func(name string) bool, files bool, mounts *[]string) error {
	entries, err := os.ReadDir(hostDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if skip(name) {
			continue
		}
		host, target := filepath.Join(hostDir, name), filepath.Join(dir, name)
		switch t := e.Type(); {
		case t&os.ModeSymlink != 0:
			// A link of a shared directory (/tmp) may be gone, or no
			// longer a link, since it was listed.
			if err := copySymlink(host, target); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.EINVAL) {
				return err
			}
			continue
		case t.IsDir():
			err = os.Mkdir(target, 0o755)
		case files && t.IsRegular():
			err = os.WriteFile(target, nil, 0o644)
		default:
			continue
		}
		if err != nil {
			return err
		}
		if err := bindMount(host, target, true); err != nil {
			// An entry of a directory others share (/tmp: a compiler's
			// temporary file) that went away, or changed from a
			// directory to a file, since it was listed.
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				os.Remove(target)
				continue
			}
			return err
		}
		*mounts = append(*mounts, host)
	}
	return nil
}

// copySymlink makes target a symlink with host's text, so it resolves
// inside the container as it does on the host.
func copySymlink(host, target string) error {
	link, err := os.Readlink(host)
	if err != nil {
		return err
	}
	return os.Symlink(link, target)
}

// fakeDev makes dir a tmpfs holding the device nodes every program needs,
// bound from the host's /dev (mknod is not allowed in a user namespace).
func fakeDev(dir string) error {
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs on /dev: %w", err)
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		f, err := os.OpenFile(filepath.Join(dir, n), os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := bindMount("/dev/"+n, filepath.Join(dir, n), false); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
		if err := bindMount("/dev/"+d, filepath.Join(dir, d), true); err != nil {
			return err
		}
	}
	return nil
}

// mkdirInside creates dst (a directory, or an empty file for a file bind)
// under root, but only where that writes into the sandbox's own tmpfs:
// creating a mount point inside a bound host directory would change the
// host.
func mkdirInside(root, dst string, dir bool) error {
	target := filepath.Join(root, dst)
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	existing := filepath.Dir(target)
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		existing = filepath.Dir(existing)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(existing, &st); err != nil {
		return err
	}
	if st.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("%s does not exist in the sandbox and %s is a host directory; add -tmpfs for a parent of it", dst, strings.TrimPrefix(existing, root))
	}
	if dir {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func bindMount(src, dst string, recursive bool) error {
	flags := uintptr(unix.MS_BIND)
	if recursive {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(src, dst, "", flags, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", src, dst, err)
	}
	return nil
}

func remountRO(target string) error {
	// A bind remount keeps the flags the kernel locks for an unprivileged
	// user namespace; read them and add MS_RDONLY.
	var stf unix.Statfs_t
	if err := unix.Statfs(target, &stf); err != nil {
		return err
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY)
	for st, ms := range map[int64]uintptr{unix.ST_NOSUID: unix.MS_NOSUID, unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC, unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_RELATIME: unix.MS_RELATIME} {
		if st&int64(stf.Flags) != 0 {
			flags |= ms
		}
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", target, err)
	}
	return nil
}

func sortByDepth[T any](xs []T, key func(T) string) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && strings.Count(key(xs[j]), "/") < strings.Count(key(xs[j-1]), "/"); j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}
