// Package elfhdr answers what an ELF file's headers say: the ELF header,
// the program headers and the section headers with their names, read
// from an io.ReaderAt of known size, in either class and byte order; and
// its GNU build ID note (File.BuildID).
//
// It exists so that the shim does not link debug/elf, whose imports
// (compress/flate, compress/zlib, internal/zstd, debug/dwarf) cost their
// package initialisation on every container start. It accepts what
// debug/elf.NewFile accepts and reads the same values (a differential test
// and fuzz target hold it to that), within caps far above real files,
// except that e_version must be 1 as the loader wants it (debug/elf
// compares its low byte only) and a compressed section-name string table
// (which no linker writes) is refused rather than decompressed;
// every read is bounds-checked against the size, nothing is allocated in
// proportion to a count the file chooses beyond those caps, and no input
// makes it panic. Errors say which field holds which wrong value.
package elfhdr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// File is what the headers say.
type File struct {
	Class     Class
	Data      Data
	Type      Type
	Machine   Machine
	Entry     uint64
	ByteOrder binary.ByteOrder
	Progs     []Prog
	Sections  []Section // index 0 is the null section, as in the file
}

// Prog is a program header.
type Prog struct {
	Type   ProgType
	Flags  ProgFlag
	Off    uint64
	Vaddr  uint64
	Paddr  uint64
	Filesz uint64
	Memsz  uint64
	Align  uint64
}

// Section is a section header, with its name from the section-name
// string table ("" when the file has none).
type Section struct {
	Name      string
	Type      SectionType
	Flags     SectionFlag
	Addr      uint64
	Offset    uint64
	Size      uint64 // sh_size: bytes in the file, unless SHT_NOBITS (a compressed section's size is its compressed size)
	Link      uint32
	Info      uint32
	Addralign uint64
	Entsize   uint64
}

// Caps against corrupt headers, far above real files (a shared library
// has about a dozen program headers and forty sections; the largest
// objects with extended section numbering have some hundred thousand).
const (
	MaxProgs         = 1 << 12
	MaxSections      = 1 << 18
	MaxSectionNames  = 1 << 22 // bytes of the section-name string table
	shnLoreserve     = 0xff00  // SHN_LORESERVE: a count at or above it is stored in section 0
	shnXindex        = 0xffff  // SHN_XINDEX: e_shstrndx is stored in section 0's sh_link
	header32Size     = 52
	header64Size     = 64
	prog32Size       = 32
	prog64Size       = 56
	section32Size    = 40
	section64Size    = 64
	headerMinimum    = EI_DATA + 1 // up to the byte order: what the first messages need
	startShownInNote = 16          // bytes of a non-ELF file's start quoted in its error
)

// ErrLimit is wrapped by Read when a count or size is beyond the caps
// above (a file debug/elf might still read, but no real one).
var ErrLimit = errors.New("beyond this reader's limit")

// ErrNotELF is wrapped by Read when the file does not start with ELFMAG.
var ErrNotELF = errors.New("not an ELF file")

