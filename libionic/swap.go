package libionic

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/digest"
	"github.com/infera/infera-exec/internal/elfload"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/rdma"
	"github.com/infera/infera-exec/internal/statedir"
)

// Options say what to swap and where.
type Options struct {
	Host         string          // the host build, /host-libionic/libionic.so
	Name         string          // provider name: ionic
	Root         string          // the container's root: "/" except in tests
	RDMA         *rdma.Inventory // the run's RDMA devices (rdma.Read): the kernel ABIs the provider must speak
	FallbackDirs []string        // writable places for the read-only route, in order
	DryRun       bool            // decide, change nothing
	Explicit     bool            // Host was set by the operator: its absence is a warning (a typo in the mount path)
	// Sysfs is read for the inventory when RDMA is nil (Run); Answers,
	// when set, says whether the filesystems of paths answer in time.
	Sysfs   string
	Answers func(paths ...string) error
}

// State is what became of the host provider.
type State string

const (
	NotMounted State = "not-mounted" // no host build: the container's provider is used
	Unanswered State = "unanswered"  // the host mount or sysfs did not answer in time
	Refused    State = "refused"     // the host build would not load, or is not safe to install
	Unchanged  State = "unchanged"   // the host build is in place already
	Replaced   State = "replaced"    // the host build replaced the container's provider
	Fallback   State = "fallback"    // installed in a writable directory, loaded through RDMAV_DRIVERS
	NoRoute    State = "no-route"    // nowhere to install it
	Planned    State = "planned"     // --explain: what a start would do
)

// ABIRange is the kernel uverbs ABI range a provider build accepts.
type ABIRange struct {
	Min uint32 `json:"min"`
	Max uint32 `json:"max"`
}

func (r *ABIRange) String() string {
	if r == nil {
		return "unknown"
	}
	return fmt.Sprintf("%d to %d", r.Min, r.Max)
}

func (r *ABIRange) covers(abi int) bool { return r != nil && abi >= int(r.Min) && abi <= int(r.Max) }

// Result is what the swap found and did.
type Result struct {
	State        State             `json:"state"`
	Route        string            `json:"route,omitempty"`
	Summary      string            `json:"summary"`
	brief        string            // Summary in a few words for the text line, when shorter (Brief)
	noteBriefs   map[int]string    // likewise for Notes, by index
	Host         string            `json:"host"`
	HostSHA256   string            `json:"host_sha256,omitempty"`
	HostABI      *ABIRange         `json:"host_abi_range,omitempty"`
	ContainerABI *ABIRange         `json:"container_abi_range,omitempty"`
	Kernel       []rdma.Uverbs     `json:"kernel,omitempty"`
	Container    *Container        `json:"container,omitempty"`
	Checks       []elfload.Check   `json:"checks,omitempty"`
	Replaced     []string          `json:"replaced,omitempty"`
	Created      []string          `json:"created,omitempty"`
	Backups      []string          `json:"backups,omitempty"`
	Env          map[string]string `json:"env,omitempty"` // variables the worker must get
	Notes        []string          `json:"notes,omitempty"`
	Warnings     []string          `json:"warnings,omitempty"` // places refused as unsafe (not ours), logged as warnings
}

