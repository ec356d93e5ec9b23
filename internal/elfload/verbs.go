package elfload

import (
	"bytes"
	"strings"

	"github.com/infera/infera-exec/internal/elfhdr"
)

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
	img, err := openImage(o.Path)
	if err != nil {
		return 0, 0, false
	}
	defer img.close()
	if img.hdr.Class != elfhdr.ELFCLASS64 {
		return 0, 0, false
	}
	var relative uint32
	switch img.hdr.Machine {
	case elfhdr.EM_X86_64:
		relative = relX86Relative
	case elfhdr.EM_AARCH64:
		relative = relA64Relative
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
		return len(places) <= maxCandidates
	}
	if rela, ok := d.first(elfhdr.DT_RELA); ok {
		sz, _ := d.first(elfhdr.DT_RELASZ)
		ent, hasEnt := d.first(elfhdr.DT_RELAENT)
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
	if relr, ok := d.first(elfhdr.DT_RELR); ok {
		sz, _ := d.first(elfhdr.DT_RELRSZ)
		if ent, hasEnt := d.first(elfhdr.DT_RELRENT); hasEnt && ent != 8 {
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
func (img *image) stringAddrs(name string) map[uint64]bool {
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
		for i := 0; len(addrs) < maxCandidates; {
			j := bytes.Index(b[i:], needle)
			if j < 0 {
				return
			}
			addrs[addr+uint64(i+j)] = true
			i += j + 1
		}
	}
	for _, s := range img.hdr.Sections {
		if s.Type == elfhdr.SHT_PROGBITS && s.Flags&elfhdr.SHF_ALLOC != 0 && s.Flags&(elfhdr.SHF_WRITE|elfhdr.SHF_EXECINSTR) == 0 {
			scan(s.Addr, s.Offset, s.Size)
		}
	}
	if len(img.hdr.Sections) == 0 {
		for _, p := range img.hdr.Progs {
			if p.Type == elfhdr.PT_LOAD && p.Flags&elfhdr.PF_W == 0 {
				scan(p.Vaddr, p.Off, p.Filesz)
			}
		}
	}
	return addrs
}
