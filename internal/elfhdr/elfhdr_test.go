package elfhdr_test

// The reader is held to debug/elf.NewFile (which tests may import; the
// shim may not): on the same bytes, a file debug/elf reads must read the
// same, and nothing may panic.

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/elfhdr"
)

const requireEnv = "INFERA_REQUIRE_FIXTURES"

// realFiles are ELF files of Debian packages: both classes, x86-64 and
// AArch64, shared objects, an executable and a relocatable object.
var realFiles = []struct{ path, pkg string }{
	{"/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "libibverbs1"},
	{"/usr/lib/x86_64-linux-gnu/libmana.so.1", "ibverbs-providers"},
	{"/usr/lib/x86_64-linux-gnu/libc.so.6", "libc6"},
	{"/usr/lib/x86_64-linux-gnu/crt1.o", "libc6-dev"},
	{"/usr/lib32/libgcc_s.so.1", "lib32gcc-s1"},
	{"/usr/aarch64-linux-gnu/lib/libgcc_s.so.1", "libgcc-s1-arm64-cross"},
	{"/bin/true", "coreutils"},
}

// readReal reads the real files that are present; an absent one fails the
// test when INFERA_REQUIRE_FIXTURES=1 and is only logged otherwise (the
// synthetic files still run).
func readReal(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, r := range realFiles {
		b, err := os.ReadFile(r.path)
		if err != nil {
			msg := fmt.Sprintf("fixture %s is absent (install the Debian package %s): %v", r.path, r.pkg, err)
			if os.Getenv(requireEnv) == "1" {
				t.Fatalf("%s (%s=1)", msg, requireEnv)
			}
			t.Logf("%s; left out (set %s=1 to make this a failure)", msg, requireEnv)
			continue
		}
		out[r.path] = b
	}
	return out
}

// synth builds an ELF file of the class and byte order given: the header,
// two program headers, a .text and a .data section and the section-name
// string table, laid out one after the other.
func synth(class elf.Class, data elf.Data) []byte {
	var bo binary.ByteOrder = binary.LittleEndian
	if data == elf.ELFDATA2MSB {
		bo = binary.BigEndian
	}
	is64 := class == elf.ELFCLASS64
	hsize, phsize, shsize := 52, 32, 40
	if is64 {
		hsize, phsize, shsize = 64, 56, 64
	}
	names := []byte("\x00.text\x00.data\x00.shstrtab\x00")
	type sec struct {
		name, typ      uint32
		flags, addr    uint64
		off, size, aln uint64
	}
	nprog := 2
	strOff := uint64(hsize + nprog*phsize)
	shoff := strOff + uint64(len(names))
	secs := []sec{{}, {1, uint32(elf.SHT_PROGBITS), uint64(elf.SHF_ALLOC | elf.SHF_EXECINSTR), 0x1000, 0, strOff, 16},
		{7, uint32(elf.SHT_PROGBITS), uint64(elf.SHF_ALLOC | elf.SHF_WRITE), 0x2000, strOff, 8, 8},
		{13, uint32(elf.SHT_STRTAB), 0, 0, strOff, uint64(len(names)), 1}}
	b := make([]byte, int(shoff)+len(secs)*shsize)
	copy(b, elf.ELFMAG)
	b[elf.EI_CLASS], b[elf.EI_DATA], b[elf.EI_VERSION] = byte(class), byte(data), byte(elf.EV_CURRENT)
	bo.PutUint16(b[16:], uint16(elf.ET_DYN))
	bo.PutUint16(b[18:], uint16(elf.EM_PPC64))
	bo.PutUint32(b[20:], 1)
	if is64 {
		bo.PutUint64(b[24:], 0x1234)
		bo.PutUint64(b[32:], uint64(hsize))
		bo.PutUint64(b[40:], shoff)
		bo.PutUint16(b[52:], uint16(hsize))
		bo.PutUint16(b[54:], uint16(phsize))
		bo.PutUint16(b[56:], uint16(nprog))
		bo.PutUint16(b[58:], uint16(shsize))
		bo.PutUint16(b[60:], uint16(len(secs)))
		bo.PutUint16(b[62:], uint16(len(secs)-1))
	} else {
		bo.PutUint32(b[24:], 0x1234)
		bo.PutUint32(b[28:], uint32(hsize))
		bo.PutUint32(b[32:], uint32(shoff))
		bo.PutUint16(b[40:], uint16(hsize))
		bo.PutUint16(b[42:], uint16(phsize))
		bo.PutUint16(b[44:], uint16(nprog))
		bo.PutUint16(b[46:], uint16(shsize))
		bo.PutUint16(b[48:], uint16(len(secs)))
		bo.PutUint16(b[50:], uint16(len(secs)-1))
	}
	for i, p := range []struct {
		typ, flags                       uint32
		off, vaddr, filesz, memsz, align uint64
	}{{uint32(elf.PT_LOAD), uint32(elf.PF_R | elf.PF_X), 0, 0, shoff, shoff, 0x1000}, {uint32(elf.PT_GNU_STACK), uint32(elf.PF_R | elf.PF_W), 0, 0, 0, 0, 16}} {
		o := b[hsize+i*phsize:]
		bo.PutUint32(o, p.typ)
		if is64 {
			bo.PutUint32(o[4:], p.flags)
			bo.PutUint64(o[8:], p.off)
			bo.PutUint64(o[16:], p.vaddr)
			bo.PutUint64(o[24:], p.vaddr)
			bo.PutUint64(o[32:], p.filesz)
			bo.PutUint64(o[40:], p.memsz)
			bo.PutUint64(o[48:], p.align)
		} else {
			bo.PutUint32(o[4:], uint32(p.off))
			bo.PutUint32(o[8:], uint32(p.vaddr))
			bo.PutUint32(o[12:], uint32(p.vaddr))
			bo.PutUint32(o[16:], uint32(p.filesz))
			bo.PutUint32(o[20:], uint32(p.memsz))
			bo.PutUint32(o[24:], p.flags)
			bo.PutUint32(o[28:], uint32(p.align))
		}
	}
	copy(b[strOff:], names)
	for i, s := range secs {
		o := b[int(shoff)+i*shsize:]
		bo.PutUint32(o, s.name)
		bo.PutUint32(o[4:], s.typ)
		if is64 {
			bo.PutUint64(o[8:], s.flags)
			bo.PutUint64(o[16:], s.addr)
			bo.PutUint64(o[24:], s.off)
			bo.PutUint64(o[32:], s.size)
			bo.PutUint64(o[48:], s.aln)
		} else {
			bo.PutUint32(o[8:], uint32(s.flags))
			bo.PutUint32(o[12:], uint32(s.addr))
			bo.PutUint32(o[16:], uint32(s.off))
			bo.PutUint32(o[20:], uint32(s.size))
			bo.PutUint32(o[32:], uint32(s.aln))
		}
	}
	return b
}

func synthFiles() map[string][]byte {
	out := map[string][]byte{}
	for _, c := range []elf.Class{elf.ELFCLASS32, elf.ELFCLASS64} {
		for _, d := range []elf.Data{elf.ELFDATA2LSB, elf.ELFDATA2MSB} {
			out[fmt.Sprintf("synthetic %v %v", c, d)] = synth(c, d)
		}
	}
	return out
}

// variants are truncations and corruptions of a valid file b, each
// aimed at one check of the reader.
func variants(b []byte) [][]byte {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	bo := f.ByteOrder
	is64 := f.Class == elf.ELFCLASS64
	// Offsets of e_phentsize, e_shnum, e_shstrndx and e_shoff.
	phentsize, shnum, shstrndx := 42, 48, 50
	if is64 {
		phentsize, shnum, shstrndx = 54, 60, 62
	}
	edit := func(fn func(c []byte)) []byte {
		c := bytes.Clone(b)
		fn(c)
		return c
	}
	out := [][]byte{}
	for _, n := range []int{0, 3, 4, 5, 6, 16, 51, 52, 63, 64, 200, len(b) / 2, len(b) - 1} {
		if n <= len(b) {
			out = append(out, b[:n])
		}
	}
	out = append(out,
		edit(func(c []byte) { c[elf.EI_VERSION] = 2 }),
		edit(func(c []byte) { c[elf.EI_CLASS] ^= 3 }),
		edit(func(c []byte) { c[elf.EI_DATA] ^= 3 }),
		edit(func(c []byte) { c[elf.EI_DATA] = 7 }),
		edit(func(c []byte) { bo.PutUint32(c[20:], 7) }), // e_version
		edit(func(c []byte) { bo.PutUint16(c[phentsize:], 8) }),
		edit(func(c []byte) { bo.PutUint16(c[phentsize+2:], 0xffff) }), // e_phnum
		edit(func(c []byte) { bo.PutUint16(c[shnum:], 0) }),            // e_shnum 0: extended numbering
		edit(func(c []byte) { bo.PutUint16(c[shstrndx:], bo.Uint16(c[shnum:])) }),
		edit(func(c []byte) { bo.PutUint16(c[shstrndx:], 1) }),
		edit(func(c []byte) { bo.PutUint16(c[shnum-2:], 4) }), // e_shentsize
	)
	if len(f.Sections) > 1 {
		var off uint64
		if is64 {
			off = bo.Uint64(b[40:])
		} else {
			off = uint64(bo.Uint32(b[32:]))
		}
		entsz := uint64(bo.Uint16(b[shnum-2:]))
		s1 := off + entsz // section 1's header
		if s1+entsz <= uint64(len(b)) {
			out = append(out,
				edit(func(c []byte) { bo.PutUint32(c[s1:], 0xfffffff0) }), // sh_name far out
				edit(func(c []byte) {
					if is64 {
						bo.PutUint64(c[s1+24:], 1<<63) // sh_offset negative
					} else {
						bo.PutUint32(c[s1+16:], 0xffffffff)
					}
				}),
				edit(func(c []byte) { bo.PutUint32(c[s1+4:], uint32(elf.SHT_STRTAB)) }),
			)
		}
	}
	return out
}

// readElf is debug/elf.NewFile, a panic turned into an error.
func readElf(data []byte) (f *elf.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("debug/elf panicked: %v", r)
		}
	}()
	return elf.NewFile(bytes.NewReader(data))
}