// Swap puts the host build in place of the container's provider. It
// never fails the start: a host build that would not load is refused
// (the container keeps its own provider), and when nothing can be written
// the result says so.
func Swap(ctx context.Context, o Options) *Result {
	r := &Result{Host: o.Host}
	root := o.Root
	if root == "" {
		root = "/"
	}
	fi, err := os.Lstat(in(root, o.Host))
	if errors.Is(err, os.ErrNotExist) {
		r.State, r.Summary = NotMounted, o.Host+" is not present; the container's provider is used"
		return r
	}
	if err == nil && fi.IsDir() {
		r.State, r.Summary = Refused, o.Host+" is a directory, not the provider library; mount the file itself"
		return r
	}

	c, ref, err := Discover(root, o.Name)
	r.Container = c
	if o.RDMA != nil {
		r.Kernel = o.RDMA.Uverbs
	}
	if err != nil {
		r.State, r.Summary = Refused, err.Error()
		if msg, _ := logging.ErrorRecord(err); msg != r.Summary {
			r.brief = msg
		}
		return r
	}
	// The host file is read once; every check below is made on that copy
	// and that copy is what gets installed, so swapping the host file
	// between the check and the copy changes nothing.
	data, host, err := readHost(in(root, o.Host))
	if err != nil {
		r.State = Refused
		r.Checks = append(r.Checks, elfload.Check{Name: "elf", Detail: err.Error()})
		r.Summary = fmt.Sprintf("host build not used: %v; keeping the container's provider", err)
		return r
	}
	var libDirs []string
	for _, d := range c.LibDirs {
		libDirs = append(libDirs, in(root, d))
	}
	checks, ok := elfload.Verify(host, elfload.Target{Like: ref, Soname: "lib" + o.Name + ".so.1", LibDirs: libDirs, Label: "host build"})
	r.Checks = append(r.Checks, checks...)
	if lo, hi, ok := elfload.ProviderABIRange(host, o.Name); ok {
		r.HostABI = &ABIRange{lo, hi}
	}
	if len(c.ProviderChain) > 0 {
		if obj, err := elfload.Read(in(root, c.ProviderChain[len(c.ProviderChain)-1])); err == nil {
			if lo, hi, ok := elfload.ProviderABIRange(obj, o.Name); ok {
				r.ContainerABI = &ABIRange{lo, hi}
			}
		}
	}
	for _, k := range r.Kernel {
		if r.HostABI != nil && !r.HostABI.covers(k.ABI) {
			r.Notes = append(r.Notes, fmt.Sprintf("the host build supports kernel ABI %s but %s (%s) speaks %d", r.HostABI, k.Name, k.IBDev, k.ABI))
		}
	}
	if !ok {
		var failed []string
		for _, ch := range checks {
			if !ch.OK {
				failed = append(failed, ch.Detail)
			}
		}
		r.State = Refused
		r.Summary = fmt.Sprintf("host build %s would not load in this container (%s); keeping the container's provider", o.Host, strings.Join(failed, "; "))
		var names []string
		for _, ch := range checks {
			if !ch.OK {
				names = append(names, ch.Name)
			}
		}
		r.brief = fmt.Sprintf("host build %s would not load in this container (failed: %s); keeping the container's provider", o.Host, strings.Join(names, ", "))
		return r
	}
	r.HostSHA256 = digest.Bytes(data)

	if c.DriverFile != "" && len(c.SonameChain) > 0 && len(c.ProviderChain) > 0 && c.ProviderSHA256 == r.HostSHA256 && allSame(root, c.Files, r.HostSHA256) {
		r.State, r.Route = Unchanged, "in-place"
		r.Summary = fmt.Sprintf("the container's provider %s is already the host build", c.ProviderLink)
		return r
	}
	if o.DryRun {
		if dir := firstUnwritable(root, c); dir == "" {
			r.State, r.Route = Planned, "in-place"
			r.Summary = fmt.Sprintf("would replace %s with the host build", describeTargets(c))
		} else if d, why := pickFallback(root, o.FallbackDirs, r); d != "" {
			r.State, r.Route = Planned, "rdmav-drivers"
			r.Summary = fmt.Sprintf("%s is not writable; would copy the host build to %s and set RDMAV_DRIVERS", dir, d)
		} else {
			r.State = NoRoute
			r.Summary = fmt.Sprintf("%s is not writable and no fallback directory is usable (%s)", dir, why)
		}
		return r
	}

	err = inPlace(ctx, root, o.Name, c, data, r)
	if err == nil {
		r.State, r.Route = Replaced, "in-place"
		r.Summary = "replaced " + strings.Join(r.Replaced, ", ") + " with the host libionic build"
		return r
	}
	if !unwritable(err) {
		r.State = Refused
		r.Summary = fmt.Sprintf("swapping in the host build failed: %v; the container's provider was restored", err)
		return r
	}
	r.Notes = append(r.Notes, fmt.Sprintf("in-place swap not possible: %v", err))
	if errno := syscall.Errno(0); errors.As(err, &errno) {
		r.noteBriefs = map[int]string{len(r.Notes) - 1: "in-place swap not possible: the library directory is not writable (" + errno.Error() + ")"}
	}
	return fallback(root, o, c, data, r)
}

