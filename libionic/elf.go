package libionic

// ELF verification of a provider build: will it load in this container?
//
// Everything here reads what the dynamic loader reads (program headers, the
// dynamic table, the version tables it points at) with debug/elf for the
// headers and bounds-checked reads for the rest; no input makes it panic.

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// Object is what the swap needs to know of one ELF shared object.
type Object struct {
	Path    string
	Class   elf.Class
	Data    elf.Data
	Machine elf.Machine
	Type    elf.Type
	Soname  string
	Needed  []string            // DT_NEEDED
	Needs   map[string][]string // library file name (from .gnu.version_r) -> version names it needs, e.g. "libibverbs.so.1" -> ["IBVERBS_PRIVATE_34"]
	Defines []string            // version names it defines (.gnu.version_d), e.g. "IBVERBS_1.1", "IBVERBS_PRIVATE_34"
	Size    int64

	// What the loader also compares when it matches versions: the hash
	// stored with each needed version (keyed library, version) and with
	// each defined one. Absent for an Object built by hand.
	needHash map[[2]string]elfVerHash
	defHash  map[string]uint32
}

// elfVerHash is a needed version's stored hash and flags (VER_FLG_WEAK).
type elfVerHash struct {
	hash  uint32
	flags uint16
}

// Check is one verification with its outcome, for the report and --explain.
type Check struct {
	Name   string `json:"name"`   // e.g. "elf", "class", "machine", "soname", "needed libc.so.6", "version IBVERBS_PRIVATE_34"
	OK     bool   `json:"ok"`     //
	Detail string `json:"detail"` // what was seen, e.g. "ELFCLASS64 little-endian x86-64, like /usr/lib/x86_64-linux-gnu/libibverbs.so.1"
}

// elfError is an Inspect failure: the path, then what is wrong in plain
// words; the underlying error (if any) is kept for errors.Is.
type elfError struct {
	path string
	msg  string
	err  error
}

func (e *elfError) Error() string { return e.path + ": " + e.msg }
func (e *elfError) Unwrap() error { return e.err }

// Limits against corrupt tables: far above anything a real library has.
const (
	elfMaxVersionEntries = 1 << 16 // verneed + vernaux or verdef records
	elfMaxDynEntries     = 1 << 16
	elfMaxCandidates     = 1 << 12 // provider name strings / relocations
	elfVerFlagBase       = 0x1     // VER_FLG_BASE: the definition naming the file itself
	elfVerFlagWeak       = 0x2     // VER_FLG_WEAK: a reference the loader only warns about
	elfDF1PIE            = 0x08000000
	elfTagRELRSZ         = elf.DynTag(35)
	elfTagRELR           = elf.DynTag(36)
	elfTagRELRENT        = elf.DynTag(37)
	elfRelX86Relative    = 8    // R_X86_64_RELATIVE
	elfRelA64Relative    = 1027 // R_AARCH64_RELATIVE
)

// elfImage is an open ELF file: debug/elf's view of the headers plus
// bounds-checked reads of the rest.
type elfImage struct {
	path string
	file *os.File
	size uint64
	ef   *elf.File
	bo   binary.ByteOrder
}

func (img *elfImage) close() { img.file.Close() }

func (img *elfImage) fail(format string, a ...any) error {
	return &elfError{path: img.path, msg: fmt.Sprintf(format, a...)}
}

// read returns n bytes at file offset off, or false when they are not all
// in the file.
func (img *elfImage) read(off, n uint64) ([]byte, bool) {
	if n > img.size || off > img.size-n {
		return nil, false
	}
	b := make([]byte, n)
	if _, err := img.file.ReadAt(b, int64(off)); err != nil {
		return nil, false
	}
	return b, true
}

// fileOffset maps n bytes at virtual address addr to a file offset through
// the PT_LOAD segments, as the loader maps them (file-backed part only).
func (img *elfImage) fileOffset(addr, n uint64) (uint64, bool) {
	for _, p := range img.ef.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr {
			continue
		}
		rel := addr - p.Vaddr
		if rel > p.Filesz || n > p.Filesz-rel {
			continue
		}
		off := p.Off + rel
		if off < p.Off || n > img.size || off > img.size-n {
			continue
		}
		return off, true
	}
	return 0, false
}

