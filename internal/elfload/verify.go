package elfload

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/infera/infera-exec/internal/elfhdr"
)

// Check is one verification with its outcome, for the report and --explain.
type Check struct {
	Name   string `json:"name"`   // e.g. "elf", "class", "machine", "soname", "needed libc.so.6", "version IBVERBS_PRIVATE_34"
	OK     bool   `json:"ok"`     //
	Detail string `json:"detail"` // what was seen, e.g. "ELFCLASS64 little-endian x86-64, like /usr/lib/x86_64-linux-gnu/libibverbs.so.1"
}

func machineName(m elfhdr.Machine) string {
	switch m {
	case elfhdr.EM_X86_64:
		return "x86-64"
	case elfhdr.EM_AARCH64:
		return "AArch64"
	case elfhdr.EM_386:
		return "i386"
	case elfhdr.EM_ARM:
		return "ARM"
	case elfhdr.EM_PPC64:
		return "PowerPC64"
	case elfhdr.EM_RISCV:
		return "RISC-V"
	case elfhdr.EM_S390:
		return "s390"
	}
	return m.String()
}

func dataName(d elfhdr.Data) string {
	switch d {
	case elfhdr.ELFDATA2LSB:
		return "little-endian"
	case elfhdr.ELFDATA2MSB:
		return "big-endian"
	}
	return d.String()
}

func describe(o *Object) string {
	return fmt.Sprintf("%v %s %s", o.Class, dataName(o.Data), machineName(o.Machine))
}

// foundLib is a needed library as the loader would find it in the library
// directories.
type foundLib struct {
	path    string   // where it was found (or where an unusable file is)
	obj     *Object  // nil when not found or unusable
	err     error    // the found file cannot be used (not ELF, corrupt, ...)
	skipped []string // files of another class or machine, passed over
}

// finder looks libraries up as the loader does, inside a root.
type finder struct {
	root string                        // symbolic links resolve inside it; "" or "/": the running system
	read func(string) (*Object, error) // Read, or a caching reader
}

// find searches dirs in order for a library file name, as the loader
// does: a missing file is passed over, so is an ELF object of another
// class, byte order or machine; any other file that is there but is not a
// usable shared object stops the search (the loader fails on it too). A
// name with a slash is used as a path.
func (f finder) find(name string, like *Object, dirs []string) foundLib {
	cands := []string{}
	if strings.Contains(name, "/") {
		cands = append(cands, name)
	} else {
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, name))
		}
	}
	read := f.read
	if read == nil {
		read = Read
	}
	var r foundLib
	for _, p := range cands {
		real := p
		// Paths of the root resolve inside it; others (a payload tree on
		// LD_LIBRARY_PATH while checking an unpacked image) as they are.
		if f.root != "" && f.root != "/" && strings.HasPrefix(p, filepath.Clean(f.root)+string(filepath.Separator)) {
			var err error
			if real, err = ResolveIn(f.root, p); err != nil {
				continue
			}
		}
		if _, err := os.Stat(real); err != nil {
			continue
		}
		obj, err := read(real)
		if err != nil {
			r.path, r.err = p, err
			return r
		}
		if obj.Class != like.Class || obj.Data != like.Data || obj.Machine != like.Machine {
			r.skipped = append(r.skipped, fmt.Sprintf("%s (%s)", p, describe(obj)))
			continue
		}
		r.path, r.obj = p, obj
		return r
	}
	return r
}

func (l foundLib) notFound(name string, dirs []string) string {
	var s string
	switch {
	case strings.Contains(name, "/"):
		s = name + " not found"
	case len(dirs) == 0:
		s = name + " not found (no library directories given)"
	default:
		s = name + " not found in " + strings.Join(dirs, ", ")
	}
	if len(l.skipped) > 0 {
		s += "; passed over " + strings.Join(l.skipped, ", ")
	}
	return s
}

