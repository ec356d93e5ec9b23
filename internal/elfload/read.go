// Package elfload answers whether an ELF shared object will load against a
// root: it reads what the dynamic loader reads (class, byte order and
// machine, SONAME, DT_NEEDED, the symbol versions needed and defined) and
// checks it against the libraries found in that root's loader directories.
//
// Everything is read the way the loader reads it (program headers, the
// dynamic table, the version tables it points at) with internal/elfhdr for
// the headers and bounds-checked reads for the rest; no input makes it
// panic. It does not use debug/elf, whose imports would cost the shim
// their package initialisation on every start.
package elfload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/elfhdr"
)

// Object is what the loader needs to know of one ELF shared object.
type Object struct {
	Path         string
	Class        elfhdr.Class
	Data         elfhdr.Data
	Machine      elfhdr.Machine
	Type         elfhdr.Type
	Soname       string
	Needed       []string            // DT_NEEDED
	VersionNeeds map[string][]string // library file name (from .gnu.version_r) -> version names it needs, e.g. "libibverbs.so.1" -> ["IBVERBS_PRIVATE_34"]
	Defines      []string            // version names it defines (.gnu.version_d), e.g. "IBVERBS_1.1", "IBVERBS_PRIVATE_34"
	RPath        []string            // DT_RPATH entries, as written ("$ORIGIN/../lib")
	RunPath      []string            // DT_RUNPATH entries, as written; when present the loader ignores DT_RPATH
	Size         int64

	// What the loader also compares when it matches versions: the hash
	// stored with each needed version (keyed library, version) and with
	// each defined one. Absent for an Object built by hand.
	needHash map[[2]string]verHash
	defHash  map[string]uint32
}

// verHash is a needed version's stored hash and flags (VER_FLG_WEAK).
type verHash struct {
	hash  uint32
	flags uint16
}

// loadError is a Read failure: the path, then what is wrong in plain
// words; the underlying error (if any) is kept for errors.Is.
type loadError struct {
	path string
	msg  string
	err  error
}

func (e *loadError) Error() string { return e.path + ": " + e.msg }
func (e *loadError) Unwrap() error { return e.err }

// Reason is what is wrong with the file err is about, without its path,
// for a caller that names the file itself; err's text for any other error.
func Reason(err error) string {
	var e *loadError
	if errors.As(err, &e) {
		return e.msg
	}
	return err.Error()
}

// ErrNotSharedObject is wrapped by Read and Soname when the file is ELF
// but not a shared object (an executable, a PIE, an object file, a core
// dump, or one without a dynamic table).
var ErrNotSharedObject = errors.New("not a shared object")

// Limits against corrupt tables: far above anything a real library has.
const (
	maxVersionEntries = 1 << 16 // verneed + vernaux or verdef records
	maxDynEntries     = 1 << 16
	maxCandidates     = 1 << 12 // provider name strings / relocations
	verFlagBase       = 0x1     // VER_FLG_BASE: the definition naming the file itself
	verFlagWeak       = 0x2     // VER_FLG_WEAK: a reference the loader only warns about
	df1PIE            = 0x08000000
	relX86Relative    = 8    // R_X86_64_RELATIVE
	relA64Relative    = 1027 // R_AARCH64_RELATIVE
)

// image is an open ELF file: its headers plus bounds-checked reads of the
// rest.
type image struct {
	path string
	file *os.File
	size uint64
	hdr  *elfhdr.File
	bo   binary.ByteOrder
}

func (img *image) close() { img.file.Close() }

func (img *image) fail(format string, a ...any) error {
	return &loadError{path: img.path, msg: fmt.Sprintf(format, a...)}
}

// read returns n bytes at file offset off, or false when they are not all
// in the file.
func (img *image) read(off, n uint64) ([]byte, bool) {
	return elfhdr.ReadAt(img.file, img.size, off, n)
}