func (img *elfImage) readAddr(addr, n uint64) ([]byte, bool) {
	off, ok := img.fileOffset(addr, n)
	if !ok {
		return nil, false
	}
	return img.read(off, n)
}

// elfOpen opens path (following symlinks) and checks it is a complete ELF
// file whose headers and segments lie inside it.
func elfOpen(path string) (img *elfImage, err error) {
	fail := func(msg string, err error) (*elfImage, error) {
		return nil, &elfError{path: path, msg: msg, err: err}
	}
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if li, lerr := os.Lstat(path); lerr == nil && li.Mode()&fs.ModeSymlink != 0 {
				target, _ := os.Readlink(path)
				return fail(fmt.Sprintf("dangling symbolic link (to %s): the file it names does not exist", target), err)
			}
			return fail("no such file", err)
		}
		if errors.Is(err, syscall.ELOOP) {
			return fail("symbolic link loop", err)
		}
		if errors.Is(err, fs.ErrPermission) {
			return fail("permission denied", err)
		}
		return fail(fmt.Sprintf("cannot stat: %v", elfUnwrapPath(err)), err)
	}
	if msg := elfNotRegular(fi.Mode()); msg != "" {
		return fail(msg, nil)
	}
	// O_NONBLOCK: should it have become a FIFO since the Stat, do not hang.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return fail("permission denied", err)
		}
		return fail(fmt.Sprintf("cannot open: %v", elfUnwrapPath(err)), err)
	}
	img = &elfImage{path: path, file: f}
	defer func() {
		if err != nil {
			f.Close()
			img = nil
		}
	}()
	if fi, err = f.Stat(); err != nil {
		return fail(fmt.Sprintf("cannot stat: %v", elfUnwrapPath(err)), err)
	}
	if msg := elfNotRegular(fi.Mode()); msg != "" {
		return fail(msg, nil)
	}
	if fi.Size() == 0 {
		return fail("empty file (0 bytes), not an ELF shared object", nil)
	}
	img.size = uint64(fi.Size())

	head := make([]byte, 64)
	n, _ := f.ReadAt(head, 0)
	head = head[:n]
	if n < 4 || !bytes.Equal(head[:4], []byte(elf.ELFMAG)) {
		start := head
		if len(start) > 16 {
			start = start[:16]
		}
		return fail(fmt.Sprintf("not an ELF file (it starts with %q)", start), nil)
	}
	if msg := elfCheckHeader(head, img.size); msg != "" {
		return fail(msg, nil)
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return fail(fmt.Sprintf("corrupt ELF file: %v", err), err)
	}
	img.ef = ef
	img.bo = ef.ByteOrder
	if img.bo == nil {
		return fail("corrupt ELF file: unknown byte order", nil)
	}
	for i, p := range ef.Progs {
		if p.Type != elf.PT_LOAD && p.Type != elf.PT_DYNAMIC {
			continue
		}
		if end := p.Off + p.Filesz; end < p.Off || end > img.size {
			return fail(fmt.Sprintf("truncated ELF file: it has %d bytes but segment %d (%v) ends at byte %d", img.size, i, p.Type, p.Off+p.Filesz), nil)
		}
	}
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_NOBITS || s.Type == elf.SHT_NULL {
			continue
		}
		if end := s.Offset + s.FileSize; end < s.Offset || end > img.size {
			return fail(fmt.Sprintf("truncated ELF file: it has %d bytes but section %s ends at byte %d", img.size, s.Name, s.Offset+s.FileSize), nil)
		}
	}
	return img, nil
}

// elfNotRegular says what a non-regular file is; "" for a regular file.
func elfNotRegular(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return ""
	case m.IsDir():
		return "is a directory, not a regular file"
	case m&fs.ModeCharDevice != 0:
		return "is a character device, not a regular file"
	case m&fs.ModeDevice != 0:
		return "is a block device, not a regular file"
	case m&fs.ModeNamedPipe != 0:
		return "is a named pipe (FIFO), not a regular file"
	case m&fs.ModeSocket != 0:
		return "is a socket, not a regular file"
	default:
		return fmt.Sprintf("is not a regular file (mode %v)", m)
	}
}

func elfUnwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// elfCheckHeader reads the ELF header itself, to tell a truncated file
// from a corrupt one in plain words before debug/elf reads the tables.
func elfCheckHeader(h []byte, size uint64) string {
	if len(h) < 6 {
		return fmt.Sprintf("truncated ELF file: %d bytes, shorter than an ELF header", len(h))
	}
	var bo binary.ByteOrder
	switch elf.Data(h[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		bo = binary.LittleEndian
	case elf.ELFDATA2MSB:
		bo = binary.BigEndian
	default:
		return fmt.Sprintf("corrupt ELF header: unknown byte order %d", h[elf.EI_DATA])
	}
	var phoff, shoff uint64
	var phentsize, phnum, shentsize, shnum uint16
	switch elf.Class(h[elf.EI_CLASS]) {
	case elf.ELFCLASS32:
		if len(h) < 52 {
			return fmt.Sprintf("truncated ELF file: %d bytes, shorter than the 52-byte ELF header", len(h))
		}
		phoff, shoff = uint64(bo.Uint32(h[28:])), uint64(bo.Uint32(h[32:]))
		phentsize, phnum = bo.Uint16(h[42:]), bo.Uint16(h[44:])
		shentsize, shnum = bo.Uint16(h[46:]), bo.Uint16(h[48:])
	case elf.ELFCLASS64:
		if len(h) < 64 {
			return fmt.Sprintf("truncated ELF file: %d bytes, shorter than the 64-byte ELF header", len(h))
		}
		phoff, shoff = bo.Uint64(h[32:]), bo.Uint64(h[40:])
		phentsize, phnum = bo.Uint16(h[54:]), bo.Uint16(h[56:])
		shentsize, shnum = bo.Uint16(h[58:]), bo.Uint16(h[60:])
	default:
		return fmt.Sprintf("corrupt ELF header: unknown class %d", h[elf.EI_CLASS])
	}
	for _, t := range []struct {
		what       string
		off        uint64
		num, entsz uint16
	}{{"program", phoff, phnum, phentsize}, {"section", shoff, shnum, shentsize}} {
		if t.off == 0 || t.num == 0 {
			continue
		}
		end := t.off + uint64(t.num)*uint64(t.entsz)
		if end < t.off || end > size {
			return fmt.Sprintf("truncated ELF file: it has %d bytes but its %s headers end at byte %d", size, t.what, end)
		}
	}
	return ""
}

// elfDynamic is the dynamic table as the loader reads it: PT_DYNAMIC.
type elfDynamic struct {
	entries []elfDynEntry
	strtab  []byte
}

type elfDynEntry struct {
	tag elf.DynTag
	val uint64
}

func (d *elfDynamic) first(tag elf.DynTag) (uint64, bool) {
	for _, e := range d.entries {
		if e.tag == tag {
			return e.val, true
		}
	}
	return 0, false
}

func (img *elfImage) dynamic() (*elfDynamic, error) {
	var dp *elf.Prog
	for _, p := range img.ef.Progs {
		if p.Type == elf.PT_DYNAMIC {
			dp = p
			break
		}
	}
	if dp == nil {
		return nil, img.fail("no dynamic section (PT_DYNAMIC): not a loadable shared object")
	}
	entsz := uint64(16)
	if img.ef.Class == elf.ELFCLASS32 {
		entsz = 8
	}
	n := dp.Filesz / entsz
	if n > elfMaxDynEntries {
		n = elfMaxDynEntries
	}
	raw, ok := img.read(dp.Off, n*entsz)
	if !ok {
		return nil, img.fail("truncated ELF file: the dynamic section lies outside the file")
	}
	d := &elfDynamic{}
	terminated := false
	for i := uint64(0); i < n; i++ {
		b := raw[i*entsz:]
		var e elfDynEntry
		if entsz == 16 {
			e = elfDynEntry{elf.DynTag(int64(img.bo.Uint64(b))), img.bo.Uint64(b[8:])}
		} else {
			e = elfDynEntry{elf.DynTag(int32(img.bo.Uint32(b))), uint64(img.bo.Uint32(b[4:]))}
		}
		if e.tag == elf.DT_NULL {
			terminated = true
			break
		}
		d.entries = append(d.entries, e)
	}
	if len(d.entries) == 0 {
		return nil, img.fail("empty dynamic section: not a loadable shared object")
	}
	if !terminated {
		return nil, img.fail("corrupt ELF file: the dynamic section has no DT_NULL end")
	}
	if addr, ok := d.first(elf.DT_STRTAB); ok {
		sz, _ := d.first(elf.DT_STRSZ)
		if sz > img.size {
			return nil, img.fail("corrupt ELF file: DT_STRSZ (%d) is larger than the file", sz)
		}
		b, ok := img.readAddr(addr, sz)
		if !ok {
			return nil, img.fail("corrupt ELF file: the dynamic string table (DT_STRTAB 0x%x, %d bytes) is not in a loaded segment", addr, sz)
		}
		d.strtab = b
	}
	return d, nil
}

// str is the NUL-terminated string at off in the dynamic string table.
func (img *elfImage) str(d *elfDynamic, off uint64, what string) (string, error) {
	if d.strtab == nil {
		return "", img.fail("corrupt ELF file: %s refers to a string but there is no DT_STRTAB", what)
	}
	if off >= uint64(len(d.strtab)) {
		return "", img.fail("corrupt ELF file: %s names string offset %d outside the dynamic string table (%d bytes)", what, off, len(d.strtab))
	}
	s := d.strtab[off:]
	i := bytes.IndexByte(s, 0)
	if i < 0 {
		return "", img.fail("corrupt ELF file: %s names an unterminated string", what)
	}
	return string(s[:i]), nil
}

// Inspect opens path (following symlinks) and reads it. Errors name the path and say plainly what is wrong:
// not a regular file (directory, dangling symlink, device), empty file, not ELF, truncated/corrupt ELF,
// not a shared object (ET_DYN), no dynamic section.
func Inspect(path string) (obj *Object, err error) {
	defer func() {
		if r := recover(); r != nil { // debug/elf on hostile input: an error, never a crash
			obj, err = nil, &elfError{path: path, msg: fmt.Sprintf("corrupt ELF file (reading it failed: %v)", r)}
		}
	}()
	img, err := elfOpen(path)
	if err != nil {
		return nil, err
	}
	defer img.close()
	ef := img.ef
	o := &Object{Path: path, Class: ef.Class, Data: ef.Data, Machine: ef.Machine, Type: ef.Type, Size: int64(img.size)}
	switch ef.Type {
	case elf.ET_DYN:
	case elf.ET_EXEC:
		return nil, img.fail("is an executable (ET_EXEC), not a shared object")
	case elf.ET_REL:
		return nil, img.fail("is a relocatable object file (ET_REL, an unlinked .o), not a shared object")
	case elf.ET_CORE:
		return nil, img.fail("is a core dump (ET_CORE), not a shared object")
	default:
		return nil, img.fail("has ELF type %v, not a shared object (ET_DYN)", ef.Type)
	}
	d, err := img.dynamic()
	if err != nil {
		return nil, err
	}
	if f1, _ := d.first(elf.DT_FLAGS_1); f1&elfDF1PIE != 0 {
		return nil, img.fail("is a position-independent executable (ET_DYN with DF_1_PIE), not a shared object")
	}
	for _, e := range d.entries {
		switch e.tag {
		case elf.DT_NEEDED:
			s, err := img.str(d, e.val, "DT_NEEDED")
			if err != nil {
				return nil, err
			}
			o.Needed = append(o.Needed, s)
		case elf.DT_SONAME:
			if o.Soname != "" {
				continue // the loader uses the first
			}
			s, err := img.str(d, e.val, "DT_SONAME")
			if err != nil {
				return nil, err
			}
			o.Soname = s
		}
	}
	if err := img.versionNeeds(d, o); err != nil {
		return nil, err
	}
	if err := img.versionDefs(d, o); err != nil {
		return nil, err
	}
	return o, nil
}

// versionNeeds walks the Verneed records at DT_VERNEED (.gnu.version_r).
// Elf32 and Elf64 records have the same layout: Verneed {u16 version,
// u16 cnt, u32 file, u32 aux, u32 next}, Vernaux {u32 hash, u16 flags,
// u16 other, u32 name, u32 next}.
func (img *elfImage) versionNeeds(d *elfDynamic, o *Object) error {
	addr, ok := d.first(elf.DT_VERNEED)
	if !ok {
		return nil
	}
	num, hasNum := d.first(elf.DT_VERNEEDNUM)
	if hasNum && num == 0 {
		return nil
	}
	o.Needs = map[string][]string{}
	o.needHash = map[[2]string]elfVerHash{}
	budget := elfMaxVersionEntries
	for i := uint64(0); ; i++ {
		if budget--; budget < 0 {
			return img.fail("corrupt ELF file: too many version need records")
		}
		b, ok := img.readAddr(addr, 16)
		if !ok {
			return img.fail("corrupt ELF file: version need record %d (at 0x%x) is outside the loaded segments", i, addr)
		}
		if v := img.bo.Uint16(b); v != 1 {
			return img.fail("corrupt ELF file: version need record %d has unsupported version %d", i, v)
		}
		cnt := img.bo.Uint16(b[2:])
		file, err := img.str(d, uint64(img.bo.Uint32(b[4:])), "a version need record")
		if err != nil {
			return err
		}
		aux, next := uint64(img.bo.Uint32(b[8:])), uint64(img.bo.Uint32(b[12:]))
		if _, seen := o.Needs[file]; !seen {
			o.Needs[file] = nil
		}
		a := addr + aux
		for j := uint16(0); j < cnt; j++ {
			if budget--; budget < 0 {
				return img.fail("corrupt ELF file: too many version need records")
			}
			x, ok := img.readAddr(a, 16)
			if !ok {
				return img.fail("corrupt ELF file: a record of the versions needed from %s (at 0x%x) is outside the loaded segments", file, a)
			}
			name, err := img.str(d, uint64(img.bo.Uint32(x[8:])), "a needed version of "+file)
			if err != nil {
				return err
			}
			o.Needs[file] = append(o.Needs[file], name)
			o.needHash[[2]string{file, name}] = elfVerHash{hash: img.bo.Uint32(x), flags: img.bo.Uint16(x[4:])}
			an := uint64(img.bo.Uint32(x[12:]))
			if an == 0 {
				break
			}
			a += an
		}
		if next == 0 || (hasNum && i+1 >= num) {
			return nil
		}
		addr += next
	}
}

// versionDefs walks the Verdef records at DT_VERDEF (.gnu.version_d):
// Verdef {u16 version, u16 flags, u16 ndx, u16 cnt, u32 hash, u32 aux,
// u32 next}, its first Verdaux {u32 name, u32 next} names the version.
func (img *elfImage) versionDefs(d *elfDynamic, o *Object) error {
	addr, ok := d.first(elf.DT_VERDEF)
	if !ok {
		return nil
	}
	num, hasNum := d.first(elf.DT_VERDEFNUM)
	if hasNum && num == 0 {
		return nil
	}
	o.defHash = map[string]uint32{}
	for i := uint64(0); ; i++ {
		if i >= elfMaxVersionEntries {
			return img.fail("corrupt ELF file: too many version definitions")
		}
		b, ok := img.readAddr(addr, 20)
		if !ok {
			return img.fail("corrupt ELF file: version definition %d (at 0x%x) is outside the loaded segments", i, addr)
		}
		if v := img.bo.Uint16(b); v != 1 {
			return img.fail("corrupt ELF file: version definition %d has unsupported version %d", i, v)
		}
		flags, cnt := img.bo.Uint16(b[2:]), img.bo.Uint16(b[6:])
		hash, aux, next := img.bo.Uint32(b[8:]), uint64(img.bo.Uint32(b[12:])), uint64(img.bo.Uint32(b[16:]))
		if cnt > 0 {
			x, ok := img.readAddr(addr+aux, 8)
			if !ok {
				return img.fail("corrupt ELF file: the name of version definition %d is outside the loaded segments", i)
			}
			name, err := img.str(d, uint64(img.bo.Uint32(x)), "a version definition")
			if err != nil {
				return err
			}
			if flags&elfVerFlagBase == 0 {
				o.Defines = append(o.Defines, name)
				if _, dup := o.defHash[name]; !dup {
					o.defHash[name] = hash
				}
			}
		}
		if next == 0 || (hasNum && i+1 >= num) {
			return nil
		}
		addr += next
	}
}

// elfHash is the System V ELF hash the version tables store with each name.
func elfHash(name string) uint32 {
	var h uint32
	for i := 0; i < len(name); i++ {
		h = h<<4 + uint32(name[i])
		g := h & 0xf0000000
		h ^= g >> 24
		h &^= g
	}
	return h
}

func elfMachineName(m elf.Machine) string {
	switch m {
	case elf.EM_X86_64:
		return "x86-64"
	case elf.EM_AARCH64:
		return "AArch64"
	case elf.EM_386:
		return "i386"
	case elf.EM_ARM:
		return "ARM"
	case elf.EM_PPC64:
		return "PowerPC64"
	case elf.EM_RISCV:
		return "RISC-V"
	case elf.EM_S390:
		return "s390"
	}
	return m.String()
}

func elfDataName(d elf.Data) string {
	switch d {
	case elf.ELFDATA2LSB:
		return "little-endian"
	case elf.ELFDATA2MSB:
		return "big-endian"
	}
	return d.String()
}

func elfDescribe(o *Object) string {
	return fmt.Sprintf("%v %s %s", o.Class, elfDataName(o.Data), elfMachineName(o.Machine))
}

// elfLib is a needed library as the loader would find it in the library
// directories.
type elfLib struct {
	path    string   // where it was found (or where an unusable file is)
	obj     *Object  // nil when not found or unusable
	err     error    // the found file cannot be used (not ELF, corrupt, ...)
	skipped []string // files of another class or machine, passed over
}

// elfFindLib searches dirs in order for a library file name, as the loader
// does: a missing file is passed over, so is an ELF object of another
// class, byte order or machine; any other file that is there but is not a
// usable shared object stops the search (the loader fails on it too). A
// name with a slash is used as a path.
func elfFindLib(name string, host *Object, dirs []string) elfLib {
	cands := []string{}
	if strings.Contains(name, "/") {
		cands = append(cands, name)
	} else {
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, name))
		}
	}
	var r elfLib
	for _, p := range cands {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		obj, err := Inspect(p)
		if err != nil {
			r.path, r.err = p, err
			return r
		}
		if obj.Class != host.Class || obj.Data != host.Data || obj.Machine != host.Machine {
			r.skipped = append(r.skipped, fmt.Sprintf("%s (%s)", p, elfDescribe(obj)))
			continue
		}
		r.path, r.obj = p, obj
		return r
	}
	return r
}