// compare reads data with both readers and fails t where they disagree.
func compare(t *testing.T, data []byte) {
	t.Helper()
	ours, err := elfhdr.Read(bytes.NewReader(data), int64(len(data)))
	theirs, terr := readElf(data)
	if err != nil {
		var e *elfhdr.Error
		if !errors.As(err, &e) || e.Msg == "" {
			t.Fatalf("error is not an *elfhdr.Error with a message: %#v", err)
		}
		if ours != nil {
			t.Fatalf("a File and an error: %v", err)
		}
	}
	switch {
	case terr != nil && err != nil:
		return
	case terr != nil:
		for _, s := range ours.Sections {
			if s.Flags&elfhdr.SHF_COMPRESSED != 0 {
				return // debug/elf also reads a compressed section's own header
			}
		}
		t.Fatalf("read a file debug/elf refuses (%v)", terr)
	case err != nil:
		if errors.Is(err, elfhdr.ErrLimit) {
			return
		}
		if v := theirs.ByteOrder.Uint32(data[20:]); v != uint32(elf.EV_CURRENT) {
			return // debug/elf compares e_version's low byte only; the loader (and elfhdr) the whole word
		}
		if len(theirs.Sections) > 0 {
			for _, s := range theirs.Sections {
				if s.Type == elf.SHT_STRTAB && s.Flags&elf.SHF_COMPRESSED != 0 {
					return // a compressed section-name table: refused, see readSections
				}
			}
		}
		t.Fatalf("refused a file debug/elf reads: %v", err)
	}
	if ours.Class.String() != theirs.Class.String() || ours.Data.String() != theirs.Data.String() ||
		uint16(ours.Machine) != uint16(theirs.Machine) || uint16(ours.Type) != uint16(theirs.Type) ||
		ours.Entry != theirs.Entry || ours.ByteOrder != theirs.ByteOrder {
		t.Fatalf("header: ours %v %v %v %v entry 0x%x %v, debug/elf %v %v %v %v entry 0x%x %v",
			ours.Class, ours.Data, ours.Machine, ours.Type, ours.Entry, ours.ByteOrder,
			theirs.Class, theirs.Data, theirs.Machine, theirs.Type, theirs.Entry, theirs.ByteOrder)
	}
	if len(ours.Progs) != len(theirs.Progs) {
		t.Fatalf("%d program headers, debug/elf %d", len(ours.Progs), len(theirs.Progs))
	}
	for i, p := range ours.Progs {
		q := theirs.Progs[i].ProgHeader
		want := elfhdr.Prog{Type: elfhdr.ProgType(q.Type), Flags: elfhdr.ProgFlag(q.Flags), Off: q.Off, Vaddr: q.Vaddr,
			Paddr: q.Paddr, Filesz: q.Filesz, Memsz: q.Memsz, Align: q.Align}
		if p != want {
			t.Fatalf("program header %d: %+v, debug/elf %+v", i, p, want)
		}
	}
	if len(ours.Sections) != len(theirs.Sections) {
		t.Fatalf("%d sections, debug/elf %d", len(ours.Sections), len(theirs.Sections))
	}
	for i, s := range ours.Sections {
		q := theirs.Sections[i].SectionHeader
		got := s
		got.Flags = elfhdr.SectionFlag(uint32(s.Flags)) // debug/elf keeps 32 bits of sh_flags
		want := elfhdr.Section{Name: q.Name, Type: elfhdr.SectionType(q.Type), Flags: elfhdr.SectionFlag(q.Flags),
			Addr: q.Addr, Offset: q.Offset, Size: q.FileSize, Link: q.Link, Info: q.Info,
			Addralign: q.Addralign, Entsize: q.Entsize}
		if q.Flags&elf.SHF_COMPRESSED != 0 {
			want.Addralign = s.Addralign // debug/elf reports the uncompressed alignment
		}
		if got != want {
			t.Fatalf("section %d: %+v, debug/elf %+v", i, got, want)
		}
	}
}