// Error is a Read failure: Msg says in plain words what is wrong, naming
// the field and its value.
type Error struct {
	Msg string
	Err error // ErrNotELF, ErrLimit or nil
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

func fail(format string, a ...any) error { return &Error{Msg: fmt.Sprintf(format, a...)} }

// reader reads bounds-checked ranges of the file.
type reader struct {
	r    io.ReaderAt
	size uint64
}

func (rd reader) at(off, n uint64) ([]byte, bool) { return ReadAt(rd.r, rd.size, off, n) }

// ReadAt returns the n bytes at off of r, a file of size bytes, or false
// when they are not all in the file: the bounds are checked before
// anything is allocated, so a corrupt offset or length costs nothing.
func ReadAt(r io.ReaderAt, size, off, n uint64) ([]byte, bool) {
	if n > size || off > size-n {
		return nil, false
	}
	b := make([]byte, n)
	// A ReaderAt that fills b may still say io.EOF at the end of the file.
	if m, _ := r.ReadAt(b, int64(off)); uint64(m) != n {
		return nil, false
	}
	return b, true
}

// Read reads the headers of the ELF file r, which is size bytes long.
func Read(r io.ReaderAt, size int64) (*File, error) {
	if size < 0 {
		return nil, fail("negative file size %d", size)
	}
	rd := reader{r: r, size: uint64(size)}

	head := make([]byte, min(rd.size, header64Size))
	n, err := r.ReadAt(head, 0)
	if n < len(head) {
		return nil, fail("cannot read the first %d bytes: %v", len(head), err)
	}
	if n < len(ELFMAG) || string(head[:len(ELFMAG)]) != ELFMAG {
		return nil, &Error{Msg: fmt.Sprintf("not an ELF file (it starts with %q)", head[:min(n, startShownInNote)]), Err: ErrNotELF}
	}
	if n < headerMinimum {
		return nil, fail("truncated ELF file: %d bytes, shorter than an ELF header", n)
	}
	f := &File{Data: Data(head[EI_DATA]), Class: Class(head[EI_CLASS])}
	switch f.Data {
	case ELFDATA2LSB:
		f.ByteOrder = binary.LittleEndian
	case ELFDATA2MSB:
		f.ByteOrder = binary.BigEndian
	default:
		return nil, fail("corrupt ELF header: unknown byte order %d", head[EI_DATA])
	}
	bo := f.ByteOrder
	var h header
	switch f.Class {
	case ELFCLASS32:
		if n < header32Size {
			return nil, fail("truncated ELF file: %d bytes, shorter than the %d-byte ELF header", n, header32Size)
		}
		h = header{
			version: bo.Uint32(head[20:]), entry: uint64(bo.Uint32(head[24:])),
			phoff: uint64(bo.Uint32(head[28:])), shoff: uint64(bo.Uint32(head[32:])),
			phentsize: bo.Uint16(head[42:]), phnum: bo.Uint16(head[44:]),
			shentsize: bo.Uint16(head[46:]), shnum: bo.Uint16(head[48:]), shstrndx: bo.Uint16(head[50:]),
			wantPh: prog32Size, wantSh: section32Size,
		}
	case ELFCLASS64:
		if n < header64Size {
			return nil, fail("truncated ELF file: %d bytes, shorter than the %d-byte ELF header", n, header64Size)
		}
		h = header{
			version: bo.Uint32(head[20:]), entry: bo.Uint64(head[24:]),
			phoff: bo.Uint64(head[32:]), shoff: bo.Uint64(head[40:]),
			phentsize: bo.Uint16(head[54:]), phnum: bo.Uint16(head[56:]),
			shentsize: bo.Uint16(head[58:]), shnum: bo.Uint16(head[60:]), shstrndx: bo.Uint16(head[62:]),
			wantPh: prog64Size, wantSh: section64Size,
		}
	default:
		return nil, fail("corrupt ELF header: unknown class %d", head[EI_CLASS])
	}
	f.Type = Type(bo.Uint16(head[16:]))
	f.Machine = Machine(bo.Uint16(head[18:]))
	f.Entry = h.entry
	if v := head[EI_VERSION]; v != EV_CURRENT {
		return nil, fail("corrupt ELF header: unknown ELF version %d in e_ident[EI_VERSION], want %d", v, EV_CURRENT)
	}
	if h.version != EV_CURRENT {
		return nil, fail("corrupt ELF header: e_version is %d, want %d", h.version, EV_CURRENT)
	}
	if err := h.check(rd); err != nil {
		return nil, err
	}
	if f.Progs, err = readProgs(rd, f, &h); err != nil {
		return nil, err
	}
	if f.Sections, err = readSections(rd, f, &h); err != nil {
		return nil, err
	}
	return f, nil
}

// header is the ELF header's fields past e_ident, widened.
type header struct {
	version             uint32
	entry, phoff, shoff uint64
	phentsize, phnum    uint16
	shentsize, shnum    uint16
	shstrndx            uint16
	wantPh, wantSh      uint64 // the class's program and section header sizes
	sections, names     uint64 // the section count and name table index, extended numbering resolved
}

// check checks the header's own fields and where its tables lie, before
// anything is read from them.
func (h *header) check(rd reader) error {
	if int64(h.phoff) < 0 {
		return fail("corrupt ELF header: program header offset (e_phoff) 0x%x is beyond any file", h.phoff)
	}
	if int64(h.shoff) < 0 {
		return fail("corrupt ELF header: section header offset (e_shoff) 0x%x is beyond any file", h.shoff)
	}
	if h.shoff == 0 && h.shnum != 0 {
		return fail("corrupt ELF header: %d section headers (e_shnum) but no section header offset (e_shoff 0)", h.shnum)
	}
	if h.shnum > 0 && h.shstrndx >= h.shnum {
		return fail("corrupt ELF header: section-name string table index (e_shstrndx) %d is not below the section count %d", h.shstrndx, h.shnum)
	}
	if h.phnum > 0 && uint64(h.phentsize) < h.wantPh {
		return fail("corrupt ELF header: program header size (e_phentsize) %d, want at least %d", h.phentsize, h.wantPh)
	}
	if h.phnum > MaxProgs {
		return &Error{Msg: fmt.Sprintf("corrupt ELF header: %d program headers (e_phnum), more than %d", h.phnum, MaxProgs), Err: ErrLimit}
	}
	// Both counts are at most 0xffff here and both sizes at most 0xffff,
	// so the products do not overflow; the offsets are below 1<<63.
	for _, t := range []struct {
		what     string
		off, len uint64
	}{{"program", h.phoff, uint64(h.phnum) * uint64(h.phentsize)}, {"section", h.shoff, uint64(h.shnum) * uint64(h.shentsize)}} {
		if t.len == 0 {
			continue
		}
		if end := t.off + t.len; end > rd.size {
			return fail("truncated ELF file: it has %d bytes but its %s headers end at byte %d", rd.size, t.what, end)
		}
	}
	return nil
}

func readProgs(rd reader, f *File, h *header) ([]Prog, error) {
	if h.phnum == 0 {
		return nil, nil
	}
	raw, ok := rd.at(h.phoff, uint64(h.phnum)*uint64(h.phentsize))
	if !ok {
		return nil, fail("cannot read the program headers (%d at offset %d)", h.phnum, h.phoff)
	}
	bo := f.ByteOrder
	progs := make([]Prog, h.phnum)
	for i := range progs {
		b := raw[uint64(i)*uint64(h.phentsize):]
		p := &progs[i]
		if f.Class == ELFCLASS32 {
			*p = Prog{
				Type: ProgType(bo.Uint32(b)), Off: uint64(bo.Uint32(b[4:])), Vaddr: uint64(bo.Uint32(b[8:])),
				Paddr: uint64(bo.Uint32(b[12:])), Filesz: uint64(bo.Uint32(b[16:])), Memsz: uint64(bo.Uint32(b[20:])),
				Flags: ProgFlag(bo.Uint32(b[24:])), Align: uint64(bo.Uint32(b[28:])),
			}
		} else {
			*p = Prog{
				Type: ProgType(bo.Uint32(b)), Flags: ProgFlag(bo.Uint32(b[4:])), Off: bo.Uint64(b[8:]),
				Vaddr: bo.Uint64(b[16:]), Paddr: bo.Uint64(b[24:]), Filesz: bo.Uint64(b[32:]),
				Memsz: bo.Uint64(b[40:]), Align: bo.Uint64(b[48:]),
			}
		}
		if int64(p.Off) < 0 {
			return nil, fail("corrupt ELF file: program header %d (%v) has offset (p_offset) 0x%x, beyond any file", i, p.Type, p.Off)
		}
		if int64(p.Filesz) < 0 {
			return nil, fail("corrupt ELF file: program header %d (%v) has file size (p_filesz) 0x%x, beyond any file", i, p.Type, p.Filesz)
		}
	}
	return progs, nil
}

// sectionHeader decodes the section header in b (at least the class's
// size).
func sectionHeader(f *File, b []byte) (s Section, name uint32) {
	bo := f.ByteOrder
	if f.Class == ELFCLASS32 {
		return Section{
			Type: SectionType(bo.Uint32(b[4:])), Flags: SectionFlag(bo.Uint32(b[8:])), Addr: uint64(bo.Uint32(b[12:])),
			Offset: uint64(bo.Uint32(b[16:])), Size: uint64(bo.Uint32(b[20:])), Link: bo.Uint32(b[24:]),
			Info: bo.Uint32(b[28:]), Addralign: uint64(bo.Uint32(b[32:])), Entsize: uint64(bo.Uint32(b[36:])),
		}, bo.Uint32(b)
	}
	return Section{
		Type: SectionType(bo.Uint32(b[4:])), Flags: SectionFlag(bo.Uint64(b[8:])), Addr: bo.Uint64(b[16:]),
		Offset: bo.Uint64(b[24:]), Size: bo.Uint64(b[32:]), Link: bo.Uint32(b[40:]),
		Info: bo.Uint32(b[44:]), Addralign: bo.Uint64(b[48:]), Entsize: bo.Uint64(b[56:]),
	}, bo.Uint32(b)
}

func readSections(rd reader, f *File, h *header) ([]Section, error) {
	h.sections, h.names = uint64(h.shnum), uint64(h.shstrndx)
	if h.shoff > 0 && h.shnum == 0 {
		// Extended numbering: a count at or above SHN_LORESERVE is
		// section 0's sh_size, and then e_shstrndx SHN_XINDEX says the
		// name table's index is section 0's sh_link.
		b, ok := rd.at(h.shoff, h.wantSh)
		if !ok {
			return nil, fail("truncated ELF file: it has %d bytes but the first section header (at e_shoff %d) ends at byte %d", rd.size, h.shoff, h.shoff+h.wantSh)
		}
		s0, _ := sectionHeader(f, b)
		if s0.Type != SHT_NULL {
			return nil, fail("corrupt ELF file: section 0 has type %d, want SHT_NULL (0): e_shnum is 0 and e_shoff %d is not", s0.Type, h.shoff)
		}
		if s0.Size < shnLoreserve {
			return nil, fail("corrupt ELF file: e_shnum is 0 and section 0's sh_size, the section count, is %d, below 0x%x", s0.Size, shnLoreserve)
		}
		h.sections = s0.Size
		if h.shstrndx == shnXindex {
			if s0.Link < shnLoreserve {
				return nil, fail("corrupt ELF file: e_shstrndx is SHN_XINDEX and section 0's sh_link, the section-name string table index, is %d, below 0x%x", s0.Link, shnLoreserve)
			}
			h.names = uint64(s0.Link)
		}
		if h.sections > MaxSections {
			return nil, &Error{Msg: fmt.Sprintf("corrupt ELF file: %d sections (section 0's sh_size), more than %d", h.sections, MaxSections), Err: ErrLimit}
		}
		if h.names >= h.sections {
			return nil, fail("corrupt ELF file: section-name string table index %d is not below the section count %d", h.names, h.sections)
		}
	}
	if h.sections == 0 {
		return nil, nil
	}
	if uint64(h.shentsize) < h.wantSh {
		return nil, fail("corrupt ELF header: section header size (e_shentsize) %d, want at least %d", h.shentsize, h.wantSh)
	}
	n := h.sections * uint64(h.shentsize) // at most MaxSections * 0xffff
	raw, ok := rd.at(h.shoff, n)
	if !ok {
		return nil, fail("truncated ELF file: it has %d bytes but its section headers end at byte %d", rd.size, h.shoff+n)
	}
	secs := make([]Section, h.sections)
	names := make([]uint32, h.sections)
	for i := range secs {
		secs[i], names[i] = sectionHeader(f, raw[uint64(i)*uint64(h.shentsize):])
		if int64(secs[i].Offset) < 0 {
			return nil, fail("corrupt ELF file: section %d has offset (sh_offset) 0x%x, beyond any file", i, secs[i].Offset)
		}
		if int64(secs[i].Size) < 0 {
			return nil, fail("corrupt ELF file: section %d has size (sh_size) 0x%x, beyond any file", i, secs[i].Size)
		}
	}
	if h.names == 0 {
		return secs, nil // SHN_UNDEF: no section names
	}
	st := secs[h.names]
	if st.Type != SHT_STRTAB {
		return nil, fail("corrupt ELF file: the section-name string table (section %d, e_shstrndx) has type %d, want SHT_STRTAB (3)", h.names, st.Type)
	}
	if st.Flags&SHF_COMPRESSED != 0 {
		return nil, fail("corrupt ELF file: the section-name string table (section %d) is compressed (SHF_COMPRESSED), which no linker writes", h.names)
	}
	if st.Size > MaxSectionNames {
		return nil, &Error{Msg: fmt.Sprintf("corrupt ELF file: the section-name string table (section %d) has %d bytes, more than %d", h.names, st.Size, MaxSectionNames), Err: ErrLimit}
	}
	tab, ok := rd.at(st.Offset, st.Size)
	if !ok {
		return nil, fail("truncated ELF file: it has %d bytes but the section-name string table (section %d) ends at byte %d", rd.size, h.names, st.Offset+st.Size)
	}
	for i := range secs {
		name, ok := cString(tab, names[i])
		if !ok {
			return nil, fail("corrupt ELF file: section %d's name (sh_name %d) is not a terminated string in the %d-byte section-name string table", i, names[i], len(tab))
		}
		secs[i].Name = name
	}
	return secs, nil
}

// cString is the NUL-terminated string at off in tab.
func cString(tab []byte, off uint32) (string, bool) {
	if uint64(off) >= uint64(len(tab)) {
		return "", false
	}
	for end := int(off); end < len(tab); end++ {
		if tab[end] == 0 {
			return string(tab[off:end]), true
		}
	}
	return "", false
}
