// Package mountinfo answers "which filesystem is this path on, and can
// touching it hang?" without touching the path: it reads the kernel's
// mount table (/proc/self/mountinfo), which lives in memory, so a dead NFS
// server or a FUSE daemon that stopped answering cannot block the answer.
package mountinfo

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/infera/infera-exec/internal/boundedread"
)

// SelfPath is the mount table of this process, as its mount namespace and
// root see it.
const SelfPath = "/proc/self/mountinfo"

// Kind is what touching a filesystem can cost.
type Kind string

const (
	// Local: the kernel answers from memory or a local block device.
	Local Kind = "local"
	// Remote: a server or a userspace daemon answers (NFS, CIFS, FUSE,
	// Ceph, ...); when it stops answering, every access blocks, in a
	// FUSE request even beyond SIGKILL.
	Remote Kind = "remote"
	// Unknown: a type this package does not know, or no mount table.
	Unknown Kind = "unknown"
)

// Mount is one line of the mount table.
type Mount struct {
	Point  string `json:"mount_point"` // as this process sees it
	FSType string `json:"fs_type"`     // nfs4, fuse.sshfs, ext4, ...
	Source string `json:"source"`      // server:/export, /dev/nvme0n1p1, ...
	Kind   Kind   `json:"kind"`
}

// Describe names the filesystem for a message: "nfs4 from srv:/export".
func (m Mount) Describe() string {
	if m.FSType == "" {
		return "an unknown filesystem"
	}
	if m.Source == "" || m.Source == "none" || m.Source == m.FSType {
		return m.FSType
	}
	return m.FSType + " from " + m.Source
}

// Table is a parsed mount table, in the kernel's order (a later mount on
// the same point hides an earlier one).
type Table struct {
	Mounts []Mount

	// seen memoizes Where's lstat of existing local components: one start
	// asks for a few dozen paths that share most of their parents.
	mu   sync.Mutex
	seen map[string]component
}

// component is what lstat and readlink said of an existing path.
type component struct {
	link   bool
	target string
	err    error // of readlink
}

// localTypes are filesystems the kernel serves without asking anyone who
// can stop answering.
var localTypes = map[string]bool{
	"ext2": true, "ext3": true, "ext4": true, "xfs": true, "btrfs": true,
	"zfs": true, "f2fs": true, "vfat": true, "exfat": true, "ntfs3": true,
	"erofs": true, "squashfs": true, "iso9660": true, "udf": true,
	"tmpfs": true, "ramfs": true, "overlay": true, "devtmpfs": true,
	"proc": true, "sysfs": true, "devpts": true, "mqueue": true,
	"cgroup": true, "cgroup2": true, "bpf": true, "tracefs": true,
	"debugfs": true, "securityfs": true, "hugetlbfs": true, "configfs": true,
	"pstore": true, "efivarfs": true, "binfmt_misc": true, "nsfs": true,
	"fusectl": true, "rpc_pipefs": true, "selinuxfs": true,
}

// remoteTypes are filesystems answered by a server or a daemon. fuse.* and
// fuseblk are matched by prefix below.
var remoteTypes = map[string]bool{
	"nfs": true, "nfs4": true, "cifs": true, "smb3": true, "smbfs": true,
	"ceph": true, "lustre": true, "gpfs": true, "9p": true, "afs": true,
	"glusterfs": true, "beegfs": true, "virtiofs": true, "orangefs": true,
	"ocfs2": true, "gfs2": true, "coda": true, "ncpfs": true, "pvfs2": true,
	"fuse": true, "fuseblk": true,
}

// Classify is what touching a filesystem of type fstype can cost.
func Classify(fstype string) Kind {
	switch {
	case localTypes[fstype]:
		return Local
	case remoteTypes[fstype], strings.HasPrefix(fstype, "fuse."):
		return Remote
	}
	return Unknown
}