func TestLikeDebugElf(t *testing.T) {
	files := readReal(t)
	for name, b := range synthFiles() {
		files[name] = b
	}
	for name, b := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			f, err := elfhdr.Read(bytes.NewReader(b), int64(len(b)))
			require.NoError(t, err)
			assert.NotEmpty(t, f.Sections)
			compare(t, b)
			for i, v := range variants(b) {
				t.Run(strconv.Itoa(i), func(t *testing.T) { compare(t, v) })
			}
		})
	}
}

func TestRealFileNames(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	b, err := os.ReadFile(libc)
	if err != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("fixture %s: %v (%s=1)", libc, err, requireEnv)
		}
		t.Skipf("fixture %s is absent (install libc6): %v; set %s=1 to make this a failure", libc, err, requireEnv)
	}
	f, err := elfhdr.Read(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	assert.Equal(t, "ELFCLASS64 ELFDATA2LSB EM_X86_64 ET_DYN", fmt.Sprintf("%v %v %v %v", f.Class, f.Data, f.Machine, f.Type))
	var names []string
	for _, s := range f.Sections {
		names = append(names, s.Name)
	}
	assert.Contains(t, names, ".dynstr")
	assert.Contains(t, names, ".gnu.version_d")
	assert.Equal(t, "", f.Sections[0].Name)
}