// fileOffset maps n bytes at virtual address addr to a file offset through
// the PT_LOAD segments, as the loader maps them (file-backed part only).
func (img *image) fileOffset(addr, n uint64) (uint64, bool) {
	for _, p := range img.hdr.Progs {
		if p.Type != elfhdr.PT_LOAD || addr < p.Vaddr {
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

func (img *image) readAddr(addr, n uint64) ([]byte, bool) {
	off, ok := img.fileOffset(addr, n)
	if !ok {
		return nil, false
	}
	return img.read(off, n)
}

// openImage opens path (following symlinks) and checks it is a complete ELF
// file whose headers and segments lie inside it.
func openImage(path string) (img *image, err error) {
	fail := func(msg string, err error) (*image, error) {
		return nil, &loadError{path: path, msg: msg, err: err}
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
		return fail(fmt.Sprintf("cannot stat: %v", boundedread.BareErr(err)), err)
	}
	if msg := notRegular(fi.Mode()); msg != "" {
		return fail(msg, nil)
	}
	// Without blocking, and checked again on the descriptor: it may have
	// become a FIFO since the Stat.
	f, err := boundedread.Open(path, 0)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return fail("permission denied", err)
		}
		return fail(fmt.Sprintf("cannot open: %v", boundedread.Reason(err)), err)
	}
	img = &image{path: path, file: f}
	defer func() {
		if err != nil {
			f.Close()
			img = nil
		}
	}()
	if fi, err = f.Stat(); err != nil {
		return fail(fmt.Sprintf("cannot stat: %v", boundedread.BareErr(err)), err)
	}
	if fi.Size() == 0 {
		return fail("empty file (0 bytes), not an ELF shared object", nil)
	}
	img.size = uint64(fi.Size())

	hdr, err := elfhdr.Read(f, int64(img.size))
	if err != nil {
		return fail(err.Error(), err)
	}
	img.hdr = hdr
	img.bo = hdr.ByteOrder
	for i, p := range hdr.Progs {
		if p.Type != elfhdr.PT_LOAD && p.Type != elfhdr.PT_DYNAMIC {
			continue
		}
		if end := p.Off + p.Filesz; end < p.Off || end > img.size {
			return fail(fmt.Sprintf("truncated ELF file: it has %d bytes but segment %d (%v) ends at byte %d", img.size, i, p.Type, p.Off+p.Filesz), nil)
		}
	}
	for _, s := range hdr.Sections {
		if s.Type == elfhdr.SHT_NOBITS || s.Type == elfhdr.SHT_NULL {
			continue
		}
		if end := s.Offset + s.Size; end < s.Offset || end > img.size {
			return fail(fmt.Sprintf("truncated ELF file: it has %d bytes but section %s ends at byte %d", img.size, s.Name, s.Offset+s.Size), nil)
		}
	}
	return img, nil
}

// notRegular says what a non-regular file is; "" for a regular file.
func notRegular(m fs.FileMode) string {
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

// dynTable is the dynamic table as the loader reads it: PT_DYNAMIC.
type dynTable struct {
	entries []dynEntry
	// The dynamic string table's place in the file (DT_STRTAB, DT_STRSZ),
	// checked to lie in a loaded segment; strtab is the whole table once
	// loadStrings read it. Soname reads one string only: libamdhip64's
	// table is hundreds of kilobytes of symbol names, on every start.
	hasStr          bool
	strOff, strSize uint64
	strtab          []byte
}

type dynEntry struct {
	tag elfhdr.DynTag
	val uint64
}

func (d *dynTable) first(tag elfhdr.DynTag) (uint64, bool) {
	for _, e := range d.entries {
		if e.tag == tag {
			return e.val, true
		}
	}
	return 0, false
}

func (img *image) dynamic() (*dynTable, error) {
	var dp *elfhdr.Prog
	for i := range img.hdr.Progs {
		if img.hdr.Progs[i].Type == elfhdr.PT_DYNAMIC {
			dp = &img.hdr.Progs[i]
			break
		}
	}
	if dp == nil {
		return nil, img.notShared("no dynamic section (PT_DYNAMIC): not a loadable shared object")
	}
	entsz := uint64(16)
	if img.hdr.Class == elfhdr.ELFCLASS32 {
		entsz = 8
	}
	n := dp.Filesz / entsz
	if n > maxDynEntries {
		n = maxDynEntries
	}
	raw, ok := img.read(dp.Off, n*entsz)
	if !ok {
		return nil, img.fail("truncated ELF file: the dynamic section lies outside the file")
	}
	d := &dynTable{}
	terminated := false
	for i := uint64(0); i < n; i++ {
		b := raw[i*entsz:]
		var e dynEntry
		if entsz == 16 {
			e = dynEntry{elfhdr.DynTag(int64(img.bo.Uint64(b))), img.bo.Uint64(b[8:])}
		} else {
			e = dynEntry{elfhdr.DynTag(int32(img.bo.Uint32(b))), uint64(img.bo.Uint32(b[4:]))}
		}
		if e.tag == elfhdr.DT_NULL {
			terminated = true
			break
		}
		d.entries = append(d.entries, e)
	}
	if len(d.entries) == 0 {
		return nil, img.notShared("empty dynamic section: not a loadable shared object")
	}
	if !terminated {
		return nil, img.fail("corrupt ELF file: the dynamic section has no DT_NULL end")
	}
	if addr, ok := d.first(elfhdr.DT_STRTAB); ok {
		sz, _ := d.first(elfhdr.DT_STRSZ)
		if sz > img.size {
			return nil, img.fail("corrupt ELF file: DT_STRSZ (%d) is larger than the file", sz)
		}
		off, ok := img.fileOffset(addr, sz)
		if !ok {
			return nil, img.fail("corrupt ELF file: the dynamic string table (DT_STRTAB 0x%x, %d bytes) is not in a loaded segment", addr, sz)
		}
		d.hasStr, d.strOff, d.strSize = true, off, sz
	}
	return d, nil
}

// loadStrings reads the whole dynamic string table, for a caller that
// looks up many of its strings.
func (img *image) loadStrings(d *dynTable) error {
	if !d.hasStr || d.strtab != nil {
		return nil
	}
	b, ok := img.read(d.strOff, d.strSize)
	if !ok {
		return img.fail("corrupt ELF file: the dynamic string table (%d bytes at offset %d) cannot be read", d.strSize, d.strOff)
	}
	d.strtab = b
	return nil
}

// strWindow is how much of the string table str reads for one string
// before it loads the whole table: far more than any name it looks up.
const strWindow = 4 << 10

// str is the NUL-terminated string at off in the dynamic string table.
func (img *image) str(d *dynTable, off uint64, what string) (string, error) {
	if !d.hasStr {
		return "", img.fail("corrupt ELF file: %s refers to a string but there is no DT_STRTAB", what)
	}
	if off >= d.strSize {
		return "", img.fail("corrupt ELF file: %s names string offset %d outside the dynamic string table (%d bytes)", what, off, d.strSize)
	}
	if d.strtab == nil {
		n := min(d.strSize-off, strWindow)
		b, ok := img.read(d.strOff+off, n)
		if !ok {
			return "", img.fail("corrupt ELF file: the dynamic string table (%d bytes at offset %d) cannot be read", d.strSize, d.strOff)
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return string(b[:i]), nil
		}
		if err := img.loadStrings(d); err != nil {
			return "", err
		}
	}
	s := d.strtab[off:]
	i := bytes.IndexByte(s, 0)
	if i < 0 {
		return "", img.fail("corrupt ELF file: %s names an unterminated string", what)
	}
	return string(s[:i]), nil
}

// Read opens path (following symlinks) and reads it. Errors name the path and say plainly what is wrong:
// not a regular file (directory, dangling symlink, device), empty file, not ELF, truncated/corrupt ELF,
// not a shared object (ET_DYN), no dynamic section.
func Read(path string) (obj *Object, err error) {
	defer func() {
		if r := recover(); r != nil { // a reading bug on hostile input: an error, never a crash
			obj, err = nil, &loadError{path: path, msg: fmt.Sprintf("corrupt ELF file (reading it failed: %v)", r)}
		}
	}()
	img, err := openImage(path)
	if err != nil {
		return nil, err
	}
	defer img.close()
	h := img.hdr
	o := &Object{Path: path, Class: h.Class, Data: h.Data, Machine: h.Machine, Type: h.Type, Size: int64(img.size)}
	if err := img.sharedObject(); err != nil {
		return nil, err
	}
	d, err := img.dynamic()
	if err != nil {
		return nil, err
	}
	if err := img.loadStrings(d); err != nil {
		return nil, err
	}
	if f1, _ := d.first(elfhdr.DT_FLAGS_1); f1&df1PIE != 0 {
		return nil, img.notShared("is a position-independent executable (ET_DYN with DF_1_PIE), not a shared object")
	}
	for _, e := range d.entries {
		switch e.tag {
		case elfhdr.DT_NEEDED:
			s, err := img.str(d, e.val, "DT_NEEDED")
			if err != nil {
				return nil, err
			}
			o.Needed = append(o.Needed, s)
		case elfhdr.DT_SONAME:
			if o.Soname != "" {
				continue // the loader uses the first
			}
			s, err := img.str(d, e.val, "DT_SONAME")
			if err != nil {
				return nil, err
			}
			o.Soname = s
		case elfhdr.DT_RPATH, elfhdr.DT_RUNPATH:
			s, err := img.str(d, e.val, e.tag.String())
			if err != nil {
				return nil, err
			}
			for _, dir := range strings.Split(s, ":") {
				if dir == "" {
					continue
				}
				if e.tag == elfhdr.DT_RPATH {
					o.RPath = append(o.RPath, dir)
				} else {
					o.RunPath = append(o.RunPath, dir)
				}
			}
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

// sharedObject fails unless the file is a shared object (ET_DYN).
func (img *image) sharedObject() error {
	switch t := img.hdr.Type; t {
	case elfhdr.ET_DYN:
		return nil
	case elfhdr.ET_EXEC:
		return img.notShared("is an executable (ET_EXEC), not a shared object")
	case elfhdr.ET_REL:
		return img.notShared("is a relocatable object file (ET_REL, an unlinked .o), not a shared object")
	case elfhdr.ET_CORE:
		return img.notShared("is a core dump (ET_CORE), not a shared object")
	default:
		return img.notShared(fmt.Sprintf("has ELF type %v, not a shared object (ET_DYN)", t))
	}
}

func (img *image) notShared(msg string) error {
	return &loadError{path: img.path, msg: msg, err: ErrNotSharedObject}
}

// Soname reads the first DT_SONAME of the shared object at path from its
// dynamic table, as Read does, without reading the rest (needed
// libraries, version tables) or refusing a PIE: "" when it has none.
// Errors are Read's.
func Soname(path string) (soname string, err error) {
	defer func() {
		if r := recover(); r != nil { // a reading bug on hostile input: an error, never a crash
			soname, err = "", &loadError{path: path, msg: fmt.Sprintf("corrupt ELF file (reading it failed: %v)", r)}
		}
	}()
	img, err := openImage(path)
	if err != nil {
		return "", err
	}
	defer img.close()
	if err := img.sharedObject(); err != nil {
		return "", err
	}
	d, err := img.dynamic()
	if err != nil {
		return "", err
	}
	if off, ok := d.first(elfhdr.DT_SONAME); ok {
		return img.str(d, off, "DT_SONAME")
	}
	return "", nil
}

// versionNeeds walks the Verneed records at DT_VERNEED (.gnu.version_r).
// Elf32 and Elf64 records have the same layout: Verneed {u16 version,
// u16 cnt, u32 file, u32 aux, u32 next}, Vernaux {u32 hash, u16 flags,
// u16 other, u32 name, u32 next}.
func (img *image) versionNeeds(d *dynTable, o *Object) error {
	addr, ok := d.first(elfhdr.DT_VERNEED)
	if !ok {
		return nil
	}
	num, hasNum := d.first(elfhdr.DT_VERNEEDNUM)
	if hasNum && num == 0 {
		return nil
	}
	o.VersionNeeds = map[string][]string{}
	o.needHash = map[[2]string]verHash{}
	budget := maxVersionEntries
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
		if _, seen := o.VersionNeeds[file]; !seen {
			o.VersionNeeds[file] = nil
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
			o.VersionNeeds[file] = append(o.VersionNeeds[file], name)
			o.needHash[[2]string{file, name}] = verHash{hash: img.bo.Uint32(x), flags: img.bo.Uint16(x[4:])}
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
func (img *image) versionDefs(d *dynTable, o *Object) error {
	addr, ok := d.first(elfhdr.DT_VERDEF)
	if !ok {
		return nil
	}
	num, hasNum := d.first(elfhdr.DT_VERDEFNUM)
	if hasNum && num == 0 {
		return nil
	}
	o.defHash = map[string]uint32{}
	for i := uint64(0); ; i++ {
		if i >= maxVersionEntries {
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
			if flags&verFlagBase == 0 {
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

// NamesDynamic reports whether the dynamic string table of the ELF file
// at path (an executable or a shared object) holds name, as the name of a
// symbol it defines or imports or of a library it needs. Only the headers,
// the dynamic section and that table are read, never the whole file. A
// file without a dynamic section (a static executable) is an error: it
// names nothing the loader resolves.
func NamesDynamic(path, name string) (found bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			found, err = false, &loadError{path: path, msg: fmt.Sprintf("corrupt ELF file (reading it failed: %v)", r)}
		}
	}()
	img, err := openImage(path)
	if err != nil {
		return false, err
	}
	defer img.close()
	d, err := img.dynamic()
	if err != nil {
		return false, err
	}
	if err := img.loadStrings(d); err != nil {
		return false, err
	}
	// The linker may share a string's tail with a longer one: the name
	// is there when it ends a string.
	return bytes.Contains(d.strtab, []byte(name+"\x00")), nil
}
