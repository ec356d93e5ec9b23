package elfhdr

import "strconv"

// The names below are the ELF specification's, spelled as debug/elf spells
// them, so that messages read the same as when debug/elf printed them.

// ELFMAG is what every ELF file starts with.
const ELFMAG = "\x7fELF"

// Offsets in e_ident.
const (
	EI_CLASS   = 4
	EI_DATA    = 5
	EI_VERSION = 6
	EI_NIDENT  = 16
)

// EV_CURRENT is the only ELF version there is (e_ident[EI_VERSION] and
// e_version).
const EV_CURRENT = 1

// Class is e_ident[EI_CLASS]: 32- or 64-bit.
type Class byte

const (
	ELFCLASSNONE Class = 0
	ELFCLASS32   Class = 1
	ELFCLASS64   Class = 2
)

var classNames = []intName{{0, "ELFCLASSNONE"}, {1, "ELFCLASS32"}, {2, "ELFCLASS64"}}

func (c Class) String() string { return nameOrOffset(uint32(c), classNames) }

// Data is e_ident[EI_DATA]: the byte order.
type Data byte

const (
	ELFDATANONE Data = 0
	ELFDATA2LSB Data = 1 // little-endian
	ELFDATA2MSB Data = 2 // big-endian
)

var dataNames = []intName{{0, "ELFDATANONE"}, {1, "ELFDATA2LSB"}, {2, "ELFDATA2MSB"}}

func (d Data) String() string { return nameOrOffset(uint32(d), dataNames) }

// Type is e_type.
type Type uint16

const (
	ET_NONE   Type = 0
	ET_REL    Type = 1
	ET_EXEC   Type = 2
	ET_DYN    Type = 3
	ET_CORE   Type = 4
	ET_LOOS   Type = 0xfe00
	ET_HIOS   Type = 0xfeff
	ET_LOPROC Type = 0xff00
	ET_HIPROC Type = 0xffff
)

var typeNames = []intName{
	{0, "ET_NONE"}, {1, "ET_REL"}, {2, "ET_EXEC"}, {3, "ET_DYN"}, {4, "ET_CORE"},
	{0xfe00, "ET_LOOS"}, {0xfeff, "ET_HIOS"}, {0xff00, "ET_LOPROC"}, {0xffff, "ET_HIPROC"},
}

// String is the name, or debug/elf's "ET_CORE+3" for a value between names.
func (t Type) String() string { return nameOrOffset(uint32(t), typeNames) }

// Machine is e_machine.
type Machine uint16

// The machines Linux runs on (the ones a library in a container can be
// built for); an object of another prints as its number.
const (
	EM_NONE         Machine = 0
	EM_SPARC        Machine = 2
	EM_386          Machine = 3
	EM_68K          Machine = 4
	EM_MIPS         Machine = 8
	EM_MIPS_RS3_LE  Machine = 10
	EM_PARISC       Machine = 15
	EM_SPARC32PLUS  Machine = 18
	EM_PPC          Machine = 20
	EM_PPC64        Machine = 21
	EM_S390         Machine = 22
	EM_ARM          Machine = 40
	EM_SH           Machine = 42
	EM_SPARCV9      Machine = 43
	EM_ARC          Machine = 45
	EM_IA_64        Machine = 50
	EM_X86_64       Machine = 62
	EM_OPENRISC     Machine = 92
	EM_XTENSA       Machine = 94
	EM_MICROBLAZE   Machine = 189
	EM_QDSP6        Machine = 164
	EM_ALTERA_NIOS2 Machine = 113
	EM_AARCH64      Machine = 183
	EM_ARC_COMPACT2 Machine = 195
	EM_RISCV        Machine = 243
	EM_BPF          Machine = 247
	EM_LOONGARCH    Machine = 258
	EM_ALPHA        Machine = 0x9026
)

var machineNames = []intName{
	{0, "EM_NONE"}, {2, "EM_SPARC"}, {3, "EM_386"}, {4, "EM_68K"}, {8, "EM_MIPS"},
	{10, "EM_MIPS_RS3_LE"}, {15, "EM_PARISC"}, {18, "EM_SPARC32PLUS"}, {20, "EM_PPC"},
	{21, "EM_PPC64"}, {22, "EM_S390"}, {40, "EM_ARM"}, {42, "EM_SH"}, {43, "EM_SPARCV9"},
	{45, "EM_ARC"}, {50, "EM_IA_64"}, {62, "EM_X86_64"}, {92, "EM_OPENRISC"}, {94, "EM_XTENSA"},
	{113, "EM_ALTERA_NIOS2"}, {164, "EM_QDSP6"}, {183, "EM_AARCH64"}, {189, "EM_MICROBLAZE"},
	{195, "EM_ARC_COMPACT2"}, {243, "EM_RISCV"}, {247, "EM_BPF"},
	{258, "EM_LOONGARCH"}, {0x9026, "EM_ALPHA"},
}

// String is the name of a Linux machine, as debug/elf prints it; any
// other value prints as its number (debug/elf knows more names; its
// "EM_X+N" form is not used for values this table lacks, as it would name
// the wrong machine).
func (m Machine) String() string { return nameOrNumber(uint32(m), machineNames) }

// ProgType is p_type.
type ProgType uint32

const (
	PT_NULL         ProgType = 0
	PT_LOAD         ProgType = 1
	PT_DYNAMIC      ProgType = 2
	PT_INTERP       ProgType = 3
	PT_NOTE         ProgType = 4
	PT_SHLIB        ProgType = 5
	PT_PHDR         ProgType = 6
	PT_TLS          ProgType = 7
	PT_LOOS         ProgType = 0x60000000
	PT_GNU_EH_FRAME ProgType = 0x6474e550
	PT_GNU_STACK    ProgType = 0x6474e551
	PT_GNU_RELRO    ProgType = 0x6474e552
	PT_GNU_PROPERTY ProgType = 0x6474e553
	PT_HIOS         ProgType = 0x6fffffff
	PT_LOPROC       ProgType = 0x70000000
	PT_HIPROC       ProgType = 0x7fffffff
)