// inPlace replaces the real file(s) behind lib<name>.so.1 and the provider
// link with the host build, creating whichever names are missing. On any
// error everything already done is undone.
func inPlace(ctx context.Context, root, name string, c *Container, data []byte, r *Result) (err error) {
	type undo func() error
	var undos []undo
	defer func() {
		if err != nil {
			for i := len(undos) - 1; i >= 0; i-- {
				if uerr := undos[i](); uerr != nil {
					r.Notes = append(r.Notes, "undo failed: "+uerr.Error())
				}
			}
			r.Replaced, r.Created, r.Backups = nil, nil, nil
		}
	}()

	files := append([]string(nil), c.Files...)
	if len(files) == 0 {
		// No provider in the image at all: the host build becomes
		// lib<name>.so.1 itself.
		p := c.SonameLink
		if err := atomicfile.WriteBytes(in(root, p), data, atomicfile.Options{Mode: 0o644}); err != nil {
			return err
		}
		undos = append(undos, func() error { return os.Remove(in(root, p)) })
		r.Created = append(r.Created, p)
		files = []string{p}
	}
	for _, f := range files {
		orig, err := boundedread.File(in(root, f), boundedread.Library)
		if err != nil {
			return err
		}
		if digest.Bytes(orig) == digest.Bytes(data) {
			continue
		}
		backup, made, err := keepOriginal(root, f, orig)
		if err != nil {
			return err
		}
		if made {
			r.Backups = append(r.Backups, backup)
		}
		if err := atomicfile.WriteBytes(in(root, f), data, atomicfile.Options{KeepOwner: true}); err != nil {
			return err
		}
		f, orig := f, orig
		undos = append(undos, func() error {
			return atomicfile.WriteBytes(in(root, f), orig, atomicfile.Options{KeepOwner: true})
		})
		r.Replaced = append(r.Replaced, f)
	}
	target := files[0]
	createdSoname := false
	for _, link := range []struct{ path string }{{c.SonameLink}, {c.ProviderLink}} {
		if _, err := os.Lstat(in(root, link.path)); err == nil {
			continue
		}
		if err := os.MkdirAll(in(root, filepath.Dir(link.path)), 0o755); err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(link.path), target)
		if err := os.Symlink(rel, in(root, link.path)); err != nil {
			return err
		}
		p := link.path
		undos = append(undos, func() error { return os.Remove(in(root, p)) })
		r.Created = append(r.Created, link.path)
		if link.path == c.SonameLink {
			createdSoname = true
		}
	}
	if c.DriverFile == "" {
		p := filepath.Join(c.ConfigDir, name+".driver")
		if err := os.MkdirAll(in(root, c.ConfigDir), 0o755); err != nil {
			return err
		}
		if err := atomicfile.WriteBytes(in(root, p), []byte("driver "+name+"\n"), atomicfile.Options{Mode: 0o644}); err != nil {
			return err
		}
		undos = append(undos, func() error { return os.Remove(in(root, p)) })
		r.Created = append(r.Created, p)
	}
	if createdSoname && root == "/" {
		runLdconfig(ctx, r)
	}
	return nil
}

// keepOriginal makes sure the file about to be replaced survives as a
// backup beside it. The backup is .<name>.infera-orig; an existing one is
// trusted only when it holds exactly these bytes. When it holds something
// else (an earlier original, or a file someone else put there) it is left
// alone and this original is kept under a name carrying its digest,
// .<name>.infera-orig-<sha256 prefix>, so no original is ever lost. made
// is false when a byte-identical backup was already there.
func keepOriginal(root, f string, orig []byte) (backup string, made bool, err error) {
	sum := digest.Bytes(orig)
	base := filepath.Join(filepath.Dir(f), "."+filepath.Base(f)+".infera-orig")
	for _, backup := range []string{base, base + "-" + sum[:16]} {
		fi, err := os.Lstat(in(root, backup))
		if err == nil {
			if fi.Mode().IsRegular() {
				if have, err := boundedread.FileNoFollow(in(root, backup), boundedread.Library); err == nil && digest.Bytes(have) == sum {
					return backup, false, nil
				}
			}
			continue
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", false, err
		}
		// A hard link keeps the original inode (and its pages, for any
		// process that has it mapped) at no cost; ldconfig ignores names
		// that do not start with "lib". The link is checked: the file may
		// have changed since it was read.
		if err := os.Link(in(root, f), in(root, backup)); err == nil {
			if have, err := boundedread.FileNoFollow(in(root, backup), boundedread.Library); err == nil && digest.Bytes(have) == sum {
				return backup, true, nil
			}
			os.Remove(in(root, backup))
		}
		if err := atomicfile.WriteBytes(in(root, backup), orig, atomicfile.Options{Mode: 0o644}); err != nil {
			return "", false, err
		}
		return backup, true, nil
	}
	return "", false, fmt.Errorf("cannot keep the original %s: %s and %s-%s exist with other content", f, base, base, sum[:16])
}