func TestSynthetic(t *testing.T) {
	b := synth(elf.ELFCLASS32, elf.ELFDATA2MSB)
	f, err := elfhdr.Read(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	assert.Equal(t, binary.BigEndian, f.ByteOrder)
	assert.Equal(t, elfhdr.ELFCLASS32, f.Class)
	assert.Equal(t, elfhdr.EM_PPC64, f.Machine)
	assert.Equal(t, uint64(0x1234), f.Entry)
	require.Len(t, f.Progs, 2)
	assert.Equal(t, elfhdr.PT_LOAD, f.Progs[0].Type)
	assert.Equal(t, elfhdr.PF_R|elfhdr.PF_W, f.Progs[1].Flags)
	require.Len(t, f.Sections, 4)
	assert.Equal(t, ".data", f.Sections[2].Name)
	assert.Equal(t, elfhdr.SHF_ALLOC|elfhdr.SHF_WRITE, f.Sections[2].Flags)
	assert.Equal(t, uint64(0x2000), f.Sections[2].Addr)
}

// Each failure names what is wrong and its value.
func TestErrors(t *testing.T) {
	good := synth(elf.ELFCLASS64, elf.ELFDATA2LSB)
	edit := func(fn func(b []byte)) []byte { b := bytes.Clone(good); fn(b); return b }
	le := binary.LittleEndian
	for _, tc := range []struct {
		name string
		data []byte
		msg  string
		is   error
	}{
		{"empty", nil, `not an ELF file (it starts with "")`, elfhdr.ErrNotELF},
		{"text", []byte("#!/bin/sh\necho not a library\n"), `not an ELF file (it starts with "#!/bin/sh\necho n")`, elfhdr.ErrNotELF},
		{"magic only", []byte("\x7fELF\x02"), "truncated ELF file: 5 bytes, shorter than an ELF header", nil},
		{"short 64-bit header", good[:40], "truncated ELF file: 40 bytes, shorter than the 64-byte ELF header", nil},
		{"short 32-bit header", synth(elf.ELFCLASS32, elf.ELFDATA2LSB)[:40], "truncated ELF file: 40 bytes, shorter than the 52-byte ELF header", nil},
		{"byte order", edit(func(b []byte) { b[elf.EI_DATA] = 9 }), "corrupt ELF header: unknown byte order 9", nil},
		{"class", edit(func(b []byte) { b[elf.EI_CLASS] = 7 }), "corrupt ELF header: unknown class 7", nil},
		{"ident version", edit(func(b []byte) { b[elf.EI_VERSION] = 2 }), "corrupt ELF header: unknown ELF version 2 in e_ident[EI_VERSION], want 1", nil},
		{"e_version", edit(func(b []byte) { le.PutUint32(b[20:], 5) }), "corrupt ELF header: e_version is 5, want 1", nil},
		{"phentsize", edit(func(b []byte) { le.PutUint16(b[54:], 8) }), "corrupt ELF header: program header size (e_phentsize) 8, want at least 56", nil},
		{"shentsize", edit(func(b []byte) { le.PutUint16(b[58:], 8) }), "corrupt ELF header: section header size (e_shentsize) 8, want at least 64", nil},
		{"shstrndx", edit(func(b []byte) { le.PutUint16(b[62:], 4) }), "corrupt ELF header: section-name string table index (e_shstrndx) 4 is not below the section count 4", nil},
		{"phnum", edit(func(b []byte) { le.PutUint16(b[56:], 5000) }), "corrupt ELF header: 5000 program headers (e_phnum), more than 4096", elfhdr.ErrLimit},
		{"program headers past the end", edit(func(b []byte) { le.PutUint16(b[56:], 100) }), fmt.Sprintf("truncated ELF file: it has %d bytes but its program headers end at byte %d", len(good), 64+100*56), nil},
		{"section headers past the end", good[:len(good)-1], fmt.Sprintf("truncated ELF file: it has %d bytes but its section headers end at byte %d", len(good)-1, len(good)), nil},
		{"shnum without shoff", edit(func(b []byte) { le.PutUint64(b[40:], 0) }), "corrupt ELF header: 4 section headers (e_shnum) but no section header offset (e_shoff 0)", nil},
		{"extended numbering, small count", edit(func(b []byte) { le.PutUint16(b[60:], 0) }), "corrupt ELF file: e_shnum is 0 and section 0's sh_size, the section count, is 0, below 0xff00", nil},
		{"name table type", edit(func(b []byte) { le.PutUint16(b[62:], 1) }), "corrupt ELF file: the section-name string table (section 1, e_shstrndx) has type 1, want SHT_STRTAB (3)", nil},
		{"section name", edit(func(b []byte) { le.PutUint32(b[len(b)-3*64:], 999) }), "corrupt ELF file: section 1's name (sh_name 999) is not a terminated string in the 23-byte section-name string table", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := elfhdr.Read(bytes.NewReader(tc.data), int64(len(tc.data)))
			assert.Nil(t, f)
			require.EqualError(t, err, tc.msg)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
		})
	}
}