// progNames is the whole table debug/elf prints from, so that every value
// prints as it does there (the "+N" form between names included).
var progNames = []intName{
	{0, "PT_NULL"}, {1, "PT_LOAD"}, {2, "PT_DYNAMIC"}, {3, "PT_INTERP"}, {4, "PT_NOTE"},
	{5, "PT_SHLIB"}, {6, "PT_PHDR"}, {7, "PT_TLS"}, {0x60000000, "PT_LOOS"},
	{0x6474e550, "PT_GNU_EH_FRAME"}, {0x6474e551, "PT_GNU_STACK"}, {0x6474e552, "PT_GNU_RELRO"},
	{0x6474e553, "PT_GNU_PROPERTY"}, {0x65041580, "PT_PAX_FLAGS"}, {0x65a3dbe6, "PT_OPENBSD_RANDOMIZE"},
	{0x65a3dbe7, "PT_OPENBSD_WXNEEDED"}, {0x65a41be6, "PT_OPENBSD_BOOTDATA"}, {0x6ffffffb, "PT_SUNWSTACK"},
	{0x6fffffff, "PT_HIOS"}, {0x70000000, "PT_LOPROC"}, {0x7fffffff, "PT_HIPROC"},
}

func (p ProgType) String() string { return nameOrOffset(uint32(p), progNames) }

// ProgFlag is p_flags.
type ProgFlag uint32

const (
	PF_X ProgFlag = 0x1
	PF_W ProgFlag = 0x2
	PF_R ProgFlag = 0x4
)

// SectionType is sh_type.
type SectionType uint32

const (
	SHT_NULL     SectionType = 0
	SHT_PROGBITS SectionType = 1
	SHT_SYMTAB   SectionType = 2
	SHT_STRTAB   SectionType = 3
	SHT_RELA     SectionType = 4
	SHT_DYNAMIC  SectionType = 6
	SHT_NOBITS   SectionType = 8
	SHT_DYNSYM   SectionType = 11
)

// SectionFlag is sh_flags (64 bits wide in ELFCLASS64).
type SectionFlag uint64

const (
	SHF_WRITE      SectionFlag = 0x1
	SHF_ALLOC      SectionFlag = 0x2
	SHF_EXECINSTR  SectionFlag = 0x4
	SHF_COMPRESSED SectionFlag = 0x800
)

// DynTag is d_tag, an entry's kind in the dynamic table.
type DynTag int64

const (
	DT_NULL       DynTag = 0
	DT_NEEDED     DynTag = 1
	DT_STRTAB     DynTag = 5
	DT_RELA       DynTag = 7
	DT_RELASZ     DynTag = 8
	DT_RELAENT    DynTag = 9
	DT_STRSZ      DynTag = 10
	DT_SONAME     DynTag = 14
	DT_RPATH      DynTag = 15
	DT_RUNPATH    DynTag = 29
	DT_FLAGS      DynTag = 30
	DT_RELRSZ     DynTag = 35
	DT_RELR       DynTag = 36
	DT_RELRENT    DynTag = 37
	DT_FLAGS_1    DynTag = 0x6ffffffb
	DT_VERDEF     DynTag = 0x6ffffffc
	DT_VERDEFNUM  DynTag = 0x6ffffffd
	DT_VERNEED    DynTag = 0x6ffffffe
	DT_VERNEEDNUM DynTag = 0x6fffffff
)

var dynNames = []intName{
	{0, "DT_NULL"}, {1, "DT_NEEDED"}, {5, "DT_STRTAB"}, {7, "DT_RELA"}, {8, "DT_RELASZ"},
	{9, "DT_RELAENT"}, {10, "DT_STRSZ"}, {14, "DT_SONAME"}, {15, "DT_RPATH"}, {29, "DT_RUNPATH"},
	{30, "DT_FLAGS"},
	{0x6ffffffb, "DT_FLAGS_1"}, {0x6ffffffc, "DT_VERDEF"}, {0x6ffffffd, "DT_VERDEFNUM"},
	{0x6ffffffe, "DT_VERNEED"}, {0x6fffffff, "DT_VERNEEDNUM"},
}

// String is the name of a tag the project reads, as debug/elf prints it;
// another tag (DT_RELR* included, which debug/elf does not name) prints as
// its number.
func (t DynTag) String() string {
	if t < 0 || t > 1<<32-1 {
		return strconv.FormatInt(int64(t), 10)
	}
	return nameOrNumber(uint32(t), dynNames)
}

type intName struct {
	v    uint32
	name string
}

// nameOrOffset prints v as debug/elf does from a complete table: its name,
// else the nearest name below it plus the difference ("ET_CORE+3"), else
// the number. names is sorted by value.
func nameOrOffset(v uint32, names []intName) string {
	for _, n := range names {
		if n.v == v {
			return n.name
		}
	}
	for i := len(names) - 1; i >= 0; i-- {
		if names[i].v < v {
			return names[i].name + "+" + strconv.FormatUint(uint64(v-names[i].v), 10)
		}
	}
	return strconv.FormatUint(uint64(v), 10)
}

// nameOrNumber prints v by its name from a partial table, else as its
// number.
func nameOrNumber(v uint32, names []intName) string {
	for _, n := range names {
		if n.v == v {
			return n.name
		}
	}
	return strconv.FormatUint(uint64(v), 10)
}