// summarize lists the versions a library defines that are of the same
// family as want (the same text up to its last '_': "IBVERBS_PRIVATE_",
// "GLIBC_"), or all of them when none is; long lists are shortened.
func summarize(defs []string, want string) string {
	list := defs
	if i := strings.LastIndexByte(want, '_'); i > 0 {
		var fam []string
		for _, d := range defs {
			if strings.HasPrefix(d, want[:i+1]) {
				fam = append(fam, d)
			}
		}
		if len(fam) > 0 {
			list = fam
		}
	}
	if len(list) <= 8 {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s, …, %s (%d versions)", strings.Join(list[:3], ", "), strings.Join(list[len(list)-3:], ", "), len(list))
}

// Target is the root an object is to load against, as its loader sees it.
type Target struct {
	Like    *Object  // an object of that root (e.g. its libibverbs.so.1): the class, byte order and machine must match
	Soname  string   // the SONAME the object must carry (e.g. "libionic.so.1"); "" checks none
	LibDirs []string // the root's library directories, in the loader's search order
	Label   string   // what failing details call the object ("host build"); "" is its path
	Root    string   // the root LibDirs lie in, for symbolic links that are absolute inside it; "" or "/": as they are

	read func(string) (*Object, error) // a caching reader for a whole closure; nil: Read
}

// Verify decides whether obj will load against t: same class, byte order and machine as t.Like; SONAME equals
// t.Soname; every DT_NEEDED library exists in one of t.LibDirs (searched as the dynamic loader would, by file name);
// every symbol version obj needs from a library is defined by that library as found in t.LibDirs (e.g.
// IBVERBS_PRIVATE_34 from libibverbs.so.1, GLIBC_2.34 from libc.so.6). It returns all checks (passing and failing, in
// a stable order) and ok=false if any failed. A failing version check's Detail names the missing version and the
// library, e.g.
// "needs IBVERBS_PRIVATE_59 from libibverbs.so.1; /usr/lib/x86_64-linux-gnu/libibverbs.so.1 defines IBVERBS_PRIVATE_34".
//
// Order: elf, class, byte order, machine, soname, one "needed <lib>" per DT_NEEDED entry in file order, one
// "version <name>" per needed version, libraries in DT_NEEDED order (others after, by name), versions in file order.
// A missing version fails even when the reference is marked weak (VER_FLG_WEAK): the loader only warns about the
// version, but the symbols bound to it do not resolve (glibc: "undefined symbol: ..., version ..."). A stored
// version hash that does not match its name fails, as the loader compares hashes before names.
func Verify(obj *Object, t Target) (checks []Check, ok bool) {
	checks, ok, _ = verify(obj, t)
	return checks, ok
}

// verify is Verify, also returning the libraries as found, by DT_NEEDED
// name, for a closure to continue from.
func verify(obj *Object, t Target) (checks []Check, ok bool, found map[string]foundLib) {
	add := func(name string, ok bool, format string, a ...any) {
		checks = append(checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, a...)})
	}
	if obj == nil {
		add("elf", false, "no object to verify")
		return checks, false, nil
	}
	add("elf", obj.Type == elfhdr.ET_DYN, "%s: %s %v, %d bytes", obj.Path, describe(obj), typeName(obj.Type), obj.Size)
	label := t.Label
	if label == "" {
		label = obj.Path
	}

	if ref := t.Like; ref == nil {
		for _, n := range []string{"class", "byte order", "machine"} {
			add(n, false, "no object of the target root to compare with")
		}
	} else {
		if obj.Class == ref.Class {
			add("class", true, "%v, like %s", obj.Class, ref.Path)
		} else {
			add("class", false, "%s is %v but %s is %v", label, obj.Class, ref.Path, ref.Class)
		}
		if obj.Data == ref.Data {
			add("byte order", true, "%s, like %s", dataName(obj.Data), ref.Path)
		} else {
			add("byte order", false, "%s is %s but %s is %s", label, dataName(obj.Data), ref.Path, dataName(ref.Data))
		}
		if obj.Machine == ref.Machine {
			add("machine", true, "%s, like %s", machineName(obj.Machine), ref.Path)
		} else {
			add("machine", false, "%s is for %s but %s is for %s", label, machineName(obj.Machine), ref.Path, machineName(ref.Machine))
		}
	}

	switch {
	case t.Soname == "":
	case obj.Soname == t.Soname:
		add("soname", true, "SONAME %q", obj.Soname)
	case obj.Soname == "":
		add("soname", false, "%s has no SONAME (DT_SONAME), want %q", label, t.Soname)
	default:
		add("soname", false, "%s's SONAME is %q, want %q", label, obj.Soname, t.Soname)
	}

	libDirs := t.LibDirs
	found = map[string]foundLib{}
	look := finder{root: t.Root, read: t.read}
	lib := func(name string) foundLib {
		l, ok := found[name]
		if !ok {
			l = look.find(name, obj, libDirs)
			found[name] = l
		}
		return l
	}
	seen := map[string]bool{}
	for _, n := range obj.Needed {
		if seen[n] {
			continue
		}
		seen[n] = true
		l := lib(n)
		switch {
		case l.obj != nil:
			add("needed "+n, true, "%s found at %s", n, l.path)
		case l.err != nil:
			add("needed "+n, false, "%s found at %s but unusable: %v", n, l.path, l.err)
		default:
			add("needed "+n, false, "%s", l.notFound(n, libDirs))
		}
	}

	order := []string{}
	for _, n := range obj.Needed {
		if _, ok := obj.VersionNeeds[n]; ok && !slices.Contains(order, n) {
			order = append(order, n)
		}
	}
	var rest []string
	for n := range obj.VersionNeeds {
		if !slices.Contains(order, n) {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	order = append(order, rest...)

	for _, ln := range order {
		l := lib(ln)
		for _, v := range obj.VersionNeeds[ln] {
			name := "version " + v
			h, hasHash := obj.needHash[[2]string{ln, v}]
			weakNote := ""
			if hasHash && h.flags&verFlagWeak != 0 {
				// The loader only warns about a missing weak version, but
				// the symbols bound to it still do not resolve.
				weakNote = " (weak reference)"
			}
			switch {
			case hasHash && h.hash != elfHash(v):
				add(name, false, "needs %s from %s but the hash stored with it (0x%08x) is not that name's ELF hash (0x%08x): corrupt .gnu.version_r, the loader would not find the version", v, ln, h.hash, elfHash(v))
			case l.obj == nil && l.err != nil:
				add(name, false, "needs %s from %s; %s is unusable: %v", v, ln, l.path, l.err)
			case l.obj == nil:
				add(name, false, "needs %s from %s%s, but %s", v, ln, weakNote, l.notFound(ln, libDirs))
			case slices.Contains(l.obj.Defines, v):
				if dh, ok := l.obj.defHash[v]; ok && dh != elfHash(v) {
					add(name, false, "needs %s from %s; %s defines it but with a hash (0x%08x) that is not the name's (0x%08x): corrupt .gnu.version_d, the loader would not match it", v, ln, l.path, dh, elfHash(v))
					continue
				}
				add(name, true, "%s from %s, defined by %s", v, ln, l.path)
			case len(l.obj.Defines) == 0:
				add(name, false, "needs %s from %s%s; %s defines no symbol versions", v, ln, weakNote, l.path)
			default:
				add(name, false, "needs %s from %s%s; %s defines %s", v, ln, weakNote, l.path, summarize(l.obj.Defines, v))
			}
		}
	}

	ok = true
	for _, c := range checks {
		ok = ok && c.OK
	}
	return checks, ok, found
}

func typeName(t elfhdr.Type) string {
	switch t {
	case elfhdr.ET_DYN:
		return "shared object"
	case elfhdr.ET_EXEC:
		return "executable (ET_EXEC), not a shared object"
	case elfhdr.ET_REL:
		return "relocatable object (ET_REL), not a shared object"
	}
	return fmt.Sprintf("%v, not a shared object", t)
}