// The names messages show are debug/elf's.
func TestStrings(t *testing.T) {
	for v := 0; v < 256; v++ {
		assert.Equal(t, elf.Class(v).String(), elfhdr.Class(v).String())
		assert.Equal(t, elf.Data(v).String(), elfhdr.Data(v).String())
	}
	for v := 0; v <= 0xffff; v++ {
		if got, want := elfhdr.Type(v).String(), elf.Type(v).String(); got != want {
			t.Fatalf("Type(%d): %q, debug/elf %q", v, got, want)
		}
		got := elfhdr.Machine(v).String()
		if _, numeric := strconv.Atoi(got); numeric != nil && got != elf.Machine(v).String() {
			t.Fatalf("Machine(%d): %q, debug/elf %q", v, got, elf.Machine(v).String())
		}
	}
	for _, m := range []elf.Machine{elf.EM_X86_64, elf.EM_AARCH64, elf.EM_386, elf.EM_ARM, elf.EM_PPC64, elf.EM_RISCV, elf.EM_S390, elf.EM_LOONGARCH, elf.EM_MIPS} {
		assert.Equal(t, m.String(), elfhdr.Machine(m).String())
	}
	for _, base := range []uint32{0, 1, 2, 7, 8, 0x60000000, 0x6474e550, 0x6474e553, 0x6fffffff, 0x70000000, 0x7fffffff} {
		for _, v := range []uint32{base, base + 1, base + 2, base - 1} {
			assert.Equal(t, elf.ProgType(v).String(), elfhdr.ProgType(v).String(), "ProgType 0x%x", v)
		}
	}
	for _, tag := range []elf.DynTag{elf.DT_NULL, elf.DT_NEEDED, elf.DT_SONAME, elf.DT_RPATH, elf.DT_RUNPATH, elf.DT_STRTAB,
		elf.DT_FLAGS_1, elf.DT_VERNEED, elf.DT_VERNEEDNUM, elf.DT_VERDEF, elf.DT_VERDEFNUM} {
		assert.Equal(t, tag.String(), elfhdr.DynTag(tag).String())
	}
}