// readHost reads the host build once, bounded, and checks that copy: a
// private snapshot (a memfd, or a 0600 temporary file when /proc is not
// mounted) is what elfload reads, and the same bytes are returned for
// installing.
func readHost(path string) ([]byte, *elfload.Object, error) {
	data, err := boundedread.File(path, boundedread.Library)
	if err != nil {
		// elfload says plainly what a path that is no file is (a
		// dangling link, a directory); the bytes are not used.
		if _, eerr := elfload.Read(path); eerr != nil {
			return nil, nil, eerr
		}
		return nil, nil, err
	}
	snap, done, err := snapshot(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: cannot keep a private copy to check: %w", path, err)
	}
	defer done()
	obj, err := elfload.Read(snap)
	if err != nil {
		return nil, nil, errors.New(strings.ReplaceAll(err.Error(), snap, path))
	}
	obj.Path = path
	return data, obj, nil
}

// snapshot puts data where only this process can change it and returns
// a path to it.
func snapshot(data []byte) (string, func(), error) {
	if fd, err := unix.MemfdCreate("infera-exec-host-provider", unix.MFD_CLOEXEC); err == nil {
		f := os.NewFile(uintptr(fd), "memfd")
		p := fmt.Sprintf("/proc/self/fd/%d", fd)
		if _, err := f.Write(data); err == nil {
			if _, err := os.Stat(p); err == nil {
				return p, func() { f.Close() }, nil
			}
		}
		f.Close()
	}
	f, err := os.CreateTemp("", ".infera-exec-host-provider-*")
	if err != nil {
		return "", nil, err
	}
	name := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", nil, err
	}
	return name, func() { os.Remove(name) }, nil
}

// runLdconfig refreshes the loader cache after a new soname was created;
// replacing a file at the same path needs none. A missing or failing
// ldconfig is a note, never an error.
func runLdconfig(ctx context.Context, r *Result) {
	path := ""
	for _, p := range []string{"/sbin/ldconfig", "/usr/sbin/ldconfig"} {
		if _, err := os.Stat(p); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		r.Notes = append(r.Notes, "ldconfig not found; the new soname is found through the provider path only")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, path).CombinedOutput(); err != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("%s failed (%v): %s", path, err, strings.TrimSpace(string(out))))
		return
	}
	r.Notes = append(r.Notes, "ran "+path+" for the new soname")
}

// fallback is the route for a read-only root or library directory: the
// host build goes into a writable directory that may hold executable code,
// under the name libibverbs builds for an RDMAV_DRIVERS entry, and the
// worker is told where.
func fallback(root string, o Options, c *Container, data []byte, r *Result) *Result {
	dir, why := pickFallback(root, o.FallbackDirs, r)
	if dir == "" {
		r.State = NoRoute
		r.Summary = fmt.Sprintf("cannot swap in the host build: the library directory is not writable and no fallback directory is usable (%s); starting with the container's provider", why)
		r.brief = "cannot swap in the host build: the library directory is not writable, nor any fallback directory; starting with the container's provider"
		return r
	}
	lib := filepath.Join(dir, "lib"+o.Name+".so.1")
	prov := filepath.Join(dir, fmt.Sprintf("lib%s-rdmav%d.so", o.Name, c.PABI))
	if cur, err := boundedread.FileNoFollow(in(root, lib), boundedread.Library); err != nil || digest.Bytes(cur) != digest.Bytes(data) {
		if err := atomicfile.WriteBytes(in(root, lib), data, atomicfile.Options{Mode: 0o755}); err != nil {
			r.State, r.Summary = NoRoute, fmt.Sprintf("cannot write %s: %v; starting with the container's provider", lib, err)
			return r
		}
		r.Created = append(r.Created, lib)
	}
	if t, err := os.Readlink(in(root, prov)); err != nil || t != filepath.Base(lib) {
		os.Remove(in(root, prov))
		if err := os.Symlink(filepath.Base(lib), in(root, prov)); err != nil {
			r.State, r.Summary = NoRoute, fmt.Sprintf("cannot create %s: %v; starting with the container's provider", prov, err)
			return r
		}
		r.Created = append(r.Created, prov)
	}
	r.State, r.Route = Fallback, "rdmav-drivers"
	// An RDMAV_DRIVERS entry is an absolute path: libibverbs dlopens
	// <entry>-rdmav<PABI>.so directly, so the directory needs no
	// LD_LIBRARY_PATH entry (which would let it shadow every library the
	// worker loads, libc included).
	r.Env = map[string]string{"RDMAV_DRIVERS": filepath.Join(dir, "lib"+o.Name)}
	r.Summary = fmt.Sprintf("library directory not writable; the host build is at %s, loaded through RDMAV_DRIVERS=%s", prov, r.Env["RDMAV_DRIVERS"])
	return r
}