func (l elfLib) notFound(name string, dirs []string) string {
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

// elfSummarize lists the versions a library defines that are of the same
// family as want (the same text up to its last '_': "IBVERBS_PRIVATE_",
// "GLIBC_"), or all of them when none is; long lists are shortened.
func elfSummarize(defs []string, want string) string {
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

// Verify decides whether host will load in the container: same class, byte order and machine as ref (the container's
// libibverbs.so.1); SONAME equals wantSoname (e.g. "libionic.so.1"); every DT_NEEDED library exists in one of libDirs
// (the container's library directories, searched as the dynamic loader would, by file name); every symbol version host
// needs from a library is defined by that library as found in libDirs (e.g. IBVERBS_PRIVATE_34 from libibverbs.so.1,
// GLIBC_2.34 from libc.so.6). It returns all checks (passing and failing, in a stable order) and ok=false if any failed.
// A failing version check's Detail names the missing version and the library, e.g.
// "needs IBVERBS_PRIVATE_59 from libibverbs.so.1; /usr/lib/x86_64-linux-gnu/libibverbs.so.1 defines IBVERBS_PRIVATE_34".
//
// Order: elf, class, byte order, machine, soname, one "needed <lib>" per DT_NEEDED entry in file order, one
// "version <name>" per needed version, libraries in DT_NEEDED order (others after, by name), versions in file order.
// A missing version fails even when the reference is marked weak (VER_FLG_WEAK): the loader only warns about the
// version, but the symbols bound to it do not resolve (glibc: "undefined symbol: ..., version ..."). A stored
// version hash that does not match its name fails, as the loader compares hashes before names.
func Verify(host *Object, ref *Object, wantSoname string, libDirs []string) (checks []Check, ok bool) {
	add := func(name string, ok bool, format string, a ...any) {
		checks = append(checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, a...)})
	}
	if host == nil {
		add("elf", false, "no host object to verify")
		return checks, false
	}
	add("elf", host.Type == elf.ET_DYN, "%s: %s %v, %d bytes", host.Path, elfDescribe(host), elfTypeName(host.Type), host.Size)

	if ref == nil {
		for _, n := range []string{"class", "byte order", "machine"} {
			add(n, false, "no reference library (the container's libibverbs.so.1) to compare with")
		}
	} else {
		if host.Class == ref.Class {
			add("class", true, "%v, like %s", host.Class, ref.Path)
		} else {
			add("class", false, "host build is %v but %s is %v", host.Class, ref.Path, ref.Class)
		}
		if host.Data == ref.Data {
			add("byte order", true, "%s, like %s", elfDataName(host.Data), ref.Path)
		} else {
			add("byte order", false, "host build is %s but %s is %s", elfDataName(host.Data), ref.Path, elfDataName(ref.Data))
		}
		if host.Machine == ref.Machine {
			add("machine", true, "%s, like %s", elfMachineName(host.Machine), ref.Path)
		} else {
			add("machine", false, "host build is for %s but %s is for %s", elfMachineName(host.Machine), ref.Path, elfMachineName(ref.Machine))
		}
	}

	switch {
	case host.Soname == wantSoname:
		add("soname", true, "SONAME %q", host.Soname)
	case host.Soname == "":
		add("soname", false, "host build has no SONAME (DT_SONAME), want %q", wantSoname)
	default:
		add("soname", false, "host build's SONAME is %q, want %q", host.Soname, wantSoname)
	}

	found := map[string]elfLib{}
	lib := func(name string) elfLib {
		l, ok := found[name]
		if !ok {
			l = elfFindLib(name, host, libDirs)
			found[name] = l
		}
		return l
	}
	seen := map[string]bool{}
	for _, n := range host.Needed {
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
	for _, n := range host.Needed {
		if _, ok := host.Needs[n]; ok && !slices.Contains(order, n) {
			order = append(order, n)
		}
	}
	var rest []string
	for n := range host.Needs {
		if !slices.Contains(order, n) {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	order = append(order, rest...)

	for _, ln := range order {
		l := lib(ln)
		for _, v := range host.Needs[ln] {
			name := "version " + v
			h, hasHash := host.needHash[[2]string{ln, v}]
			weakNote := ""
			if hasHash && h.flags&elfVerFlagWeak != 0 {
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
				add(name, false, "needs %s from %s%s; %s defines %s", v, ln, weakNote, l.path, elfSummarize(l.obj.Defines, v))
			}
		}
	}

	ok = true
	for _, c := range checks {
		ok = ok && c.OK
	}
	return checks, ok
}

func elfTypeName(t elf.Type) string {
	switch t {
	case elf.ET_DYN:
		return "shared object"
	case elf.ET_EXEC:
		return "executable (ET_EXEC), not a shared object"
	case elf.ET_REL:
		return "relocatable object (ET_REL), not a shared object"
	}
	return fmt.Sprintf("%v, not a shared object", t)
}

// ProviderABIRange reads, where possible, the kernel uverbs ABI range a provider supports, from its
// struct verbs_device_ops: { const char *name; uint32_t match_min_abi_version; uint32_t match_max_abi_version; ... }.
// In a PIC shared object the name pointer is filled by a relative relocation whose addend is the address of the
// name string ("mana", "ionic", ...): find the string in a read-only section, find the R_X86_64_RELATIVE /
// R_AARCH64_RELATIVE relocation (in .rela.dyn) with that addend, and read the two uint32 values that follow the
// pointer at the relocation's offset (mapped back to a file offset through the section/program headers).
// ok=false when it cannot be read with confidence (e.g. no such string, several candidates that disagree, values > 1000).
//
// Relative relocations packed in DT_RELR (implicit addend, stored at the relocated place) are read too. A
// candidate whose values are not a range (min > max, or above 1000) is not the ops structure and is passed over;
// a pair of zeros (a NULL after the pointer, e.g. a name list) counts only when no candidate has a real range.
// Only 64-bit x86-64 and AArch64 objects are read.
func ProviderABIRange(o *Object, providerName string) (min, max uint32, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			min, max, ok = 0, 0, false
		}
	}()
	if o == nil || providerName == "" || strings.IndexByte(providerName, 0) >= 0 {
		return 0, 0, false
	}
	img, err := elfOpen(o.Path)
	if err != nil {
		return 0, 0, false
	}
	defer img.close()
	if img.ef.Class != elf.ELFCLASS64 {
		return 0, 0, false
	}
	var relative uint32
	switch img.ef.Machine {
	case elf.EM_X86_64:
		relative = elfRelX86Relative
	case elf.EM_AARCH64:
		relative = elfRelA64Relative
	default:
		return 0, 0, false
	}
	d, err := img.dynamic()
	if err != nil {
		return 0, 0, false
	}
	addrs := img.stringAddrs(providerName)
	if len(addrs) == 0 {
		return 0, 0, false
	}

	// Places the loader fills with the address of the name.
	var places []uint64
	havePlace := map[uint64]bool{}
	addPlace := func(p uint64) bool {
		if !havePlace[p] {
			havePlace[p] = true
			places = append(places, p)
		}
		return len(places) <= elfMaxCandidates
	}
	if rela, ok := d.first(elf.DT_RELA); ok {
		sz, _ := d.first(elf.DT_RELASZ)
		ent, hasEnt := d.first(elf.DT_RELAENT)
		if hasEnt && ent != 24 {
			return 0, 0, false
		}
		if sz > img.size {
			return 0, 0, false
		}
		b, ok := img.readAddr(rela, sz/24*24)
		if !ok {
			return 0, 0, false
		}
		for i := 0; i+24 <= len(b); i += 24 {
			off, info, addend := img.bo.Uint64(b[i:]), img.bo.Uint64(b[i+8:]), img.bo.Uint64(b[i+16:])
			if uint32(info) == relative && addrs[addend] && !addPlace(off) {
				return 0, 0, false
			}
		}
	}
	if relr, ok := d.first(elfTagRELR); ok {
		sz, _ := d.first(elfTagRELRSZ)
		if ent, hasEnt := d.first(elfTagRELRENT); hasEnt && ent != 8 {
			return 0, 0, false
		}
		if sz > img.size {
			return 0, 0, false
		}
		b, ok := img.readAddr(relr, sz/8*8)
		if !ok {
			return 0, 0, false
		}
		visit := func(p uint64) bool {
			v, ok := img.readAddr(p, 8)
			if ok && addrs[img.bo.Uint64(v)] {
				return addPlace(p)
			}
			return true
		}
		var where uint64
		for i := 0; i+8 <= len(b); i += 8 {
			e := img.bo.Uint64(b[i:])
			if e&1 == 0 {
				if !visit(e) {
					return 0, 0, false
				}
				where = e + 8
				continue
			}
			for bit := uint64(0); bit < 63; bit++ {
				if e>>(bit+1)&1 != 0 && !visit(where+bit*8) {
					return 0, 0, false
				}
			}
			where += 63 * 8
		}
	}

	type abiRange struct{ min, max uint32 }
	var ranges, zeros []abiRange
	for _, p := range places {
		b, ok := img.readAddr(p, 16)
		if !ok {
			continue
		}
		r := abiRange{img.bo.Uint32(b[8:]), img.bo.Uint32(b[12:])}
		switch {
		case r.min > r.max || r.max > 1000:
			// not a verbs_device_ops: another pointer or data follows
		case r.max == 0:
			zeros = append(zeros, r)
		default:
			ranges = append(ranges, r)
		}
	}
	if len(ranges) == 0 {
		ranges = zeros
	}
	if len(ranges) == 0 {
		return 0, 0, false
	}
	for _, r := range ranges[1:] {
		if r != ranges[0] {
			return 0, 0, false
		}
	}
	return ranges[0].min, ranges[0].max, true
}

// stringAddrs are the virtual addresses of name (NUL-terminated, possibly
// the tail of a longer string the linker merged it into) in the read-only
// data: SHF_ALLOC sections that are neither writable nor executable, or,
// without section headers, the read-only loaded segments.
func (img *elfImage) stringAddrs(name string) map[uint64]bool {
	needle := append([]byte(name), 0)
	addrs := map[uint64]bool{}
	scan := func(addr, off, size uint64) {
		if size > img.size || off > img.size-size {
			return
		}
		b, ok := img.read(off, size)
		if !ok {
			return
		}
		for i := 0; len(addrs) < elfMaxCandidates; {
			j := bytes.Index(b[i:], needle)
			if j < 0 {
				return
			}
			addrs[addr+uint64(i+j)] = true
			i += j + 1
		}
	}
	for _, s := range img.ef.Sections {
		if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_ALLOC != 0 && s.Flags&(elf.SHF_WRITE|elf.SHF_EXECINSTR) == 0 {
			scan(s.Addr, s.Offset, s.FileSize)
		}
	}
	if len(img.ef.Sections) == 0 {
		for _, p := range img.ef.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_W == 0 {
				scan(p.Vaddr, p.Off, p.Filesz)
			}
		}
	}
	return addrs
}
