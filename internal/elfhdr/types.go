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

var classNames = []intName{
	{uint32(ELFCLASSNONE), "ELFCLASSNONE"}, {uint32(ELFCLASS32), "ELFCLASS32"}, {uint32(ELFCLASS64), "ELFCLASS64"},
}

func (c Class) String() string { return nameOrOffset(uint32(c), classNames) }

// Data is e_ident[EI_DATA]: the byte order.
type Data byte

const (
	ELFDATANONE Data = 0
	ELFDATA2LSB Data = 1 // little-endian
	ELFDATA2MSB Data = 2 // big-endian
)

var dataNames = []intName{
	{uint32(ELFDATANONE), "ELFDATANONE"}, {uint32(ELFDATA2LSB), "ELFDATA2LSB"}, {uint32(ELFDATA2MSB), "ELFDATA2MSB"},
}

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
	{uint32(ET_NONE), "ET_NONE"}, {uint32(ET_REL), "ET_REL"}, {uint32(ET_EXEC), "ET_EXEC"}, {uint32(ET_DYN), "ET_DYN"}, {uint32(ET_CORE), "ET_CORE"},
	{uint32(ET_LOOS), "ET_LOOS"}, {uint32(ET_HIOS), "ET_HIOS"}, {uint32(ET_LOPROC), "ET_LOPROC"}, {uint32(ET_HIPROC), "ET_HIPROC"},
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
	{uint32(EM_NONE), "EM_NONE"}, {uint32(EM_SPARC), "EM_SPARC"}, {uint32(EM_386), "EM_386"}, {uint32(EM_68K), "EM_68K"}, {uint32(EM_MIPS), "EM_MIPS"},
	{uint32(EM_MIPS_RS3_LE), "EM_MIPS_RS3_LE"}, {uint32(EM_PARISC), "EM_PARISC"}, {uint32(EM_SPARC32PLUS), "EM_SPARC32PLUS"}, {uint32(EM_PPC), "EM_PPC"},
	{uint32(EM_PPC64), "EM_PPC64"}, {uint32(EM_S390), "EM_S390"}, {uint32(EM_ARM), "EM_ARM"}, {uint32(EM_SH), "EM_SH"}, {uint32(EM_SPARCV9), "EM_SPARCV9"},
	{uint32(EM_ARC), "EM_ARC"}, {uint32(EM_IA_64), "EM_IA_64"}, {uint32(EM_X86_64), "EM_X86_64"}, {uint32(EM_OPENRISC), "EM_OPENRISC"}, {uint32(EM_XTENSA), "EM_XTENSA"},
	{uint32(EM_ALTERA_NIOS2), "EM_ALTERA_NIOS2"}, {uint32(EM_QDSP6), "EM_QDSP6"}, {uint32(EM_AARCH64), "EM_AARCH64"}, {uint32(EM_MICROBLAZE), "EM_MICROBLAZE"},
	{uint32(EM_ARC_COMPACT2), "EM_ARC_COMPACT2"}, {uint32(EM_RISCV), "EM_RISCV"}, {uint32(EM_BPF), "EM_BPF"},
	{uint32(EM_LOONGARCH), "EM_LOONGARCH"}, {uint32(EM_ALPHA), "EM_ALPHA"},
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
	{uint32(PT_NULL), "PT_NULL"}, {uint32(PT_LOAD), "PT_LOAD"}, {uint32(PT_DYNAMIC), "PT_DYNAMIC"}, {uint32(PT_INTERP), "PT_INTERP"}, {uint32(PT_NOTE), "PT_NOTE"},
	{uint32(PT_SHLIB), "PT_SHLIB"}, {uint32(PT_PHDR), "PT_PHDR"}, {uint32(PT_TLS), "PT_TLS"}, {uint32(PT_LOOS), "PT_LOOS"},
	{uint32(PT_GNU_EH_FRAME), "PT_GNU_EH_FRAME"}, {uint32(PT_GNU_STACK), "PT_GNU_STACK"}, {uint32(PT_GNU_RELRO), "PT_GNU_RELRO"},
	{uint32(PT_GNU_PROPERTY), "PT_GNU_PROPERTY"}, {0x65041580, "PT_PAX_FLAGS"}, {0x65a3dbe6, "PT_OPENBSD_RANDOMIZE"},
	{0x65a3dbe7, "PT_OPENBSD_WXNEEDED"}, {0x65a41be6, "PT_OPENBSD_BOOTDATA"}, {0x6ffffffb, "PT_SUNWSTACK"},
	{uint32(PT_HIOS), "PT_HIOS"}, {uint32(PT_LOPROC), "PT_LOPROC"}, {uint32(PT_HIPROC), "PT_HIPROC"},
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
	{uint32(DT_NULL), "DT_NULL"}, {uint32(DT_NEEDED), "DT_NEEDED"}, {uint32(DT_STRTAB), "DT_STRTAB"}, {uint32(DT_RELA), "DT_RELA"}, {uint32(DT_RELASZ), "DT_RELASZ"},
	{uint32(DT_RELAENT), "DT_RELAENT"}, {uint32(DT_STRSZ), "DT_STRSZ"}, {uint32(DT_SONAME), "DT_SONAME"}, {uint32(DT_RPATH), "DT_RPATH"}, {uint32(DT_RUNPATH), "DT_RUNPATH"},
	{uint32(DT_FLAGS), "DT_FLAGS"},
	{uint32(DT_FLAGS_1), "DT_FLAGS_1"}, {uint32(DT_VERDEF), "DT_VERDEF"}, {uint32(DT_VERDEFNUM), "DT_VERDEFNUM"},
	{uint32(DT_VERNEED), "DT_VERNEED"}, {uint32(DT_VERNEEDNUM), "DT_VERNEEDNUM"},
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