// pickFallback returns the first candidate that is infera-exec's own
// directory (statedir.Dir: created by it, or a real directory of its uid
// that nobody else can write), is writable, and is not on a noexec mount
// (dlopen would refuse to map it).
func pickFallback(root string, cands []string, r *Result) (string, string) {
	var whys []string
	for _, d := range cands {
		p := in(root, d)
		// The loader will map code from here as root's worker: the
		// directory must be ours alone (a directory another uid made
		// first in /tmp could hold a planted library).
		if err := statedir.Dir(p); err != nil {
			whys = append(whys, err.Error())
			if statedir.Unsafe(err) {
				r.Warnings = append(r.Warnings, "fallback directory "+err.Error())
			}
			continue
		}
		if err := unix.Access(p, unix.W_OK|unix.X_OK); err != nil {
			whys = append(whys, fmt.Sprintf("%s: not writable", d))
			continue
		}
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil && st.Flags&unix.ST_NOEXEC != 0 {
			whys = append(whys, fmt.Sprintf("%s: mounted noexec", d))
			continue
		}
		if err := unix.Statfs(p, &st); err == nil && st.Flags&unix.ST_RDONLY != 0 {
			whys = append(whys, fmt.Sprintf("%s: read-only file system", d))
			continue
		}
		return d, ""
	}
	if len(whys) == 0 {
		whys = append(whys, "no candidates")
	}
	return "", strings.Join(whys, "; ")
}

// firstUnwritable is the first directory an in-place swap would write to
// that cannot be written, for a dry run.
func firstUnwritable(root string, c *Container) string {
	dirs := []string{c.LibDir, c.ProviderDir}
	for _, f := range c.Files {
		dirs = append(dirs, filepath.Dir(f))
	}
	if c.DriverFile == "" {
		dirs = append(dirs, c.ConfigDir)
	}
	for _, d := range dirs {
		p := in(root, d)
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Flags&unix.ST_RDONLY != 0 {
			return d
		}
		if _, err := os.Stat(p); err == nil && unix.Access(p, unix.W_OK) != nil {
			return d
		}
	}
	return ""
}

// unwritable reports whether err means "this place cannot be written":
// then the read-only route is taken instead.
func unwritable(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)
}

func describeTargets(c *Container) string {
	if len(c.Files) == 0 {
		return c.SonameLink + " (new)"
	}
	return strings.Join(c.Files, ", ")
}

func allSame(root string, files []string, want string) bool {
	for _, f := range files {
		if s, err := digest.File(in(root, f)); err != nil || s != want {
			return false
		}
	}
	return true
}

// ProviderRange is the kernel ABI range of the provider name the
// container's libibverbs would load, read from the binary; ok is false
// when there is no such provider or its range cannot be read.
func ProviderRange(root, name string) (min, max uint32, ok bool) {
	c, _, err := Discover(root, name)
	if err != nil || len(c.ProviderChain) == 0 {
		return 0, 0, false
	}
	obj, err := elfload.Read(in(root, c.ProviderChain[len(c.ProviderChain)-1]))
	if err != nil {
		return 0, 0, false
	}
	return elfload.ProviderABIRange(obj, name)
}

// Brief is Summary in a few words, for the text line; the record's
// detail and the report have Summary.
func (r *Result) Brief() string {
	if r.brief == "" {
		return r.Summary
	}
	return r.brief
}