// maxVariedSeed is the largest seed whose variants seed the fuzzer too.
const maxVariedSeed = 512 << 10

// fuzzSeeds are the real and synthetic files and their variants.
func fuzzSeeds(t testing.TB) [][]byte {
	files := readReal(t)
	for name, b := range synthFiles() {
		files[name] = b
	}
	var out [][]byte
	for _, b := range files {
		out = append(out, b)
		// Variants of a large file (libc) would make every fuzzing input
		// megabytes long; TestLikeDebugElf reads them.
		if len(b) <= maxVariedSeed {
			out = append(out, variants(b)...)
		}
	}
	return out
}

func FuzzHeaders(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	le := binary.LittleEndian
	f.Add(withNotes(le, segment{8, note(le, 8, "GNU\x00", 5, make([]byte, 12))}, segment{4, note(le, 4, "GNU\x00", 3, []byte{1, 2, 3, 4})}))
	f.Fuzz(func(t *testing.T, data []byte) {
		compare(t, data)
		// A build ID read is bytes of the file, whatever the notes say.
		if h, err := elfhdr.Read(bytes.NewReader(data), int64(len(data))); err == nil {
			if id, ok := h.BuildID(bytes.NewReader(data), int64(len(data))); ok && !bytes.Contains(data, id) {
				t.Fatalf("build ID %x is not in the file", id)
			}
		}
	})
}