// maxTable caps a mount table read: far above the largest host table
// (tens of thousands of mounts).
const maxTable = 64 << 20

// Read reads the mount table at path (SelfPath, or a fixture in tests),
// a regular file within the cap (boundedread).
func Read(path string) (*Table, error) {
	data, err := boundedread.File(path, maxTable)
	if err != nil {
		return nil, err
	}
	t, err := parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse reads mountinfo lines (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// mount ID, parent ID, major:minor, root, mount point, options, optional
// fields ending with "-", then the type, the source and super options.
// Fields are separated by spaces (the kernel escapes a space, tab,
// newline or backslash inside one as \ooo). The table is read whole and
// each Mount's strings are slices of it: a host table has thousands of
// lines, and one allocation per line and field would be most of a
// start's heap.
func Parse(r io.Reader) (*Table, error) {
	data, err := boundedread.ReadAll(r, "mount table", maxTable)
	if err != nil {
		return nil, err
	}
	return parse(string(data))
}

func parse(s string) (*Table, error) {
	t := &Table{Mounts: make([]Mount, 0, strings.Count(s, "\n")+1)}
	for n := 1; s != ""; n++ {
		var line string
		line, s, _ = strings.Cut(s, "\n")
		m, blank, ok := parseLine(line)
		if blank {
			continue
		}
		if !ok {
			return nil, fmt.Errorf("line %d: not a mountinfo line: %q", n, line)
		}
		t.Mounts = append(t.Mounts, m)
	}
	return t, nil
}

// parseLine reads one line; blank is true for an empty or all-space line.
func parseLine(line string) (m Mount, blank, ok bool) {
	rest := line
	var f string
	var point string
	for i := 0; i < 6; i++ { // ID, parent, major:minor, root, mount point, options
		if f, rest = field(rest); f == "" {
			return Mount{}, i == 0, false
		}
		if i == 4 {
			point = f
		}
	}
	for { // optional fields up to the separator
		if f, rest = field(rest); f == "" {
			return Mount{}, false, false
		}
		if f == "-" {
			break
		}
	}
	fstype, rest := field(rest)
	source, _ := field(rest)
	if source == "" {
		return Mount{}, false, false
	}
	fstype = unescape(fstype)
	return Mount{Point: unescape(point), FSType: fstype, Source: unescape(source), Kind: Classify(fstype)}, false, true
}

// field is the first space-separated field of s and what follows it; ""
// when s holds no more fields.
func field(s string) (f, rest string) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	j := i
	for j < len(s) && !isSpace(s[j]) {
		j++
	}
	return s[i:j], s[j:]
}

// isSpace is a field separator: the kernel writes single spaces; tabs and
// a carriage return are accepted as a hand-written fixture may hold them.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

// unescape undoes the kernel's octal escapes of space, tab, newline and
// backslash (\040, \011, \012, \134).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// Lookup is the mount that holds path, by text alone: the longest mount
// point that is path or one of its parent directories (the last such
// line when mounts are stacked). path is cleaned, not resolved: resolving
// links would touch the filesystems on the way. ok is false when the table
// has no mount for it (no "/" line).
func (t *Table) Lookup(path string) (m Mount, ok bool) {
	p := filepath.Clean(path)
	if !filepath.IsAbs(p) {
		return Mount{}, false
	}
	best := -1
	for _, c := range t.Mounts {
		if !under(p, c.Point) {
			continue
		}
		if l := len(c.Point); l >= best {
			best, m, ok = l, c, true
		}
	}
	return m, ok
}

// under reports whether p is point or below it.
func under(p, point string) bool {
	if point == "/" {
		return true
	}
	return p == point || strings.HasPrefix(p, point+"/")
}

// KindOf is how touching path can cost, from the table alone; without a
// mount for it, Unknown.
func (t *Table) KindOf(path string) (Mount, Kind) {
	m, ok := t.Lookup(path)
	if !ok {
		return Mount{}, Unknown
	}
	return m, m.Kind
}

// CanBlock reports whether some mount of the table is not local: only
// then can a link on a local filesystem lead a path onto one that stops
// answering, and only then is following links worth its lstats.
func (t *Table) CanBlock() bool {
	for _, m := range t.Mounts {
		if m.Kind != Local {
			return true
		}
	}
	return false
}

// component lstats path (and reads the link), once per table; ok is false
// when path cannot be lstat'ed, which is not remembered.
func (t *Table) component(path string) (component, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.seen[path]; ok {
		return c, true
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return component{}, false
	}
	c := component{link: fi.Mode()&os.ModeSymlink != 0}
	if c.link {
		c.target, c.err = os.Readlink(path)
	}
	if t.seen == nil {
		t.seen = map[string]component{}
	}
	t.seen[path] = c
	return c, true
}

// maxLinks bounds link resolution, as the kernel's ELOOP does.
const maxLinks = 40

// Where is the mount that will answer for path once its links are
// followed, and the path with the links it could follow resolved. Links
// are followed only on local filesystems, one component at a time (lstat
// and readlink of a local directory cannot block); the first component on
// a remote or unknown filesystem ends the walk and the rest is taken as
// text, so a link there is not followed (its target may lie on another
// mount, which only a call that can block would tell).
func (t *Table) Where(path string) (resolved string, m Mount, kind Kind) {
	p := filepath.Clean(path)
	if !filepath.IsAbs(p) {
		return p, Mount{}, Unknown
	}
	links := 0
	done := "/"
	rest := strings.TrimPrefix(p, "/")
	for rest != "" {
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		next := filepath.Join(done, name)
		if mm, k := t.KindOf(next); k != Local {
			// Beyond here every step could block: the rest is text.
			full := filepath.Join(next, rest)
			return full, mm, k
		}
		c, ok := t.component(next)
		if !ok || !c.link {
			done = next
			continue
		}
		links++
		target, err := c.target, c.err
		if err != nil || links > maxLinks {
			done = next
			continue // the caller's own access reports the loop or the error
		}
		// Start again from the root with the link replaced: the walk
		// so far had no links left, so done is the link's real parent.
		if !filepath.IsAbs(target) {
			target = filepath.Join(done, target)
		}
		done, rest = "/", strings.TrimPrefix(filepath.Join(target, rest), "/")
	}
	m, kind = t.KindOf(done)
	return done, m, kind
}

// magics maps statfs(2) f_type magics (linux/magic.h and the filesystems'
// own headers) to names; network: reads cross a network (or, for FUSE, a
// userspace daemon that usually fetches over one).
var magics = map[uint32]struct {
	name    string
	network bool
}{
	0x6969:     {"nfs", true},
	0xFF534D42: {"cifs", true},
	0xFE534D42: {"smb2", true},
	0x65735546: {"fuse", true},
	0x00C36400: {"ceph", true},
	0x0BD00BD0: {"lustre", true},
	0x47504653: {"gpfs", true},
	0x01021997: {"9p", true},
	0x794c7630: {"overlay", false},
	0x01021994: {"tmpfs", false},
	0xEF53:     {"ext4", false}, // also ext2 and ext3: one magic
	0x58465342: {"xfs", false},
	0x9123683E: {"btrfs", false},
	0x2FC12FC1: {"zfs", false},
	0x73717368: {"squashfs", false},
}

// Magic names a statfs(2) filesystem magic and says whether reads on it
// cross a network; an unknown magic is named by its hex value.
func Magic(magic uint32) (name string, network bool) {
	if k, ok := magics[magic]; ok {
		return k.name, k.network
	}
	return fmt.Sprintf("0x%x", magic), false
}

// KnownLocal reports whether magic names a filesystem known to be local.
func KnownLocal(magic uint32) bool {
	k, ok := magics[magic]
	return ok && !k.network
}
