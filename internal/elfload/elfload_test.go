package elfload_test

// Tests of reading and verifying ELF objects against real files: Debian bookworm's
// rdma-core 44.0-2 (libibverbs1, ibverbs-providers), glibc, libgcc of other
// architectures, and same-length byte edits of copies of them.

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/elfhdr"
	"github.com/infera/infera-exec/internal/elfload"
)

const (
	elfMultiarch    = "/usr/lib/x86_64-linux-gnu"
	elfLibmana      = elfMultiarch + "/libmana.so.1.0.44.0"
	elfLibmanaLink  = elfMultiarch + "/libmana.so.1"
	elfLibibverbs   = elfMultiarch + "/libibverbs.so.1"
	elfLibc         = elfMultiarch + "/libc.so.6"
	elfA64Dir       = "/usr/aarch64-linux-gnu/lib"
	elfA64Libgcc    = elfA64Dir + "/libgcc_s.so.1"
	elfA64Libc      = elfA64Dir + "/libc.so.6"
	elfLib32Dir     = "/usr/lib32"
	elfLib32Libgcc  = elfLib32Dir + "/libgcc_s.so.1"
	elfLib32Libc    = elfLib32Dir + "/libc.so.6"
	elfCrt1         = elfMultiarch + "/crt1.o"
	elfProviderDir  = elfMultiarch + "/libibverbs"
	elfRequireEnv   = "INFERA_REQUIRE_FIXTURES"
	elfPkgProviders = "ibverbs-providers (rdma-core 44.0-2, bookworm)"
	elfPkgVerbs     = "libibverbs1 (rdma-core 44.0-2, bookworm)"
)

// elfFixture skips the test when a file from a Debian package is absent,
// or fails it when INFERA_REQUIRE_FIXTURES=1 (CI).
func elfFixture(t testing.TB, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	msg := fmt.Sprintf("fixture %s is absent: install the Debian package %s", path, pkg)
	if os.Getenv(elfRequireEnv) == "1" {
		t.Fatalf("%s (%s=1)", msg, elfRequireEnv)
	}
	t.Skipf("%s; skipping (set %s=1 to make this a failure)", msg, elfRequireEnv)
}

func elfRealPair(t *testing.T) (host, ref *elfload.Object) {
	t.Helper()
	elfFixture(t, elfLibmana, elfPkgProviders)
	elfFixture(t, elfLibibverbs, elfPkgVerbs)
	host, err := elfload.Read(elfLibmana)
	require.NoError(t, err)
	ref, err = elfload.Read(elfLibibverbs)
	require.NoError(t, err)
	return host, ref
}

// elfVerify verifies host as the provider swap does: against the
// container's libibverbs (ref), calling it "host build" in the details.
func elfVerify(host, ref *elfload.Object, soname string, libDirs []string) ([]elfload.Check, bool) {
	return elfload.Verify(host, elfload.Target{Like: ref, Soname: soname, LibDirs: libDirs, Label: "host build"})
}

// elfTestHash is the System V ELF hash, written here independently of the
// package's, to recompute vna_hash after an edit.
func elfTestHash(s string) uint32 {
	var h uint32
	for _, c := range []byte(s) {
		h = h<<4 + uint32(c)
		if g := h & 0xf0000000; g != 0 {
			h ^= g >> 24
			h &^= g
		}
	}
	return h
}

// elfCopy is an editable copy of a real ELF file; its sections are read
// with debug/elf (the package reads the dynamic table instead).
type elfCopy struct {
	t    *testing.T
	name string
	b    []byte
	f    *elf.File
}

func elfCopyOf(t *testing.T, src string) *elfCopy {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	f, err := elf.NewFile(bytes.NewReader(b))
	require.NoError(t, err)
	return &elfCopy{t: t, name: filepath.Base(src), b: b, f: f}
}

func (c *elfCopy) section(name string) *elf.Section {
	s := c.f.Section(name)
	require.NotNil(c.t, s, "section %s", name)
	return s
}

// dynstr is the offset of s in .dynstr, which must hold it exactly once.
func (c *elfCopy) dynstr(s string) uint32 {
	sec := c.section(".dynstr")
	data := c.b[sec.Offset : sec.Offset+sec.Size]
	needle := []byte("\x00" + s + "\x00")
	require.Equal(c.t, 1, bytes.Count(data, needle), "%q in .dynstr", s)
	return uint32(bytes.Index(data, needle) + 1)
}

// replaceDynstr edits a string of .dynstr in place (same length).
func (c *elfCopy) replaceDynstr(old, new string) {
	require.Len(c.t, new, len(old))
	off := c.section(".dynstr").Offset + uint64(c.dynstr(old))
	copy(c.b[off:], new)
}

// vernaux is the file offset of the Vernaux record naming version name.
func (c *elfCopy) vernaux(name string) uint64 {
	strOff := c.dynstr(name)
	sec := c.section(".gnu.version_r")
	le := binary.LittleEndian
	for vn := sec.Offset; ; {
		cnt, aux, next := le.Uint16(c.b[vn+2:]), le.Uint32(c.b[vn+8:]), le.Uint32(c.b[vn+12:])
		a := vn + uint64(aux)
		for i := uint16(0); i < cnt; i++ {
			if le.Uint32(c.b[a+8:]) == strOff {
				return a
			}
			a += uint64(le.Uint32(c.b[a+12:]))
		}
		require.NotZero(c.t, next, "no Vernaux for %s", name)
		vn += uint64(next)
	}
}

// verdef is the file offset of the Verdef record defining version name.
func (c *elfCopy) verdef(name string) uint64 {
	strOff := c.dynstr(name)
	sec := c.section(".gnu.version_d")
	le := binary.LittleEndian
	for vd := sec.Offset; ; {
		aux, next := le.Uint32(c.b[vd+12:]), le.Uint32(c.b[vd+16:])
		if le.Uint32(c.b[vd+uint64(aux):]) == strOff {
			return vd
		}
		require.NotZero(c.t, next, "no Verdef for %s", name)
		vd += uint64(next)
	}
}

// renameNeededVersion changes a needed version's name and, if rehash, its
// stored vna_hash to match, as a real build needing that version has.
func (c *elfCopy) renameNeededVersion(old, new string, rehash bool) {
	a := c.vernaux(old)
	c.replaceDynstr(old, new)
	if rehash {
		binary.LittleEndian.PutUint32(c.b[a:], elfTestHash(new))
	}
}

func (c *elfCopy) put32(off uint64, v uint32) { binary.LittleEndian.PutUint32(c.b[off:], v) }

// fileOff maps a virtual address to a file offset through PT_LOAD.
func (c *elfCopy) fileOff(addr uint64) uint64 {
	for _, p := range c.f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return p.Off + addr - p.Vaddr
		}
	}
	c.t.Fatalf("address 0x%x is not in a loaded segment", addr)
	return 0
}

func (c *elfCopy) write(dir string) string {
	if dir == "" {
		dir = c.t.TempDir()
	}
	p := filepath.Join(dir, c.name)
	require.NoError(c.t, os.WriteFile(p, c.b, 0o644))
	return p
}

func elfFailed(checks []elfload.Check) []elfload.Check {
	var out []elfload.Check
	for _, c := range checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

func elfCheckNamed(t *testing.T, checks []elfload.Check, name string) elfload.Check {
	t.Helper()
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %v", name, checks)
	return elfload.Check{}
}

func TestReadRealLibmana(t *testing.T) {
	host, ref := elfRealPair(t)

	assert.Equal(t, &elfload.Object{
		Path: elfLibmana, Class: elfhdr.ELFCLASS64, Data: elfhdr.ELFDATA2LSB, Machine: elfhdr.EM_X86_64, Type: elfhdr.ET_DYN,
		Soname: "libmana.so.1",
		Needed: []string{"libibverbs.so.1", "libc.so.6"},
		VersionNeeds: map[string][]string{
			"libc.so.6":       {"GLIBC_2.4", "GLIBC_2.2.5"},
			"libibverbs.so.1": {"IBVERBS_PRIVATE_34"},
		},
		Defines: []string{"MANA_1.0"},
		Size:    22688,
	}, elfExported(host))

	assert.Equal(t, "libibverbs.so.1", ref.Soname)
	assert.Equal(t, []string{"IBVERBS_1.0", "IBVERBS_1.1", "IBVERBS_1.5", "IBVERBS_1.6", "IBVERBS_1.7", "IBVERBS_1.8",
		"IBVERBS_1.9", "IBVERBS_1.10", "IBVERBS_1.11", "IBVERBS_1.12", "IBVERBS_1.13", "IBVERBS_1.14", "IBVERBS_PRIVATE_34"}, ref.Defines)
	assert.Equal(t, elfLibibverbs, ref.Path, "the path as given, not the symlink's target")
	assert.EqualValues(t, 133744, ref.Size, "the size of the file the symlink leads to")

	viaLink, err := elfload.Read(elfLibmanaLink)
	require.NoError(t, err)
	assert.Equal(t, elfLibmanaLink, viaLink.Path)
	assert.Equal(t, host.VersionNeeds, viaLink.VersionNeeds)
	assert.EqualValues(t, 22688, viaLink.Size)
}

// elfExported is o without its unexported fields, for comparing with a
// literal.
func elfExported(o *elfload.Object) *elfload.Object {
	return &elfload.Object{Path: o.Path, Class: o.Class, Data: o.Data, Machine: o.Machine, Type: o.Type,
		Soname: o.Soname, Needed: o.Needed, VersionNeeds: o.VersionNeeds, Defines: o.Defines, Size: o.Size}
}

func TestVerifyRealLibmanaPasses(t *testing.T) {
	host, ref := elfRealPair(t)
	checks, ok := elfVerify(host, ref, "libmana.so.1", []string{elfMultiarch})
	assert.True(t, ok)
	assert.Equal(t, []elfload.Check{
		{Name: "elf", OK: true, Detail: elfLibmana + ": ELFCLASS64 little-endian x86-64 shared object, 22688 bytes"},
		{Name: "class", OK: true, Detail: "ELFCLASS64, like " + elfLibibverbs},
		{Name: "byte order", OK: true, Detail: "little-endian, like " + elfLibibverbs},
		{Name: "machine", OK: true, Detail: "x86-64, like " + elfLibibverbs},
		{Name: "soname", OK: true, Detail: `SONAME "libmana.so.1"`},
		{Name: "needed libibverbs.so.1", OK: true, Detail: "libibverbs.so.1 found at " + elfLibibverbs},
		{Name: "needed libc.so.6", OK: true, Detail: "libc.so.6 found at " + elfLibc},
		{Name: "version IBVERBS_PRIVATE_34", OK: true, Detail: "IBVERBS_PRIVATE_34 from libibverbs.so.1, defined by " + elfLibibverbs},
		{Name: "version GLIBC_2.4", OK: true, Detail: "GLIBC_2.4 from libc.so.6, defined by " + elfLibc},
		{Name: "version GLIBC_2.2.5", OK: true, Detail: "GLIBC_2.2.5 from libc.so.6, defined by " + elfLibc},
	}, checks)
}

func TestVerifyWrongSoname(t *testing.T) {
	host, ref := elfRealPair(t)
	checks, ok := elfVerify(host, ref, "elfload.so.1", []string{elfMultiarch})
	assert.False(t, ok)
	assert.Equal(t, []elfload.Check{
		{Name: "soname", OK: false, Detail: `host build's SONAME is "libmana.so.1", want "elfload.so.1"`},
	}, elfFailed(checks))
	assert.Len(t, checks, 10, "the passing checks are reported too")
}

func TestVerifyNoSonameAndNoLibDirs(t *testing.T) {
	host, ref := elfRealPair(t)
	c := elfCopyOf(t, elfLibmana)
	// DT_SONAME (tag 14) becomes DT_DEBUG (21): the file has no SONAME.
	dyn := c.section(".dynamic")
	for off := dyn.Offset; off < dyn.Offset+dyn.Size; off += 16 {
		if binary.LittleEndian.Uint64(c.b[off:]) == uint64(elf.DT_SONAME) {
			binary.LittleEndian.PutUint64(c.b[off:], uint64(elf.DT_DEBUG))
		}
	}
	noSoname, err := elfload.Read(c.write(""))
	require.NoError(t, err)
	assert.Equal(t, "", noSoname.Soname)

	checks, ok := elfVerify(noSoname, ref, "libmana.so.1", nil)
	assert.False(t, ok)
	assert.Equal(t, []elfload.Check{
		{Name: "soname", OK: false, Detail: `host build has no SONAME (DT_SONAME), want "libmana.so.1"`},
		{Name: "needed libibverbs.so.1", OK: false, Detail: "libibverbs.so.1 not found (no library directories given)"},
		{Name: "needed libc.so.6", OK: false, Detail: "libc.so.6 not found (no library directories given)"},
		{Name: "version IBVERBS_PRIVATE_34", OK: false, Detail: "needs IBVERBS_PRIVATE_34 from libibverbs.so.1, but libibverbs.so.1 not found (no library directories given)"},
		{Name: "version GLIBC_2.4", OK: false, Detail: "needs GLIBC_2.4 from libc.so.6, but libc.so.6 not found (no library directories given)"},
		{Name: "version GLIBC_2.2.5", OK: false, Detail: "needs GLIBC_2.2.5 from libc.so.6, but libc.so.6 not found (no library directories given)"},
	}, elfFailed(checks))

	_, ok = elfVerify(host, ref, "libmana.so.1", []string{"/nonexistent", elfMultiarch})
	assert.True(t, ok, "a directory that does not exist is passed over")
}

func TestVerifyNilObjects(t *testing.T) {
	host, _ := elfRealPair(t)
	checks, ok := elfVerify(nil, nil, "elfload.so.1", []string{elfMultiarch})
	assert.False(t, ok)
	assert.Equal(t, []elfload.Check{{Name: "elf", OK: false, Detail: "no object to verify"}}, checks)

	checks, ok = elfVerify(host, nil, "libmana.so.1", []string{elfMultiarch})
	assert.False(t, ok)
	for _, n := range []string{"class", "byte order", "machine"} {
		c := elfCheckNamed(t, checks, n)
		assert.False(t, c.OK, n)
		assert.Equal(t, "no object of the target root to compare with", c.Detail)
	}
	assert.Len(t, elfFailed(checks), 3)

	// A hand-made object: no version hashes known, names are compared.
	hand := &elfload.Object{Path: "/host/elfload.so", Class: elfhdr.ELFCLASS64, Data: elfhdr.ELFDATA2LSB, Machine: elfhdr.EM_X86_64,
		Type: elfhdr.ET_DYN, Soname: "elfload.so.1", Needed: []string{"libibverbs.so.1"},
		VersionNeeds: map[string][]string{"libibverbs.so.1": {"IBVERBS_PRIVATE_34", "IBVERBS_1.14"}}}
	checks, ok = elfVerify(hand, host, "elfload.so.1", []string{elfMultiarch})
	assert.True(t, ok, "%v", checks)
	hand.Type = elfhdr.ET_EXEC
	checks, ok = elfVerify(hand, host, "elfload.so.1", []string{elfMultiarch})
	assert.False(t, ok)
	assert.Equal(t, []elfload.Check{{Name: "elf", OK: false,
		Detail: "/host/elfload.so: ELFCLASS64 little-endian x86-64 executable (ET_EXEC), not a shared object, 0 bytes"}}, elfFailed(checks))
}

// Made-up failures: same-length edits of a copy of the real libmana.
func TestVerifyEditedLibmana(t *testing.T) {
	_, ref := elfRealPair(t)
	dirs := []string{elfMultiarch}
	stored34 := elfTestHash("IBVERBS_PRIVATE_34")

	for _, tc := range []struct {
		name   string
		edit   func(c *elfCopy)
		needs  map[string][]string
		failed []elfload.Check
		prefix map[string]string // check name -> Detail prefix, for details that list many versions
	}{{
		name:  "provider private ABI 59",
		edit:  func(c *elfCopy) { c.renameNeededVersion("IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_59", true) },
		needs: map[string][]string{"libibverbs.so.1": {"IBVERBS_PRIVATE_59"}, "libc.so.6": {"GLIBC_2.4", "GLIBC_2.2.5"}},
		failed: []elfload.Check{{Name: "version IBVERBS_PRIVATE_59", OK: false,
			Detail: "needs IBVERBS_PRIVATE_59 from libibverbs.so.1; /usr/lib/x86_64-linux-gnu/libibverbs.so.1 defines IBVERBS_PRIVATE_34"}},
	}, {
		name:  "renamed version, stale vna_hash",
		edit:  func(c *elfCopy) { c.renameNeededVersion("IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_59", false) },
		needs: map[string][]string{"libibverbs.so.1": {"IBVERBS_PRIVATE_59"}, "libc.so.6": {"GLIBC_2.4", "GLIBC_2.2.5"}},
		failed: []elfload.Check{{Name: "version IBVERBS_PRIVATE_59", OK: false,
			Detail: fmt.Sprintf("needs IBVERBS_PRIVATE_59 from libibverbs.so.1 but the hash stored with it (0x%08x) is not that name's ELF hash (0x%08x): corrupt .gnu.version_r, the loader would not find the version",
				stored34, elfTestHash("IBVERBS_PRIVATE_59"))}},
	}, {
		name: "weak reference to a missing version",
		edit: func(c *elfCopy) {
			c.renameNeededVersion("IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_59", true)
			binary.LittleEndian.PutUint16(c.b[c.vernaux("IBVERBS_PRIVATE_59")+4:], 0x2) // vna_flags = VER_FLG_WEAK
		},
		needs: map[string][]string{"libibverbs.so.1": {"IBVERBS_PRIVATE_59"}, "libc.so.6": {"GLIBC_2.4", "GLIBC_2.2.5"}},
		// dlopen: "undefined symbol: ibv_cmd_destroy_wq, version IBVERBS_PRIVATE_59"
		failed: []elfload.Check{{Name: "version IBVERBS_PRIVATE_59", OK: false,
			Detail: "needs IBVERBS_PRIVATE_59 from libibverbs.so.1 (weak reference); /usr/lib/x86_64-linux-gnu/libibverbs.so.1 defines IBVERBS_PRIVATE_34"}},
	}, {
		name:   "glibc newer than the container's",
		edit:   func(c *elfCopy) { c.renameNeededVersion("GLIBC_2.4", "GLIBC_9.9", true) },
		needs:  map[string][]string{"libibverbs.so.1": {"IBVERBS_PRIVATE_34"}, "libc.so.6": {"GLIBC_9.9", "GLIBC_2.2.5"}},
		failed: []elfload.Check{{Name: "version GLIBC_9.9", OK: false}},
		// bookworm's glibc 2.36 defines 38 GLIBC_ versions.
		prefix: map[string]string{"version GLIBC_9.9": "needs GLIBC_9.9 from libc.so.6; /usr/lib/x86_64-linux-gnu/libc.so.6 defines GLIBC_2.2.5, GLIBC_2.2.6, GLIBC_2.3, …, "},
	}, {
		name:  "needed library that does not exist",
		edit:  func(c *elfCopy) { c.replaceDynstr("libibverbs.so.1", "libibverbz.so.1") },
		needs: map[string][]string{"libibverbz.so.1": {"IBVERBS_PRIVATE_34"}, "libc.so.6": {"GLIBC_2.4", "GLIBC_2.2.5"}},
		failed: []elfload.Check{
			{Name: "needed libibverbz.so.1", OK: false, Detail: "libibverbz.so.1 not found in /usr/lib/x86_64-linux-gnu"},
			{Name: "version IBVERBS_PRIVATE_34", OK: false, Detail: "needs IBVERBS_PRIVATE_34 from libibverbz.so.1, but libibverbz.so.1 not found in /usr/lib/x86_64-linux-gnu"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := elfCopyOf(t, elfLibmana)
			tc.edit(c)
			host, err := elfload.Read(c.write(""))
			require.NoError(t, err)
			assert.Equal(t, tc.needs, host.VersionNeeds)
			checks, ok := elfVerify(host, ref, "libmana.so.1", dirs)
			assert.Equal(t, len(tc.failed) == 0, ok)
			assert.Len(t, checks, 10)
			failed := elfFailed(checks)
			require.Len(t, failed, len(tc.failed), "%v", failed)
			for i, want := range tc.failed {
				assert.Equal(t, want.Name, failed[i].Name)
				if p, ok := tc.prefix[want.Name]; ok {
					assert.True(t, strings.HasPrefix(failed[i].Detail, p), "%q does not start with %q", failed[i].Detail, p)
					assert.Contains(t, failed[i].Detail, "GLIBC_2.36")
					assert.NotContains(t, failed[i].Detail, "GLIBC_9.9 from libc.so.6, defined")
				} else {
					assert.Equal(t, want.Detail, failed[i].Detail)
				}
			}
		})
	}
}

// The container's libibverbs is a copy whose IBVERBS_PRIVATE_34
// definition carries a wrong hash: the loader would not match it.
func TestVerifyCorruptDefinition(t *testing.T) {
	host, ref := elfRealPair(t)
	dir := t.TempDir()
	c := elfCopyOf(t, elfLibibverbs)
	c.name = "libibverbs.so.1"
	c.put32(c.verdef("IBVERBS_PRIVATE_34")+8, 0x1234567)
	lib := c.write(dir)

	checks, ok := elfVerify(host, ref, "libmana.so.1", []string{dir, elfMultiarch})
	assert.False(t, ok)
	assert.Equal(t, "libibverbs.so.1 found at "+lib, elfCheckNamed(t, checks, "needed libibverbs.so.1").Detail, "the first directory wins")
	assert.Equal(t, []elfload.Check{{Name: "version IBVERBS_PRIVATE_34", OK: false,
		Detail: fmt.Sprintf("needs IBVERBS_PRIVATE_34 from libibverbs.so.1; %s defines it but with a hash (0x01234567) that is not the name's (0x%08x): corrupt .gnu.version_d, the loader would not match it",
			lib, elfTestHash("IBVERBS_PRIVATE_34"))}}, elfFailed(checks))
}

// A file that is there but is not a usable library stops the search, as it
// stops the loader; one of another architecture is passed over.
func TestVerifyLibrarySearch(t *testing.T) {
	host, ref := elfRealPair(t)
	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, "libc.so.6"), []byte("/* GNU ld script */\nGROUP ( libc.so.6 )\n"), 0o644))
	checks, ok := elfVerify(host, ref, "libmana.so.1", []string{bad, elfMultiarch})
	assert.False(t, ok)
	badLibc := filepath.Join(bad, "libc.so.6")
	notELF := badLibc + `: not an ELF file (it starts with "/* GNU ld script")`
	assert.Equal(t, []elfload.Check{
		{Name: "needed libc.so.6", OK: false, Detail: "libc.so.6 found at " + badLibc + " but unusable: " + notELF},
		{Name: "version GLIBC_2.4", OK: false, Detail: "needs GLIBC_2.4 from libc.so.6; " + badLibc + " is unusable: " + notELF},
		{Name: "version GLIBC_2.2.5", OK: false, Detail: "needs GLIBC_2.2.5 from libc.so.6; " + badLibc + " is unusable: " + notELF},
	}, elfFailed(checks))

	elfFixture(t, elfLib32Libc, "libc6-i386 (pulled in by lib32gcc-s1)")
	checks, ok = elfVerify(host, ref, "libmana.so.1", []string{elfLib32Dir, elfMultiarch})
	assert.True(t, ok, "%v", elfFailed(checks))
	assert.Equal(t, "libc.so.6 found at "+elfLibc, elfCheckNamed(t, checks, "needed libc.so.6").Detail,
		"the 32-bit libc.so.6 in the first directory is passed over")
}

func TestVerifyOtherArchitectures(t *testing.T) {
	_, ref := elfRealPair(t)

	t.Run("aarch64", func(t *testing.T) {
		elfFixture(t, elfA64Libgcc, "libgcc-s1-arm64-cross")
		a64, err := elfload.Read(elfA64Libgcc)
		require.NoError(t, err)
		assert.Equal(t, elfhdr.EM_AARCH64, a64.Machine)
		assert.Equal(t, elfhdr.ELFCLASS64, a64.Class)
		assert.Equal(t, "libgcc_s.so.1", a64.Soname)
		assert.Equal(t, []string{"libc.so.6"}, a64.Needed)
		assert.Equal(t, map[string][]string{"libc.so.6": {"GLIBC_2.35", "GLIBC_2.34", "GLIBC_2.17"}}, a64.VersionNeeds)
		assert.Equal(t, []string{"GLIBC_2.0", "GCC_3.0", "GCC_3.3", "GCC_3.3.1", "GCC_3.4", "GCC_3.4.2", "GCC_3.4.4",
			"GCC_4.0.0", "GCC_4.2.0", "GCC_4.3.0", "GCC_4.5.0", "GCC_4.7.0", "GCC_7.0.0", "GCC_11.0"}, a64.Defines)

		checks, ok := elfVerify(a64, ref, "libgcc_s.so.1", []string{elfMultiarch})
		assert.False(t, ok)
		failed := elfFailed(checks)
		require.Len(t, failed, 5, "%v", failed)
		assert.Equal(t, elfload.Check{Name: "machine", OK: false,
			Detail: "host build is for AArch64 but /usr/lib/x86_64-linux-gnu/libibverbs.so.1 is for x86-64"}, failed[0])
		assert.Equal(t, elfload.Check{Name: "needed libc.so.6", OK: false,
			Detail: "libc.so.6 not found in /usr/lib/x86_64-linux-gnu; passed over /usr/lib/x86_64-linux-gnu/libc.so.6 (ELFCLASS64 little-endian x86-64)"}, failed[1])
		assert.Equal(t, "version GLIBC_2.35", failed[2].Name)
		assert.True(t, elfCheckNamed(t, checks, "class").OK, "both are 64-bit")

		// The same object in its own world loads.
		elfFixture(t, elfA64Libc, "libc6-arm64-cross (pulled in by libgcc-s1-arm64-cross)")
		a64libc, err := elfload.Read(elfA64Libc)
		require.NoError(t, err)
		checks, ok = elfVerify(a64, a64libc, "libgcc_s.so.1", []string{elfA64Dir})
		assert.True(t, ok, "%v", elfFailed(checks))
		assert.Equal(t, "GLIBC_2.35 from libc.so.6, defined by "+elfA64Libc, elfCheckNamed(t, checks, "version GLIBC_2.35").Detail)
	})

	t.Run("32-bit", func(t *testing.T) {
		elfFixture(t, elfLib32Libgcc, "lib32gcc-s1")
		x32, err := elfload.Read(elfLib32Libgcc)
		require.NoError(t, err)
		assert.Equal(t, elfhdr.ELFCLASS32, x32.Class)
		assert.Equal(t, elfhdr.EM_386, x32.Machine)
		assert.Equal(t, "libgcc_s.so.1", x32.Soname)
		assert.Equal(t, map[string][]string{"libc.so.6": {"GLIBC_2.35", "GLIBC_2.1.3", "GLIBC_2.34", "GLIBC_2.0"}}, x32.VersionNeeds)

		checks, ok := elfVerify(x32, ref, "libgcc_s.so.1", []string{elfMultiarch, elfLib32Dir})
		assert.False(t, ok)
		assert.Equal(t, []elfload.Check{
			{Name: "class", OK: false, Detail: "host build is ELFCLASS32 but /usr/lib/x86_64-linux-gnu/libibverbs.so.1 is ELFCLASS64"},
			{Name: "machine", OK: false, Detail: "host build is for i386 but /usr/lib/x86_64-linux-gnu/libibverbs.so.1 is for x86-64"},
		}, elfFailed(checks), "libc.so.6 and its versions are found in /usr/lib32, past the 64-bit one")
		assert.Equal(t, "libc.so.6 found at "+elfLib32Libc, elfCheckNamed(t, checks, "needed libc.so.6").Detail)
	})
}

// Verify's verdict is the real loader's: glibc's dlopen (through python3's
// ctypes) on the same files.
func TestVerifyAgreesWithLoader(t *testing.T) {
	_, ref := elfRealPair(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv(elfRequireEnv) == "1" {
			t.Fatalf("python3 not found (%s=1)", elfRequireEnv)
		}
		t.Skip("python3 not found: cannot ask the real loader")
	}
	for _, tc := range []struct {
		name  string
		edit  func(c *elfCopy)
		loads bool
	}{
		{"unchanged", func(*elfCopy) {}, true},
		{"IBVERBS_PRIVATE_59", func(c *elfCopy) { c.renameNeededVersion("IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_59", true) }, false},
		{"stale hash", func(c *elfCopy) { c.renameNeededVersion("IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_59", false) }, false},
		{"GLIBC_9.9", func(c *elfCopy) { c.renameNeededVersion("GLIBC_2.4", "GLIBC_9.9", true) }, false},
		{"libibverbz", func(c *elfCopy) { c.replaceDynstr("libibverbs.so.1", "libibverbz.so.1") }, false},
		{"weak IBVERBS_PRIVATE_59", func(c *elfCopy) {
			c.renameNeededVersion("IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_59", true)
			binary.LittleEndian.PutUint16(c.b[c.vernaux("IBVERBS_PRIVATE_59")+4:], 0x2)
		}, false}, // the version check only warns, the symbols bound to it do not resolve
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := elfCopyOf(t, elfLibmana)
			tc.edit(c)
			p := c.write("")
			host, err := elfload.Read(p)
			require.NoError(t, err)
			_, ok := elfVerify(host, ref, "libmana.so.1", []string{elfMultiarch})
			out, err := exec.Command(python, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", p).CombinedOutput()
			assert.Equal(t, tc.loads, err == nil, "dlopen: %s", out)
			assert.Equal(t, tc.loads, ok, "Verify")
		})
	}
}

func TestReadErrors(t *testing.T) {
	elfFixture(t, elfLibmana, elfPkgProviders)
	mana, err := os.ReadFile(elfLibmana)
	require.NoError(t, err)
	dir := t.TempDir()
	file := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	edited := func(name string, edit func(c *elfCopy)) string {
		c := elfCopyOf(t, elfLibmana)
		edit(c)
		c.name = name
		return c.write(dir)
	}
	dangling := filepath.Join(dir, "dangling.so")
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone.so"), dangling))
	loop := filepath.Join(dir, "loop.so")
	require.NoError(t, os.Symlink(loop, loop))
	fifo := filepath.Join(dir, "fifo.so")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	subdir := filepath.Join(dir, "elfload.so")
	require.NoError(t, os.Mkdir(subdir, 0o755))

	for _, tc := range []struct {
		name, path, msg string
	}{
		{"missing", filepath.Join(dir, "missing.so"), "no such file"},
		{"empty", file("empty.so", nil), "empty file (0 bytes), not an ELF shared object"},
		{"directory", subdir, "is a directory, not a regular file"},
		{"dangling symlink", dangling, "dangling symbolic link (to " + filepath.Join(dir, "gone.so") + "): the file it names does not exist"},
		{"symlink loop", loop, "symbolic link loop"},
		{"character device", "/dev/null", "is a character device, not a regular file"},
		{"named pipe", fifo, "is a named pipe (FIFO), not a regular file"},
		{"text", file("text.so", []byte("#!/bin/sh\necho not a library\n")), `not an ELF file (it starts with "#!/bin/sh\necho n")`},
		{"three bytes", file("short.so", []byte("\x7fEL")), `not an ELF file (it starts with "\x7fEL")`},
		{"magic only", file("magic.so", []byte("\x7fELF\x02\x01")), "truncated ELF file: 6 bytes, shorter than the 64-byte ELF header"},
		{"bad class", file("class.so", append([]byte("\x7fELF\x07\x01\x01"), make([]byte, 60)...)), "corrupt ELF header: unknown class 7"},
		{"truncated 200", file("t200.so", mana[:200]), "truncated ELF file: it has 200 bytes but its program headers end at byte 568"},
		{"truncated 4000", file("t4000.so", mana[:4000]), "truncated ELF file: it has 4000 bytes but its section headers end at byte 22688"},
		{"relocatable (edited e_type)", edited("rel.so", func(c *elfCopy) { binary.LittleEndian.PutUint16(c.b[16:], uint16(elf.ET_REL)) }),
			"is a relocatable object file (ET_REL, an unlinked .o), not a shared object"},
		{"executable (edited e_type)", edited("exec.so", func(c *elfCopy) { binary.LittleEndian.PutUint16(c.b[16:], uint16(elf.ET_EXEC)) }),
			"is an executable (ET_EXEC), not a shared object"},
		{"no PT_DYNAMIC", edited("nodyn.so", func(c *elfCopy) {
			for i, p := range c.f.Progs {
				if p.Type == elf.PT_DYNAMIC {
					c.put32(64+uint64(i)*56, uint32(elf.PT_NULL))
				}
			}
		}), "no dynamic section (PT_DYNAMIC): not a loadable shared object"},
		{"SONAME outside .dynstr", edited("soname.so", func(c *elfCopy) {
			dyn := c.section(".dynamic")
			for off := dyn.Offset; off < dyn.Offset+dyn.Size; off += 16 {
				if binary.LittleEndian.Uint64(c.b[off:]) == uint64(elf.DT_SONAME) {
					binary.LittleEndian.PutUint64(c.b[off+8:], 1<<40)
				}
			}
		}), "corrupt ELF file: DT_SONAME names string offset 1099511627776 outside the dynamic string table (759 bytes)"},
		{"version need record outside the file", edited("verneed.so", func(c *elfCopy) {
			sec := c.section(".gnu.version_r")
			c.put32(sec.Offset+12, 0x7fff0000) // vn_next of the first record
		}), "corrupt ELF file: version need record 1 (at 0x7fff0968) is outside the loaded segments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, err := elfload.Read(tc.path)
			require.Error(t, err)
			assert.Nil(t, obj)
			assert.Equal(t, tc.path+": "+tc.msg, err.Error())
		})
	}
}

func TestReadExecutables(t *testing.T) {
	t.Run("PIE", func(t *testing.T) {
		elfFixture(t, "/bin/true", "coreutils")
		f, err := elf.Open("/bin/true")
		require.NoError(t, err)
		flags, _ := f.DynValue(elf.DT_FLAGS_1)
		f.Close()
		require.Len(t, flags, 1)
		require.NotZero(t, flags[0]&uint64(elf.DF_1_PIE), "Debian's /bin/true is a PIE")
		_, err = elfload.Read("/bin/true")
		assert.EqualError(t, err, "/bin/true: is a position-independent executable (ET_DYN with DF_1_PIE), not a shared object")
	})
	t.Run("test binary", func(t *testing.T) {
		exe, err := os.Executable()
		require.NoError(t, err)
		f, err := elf.Open(exe)
		require.NoError(t, err)
		typ := f.Type
		flags, _ := f.DynValue(elf.DT_FLAGS_1)
		f.Close()
		_, err = elfload.Read(exe)
		switch {
		case typ == elf.ET_EXEC: // go test's default on linux/amd64
			assert.EqualError(t, err, exe+": is an executable (ET_EXEC), not a shared object")
		case typ == elf.ET_DYN && len(flags) == 1 && flags[0]&uint64(elf.DF_1_PIE) != 0: // -buildmode=pie
			assert.EqualError(t, err, exe+": is a position-independent executable (ET_DYN with DF_1_PIE), not a shared object")
		default:
			t.Fatalf("test binary %s is %v with DT_FLAGS_1 %v", exe, typ, flags)
		}
	})
	t.Run("object file", func(t *testing.T) {
		elfFixture(t, elfCrt1, "libc6-dev")
		_, err := elfload.Read(elfCrt1)
		assert.EqualError(t, err, elfCrt1+": is a relocatable object file (ET_REL, an unlinked .o), not a shared object")
	})
	t.Run("glibc's runnable libc.so.6 is a shared object", func(t *testing.T) {
		libc, err := elfload.Read(elfLibc)
		require.NoError(t, err)
		assert.Equal(t, "libc.so.6", libc.Soname)
		assert.Equal(t, []string{"ld-linux-x86-64.so.2"}, libc.Needed)
	})
}

// The kernel uverbs ABI ranges rdma-core v44.0 compiles into its
// providers (verbs_device_ops .match_min_abi_version/.match_max_abi_version):
// providers/mana/mana.c (MANA_IB_UVERBS_ABI_VERSION 1), mlx5/mlx5.c
// (MLX5_UVERBS_MIN/MAX_ABI_VERSION 1, 1), mlx5/mlx5_vfio.c (unset: 0, 0),
// rxe/rxe.c (sizeof(void *) == 8 ? 1 : 2, and 2), mlx4/mlx4.c
// (MLX4_UVERBS_MIN/MAX_ABI_VERSION 2, 4), efa/efa.c (EFA_ABI_VERSION 1),
// siw/siw.c (SIW_ABI_VERSION 1), bnxt_re/main.c (BNXT_RE_ABI_VERSION 1).
func TestProviderABIRangeReal(t *testing.T) {
	for _, tc := range []struct {
		file, name string
		min, max   uint32
		ok         bool
	}{
		{elfLibmana, "mana", 1, 1, true},
		{elfProviderDir + "/libmana-rdmav34.so", "mana", 1, 1, true},
		{elfMultiarch + "/libmlx5.so.1.24.44.0", "mlx5", 1, 1, true},
		{elfMultiarch + "/libmlx5.so.1.24.44.0", "mlx5_vfio", 0, 0, true},
		{elfProviderDir + "/librxe-rdmav34.so", "rxe", 1, 2, true},
		{elfMultiarch + "/libmlx4.so.1.0.44.0", "mlx4", 2, 4, true},
		{elfMultiarch + "/libefa.so.1.2.44.0", "efa", 1, 1, true},
		{elfProviderDir + "/libsiw-rdmav34.so", "siw", 1, 1, true},
		{elfProviderDir + "/libbnxt_re-rdmav34.so", "bnxt_re", 1, 1, true},
		// not there
		{elfLibmana, "ionic", 0, 0, false},
		{elfLibmana, "", 0, 0, false},
		{elfLibmana, "man", 0, 0, false},
		{elfMultiarch + "/libmlx5.so.1.24.44.0", "mana", 0, 0, false},
		{elfLibibverbs, "mana", 0, 0, false},
	} {
		t.Run(filepath.Base(tc.file)+"/"+tc.name, func(t *testing.T) {
			elfFixture(t, tc.file, elfPkgProviders)
			o, err := elfload.Read(tc.file)
			require.NoError(t, err)
			min, max, ok := elfload.ProviderABIRange(o, tc.name)
			assert.Equal(t, []any{tc.min, tc.max, tc.ok}, []any{min, max, ok})
		})
	}

	t.Run("other objects", func(t *testing.T) {
		_, _, ok := elfload.ProviderABIRange(nil, "mana")
		assert.False(t, ok)
		_, _, ok = elfload.ProviderABIRange(&elfload.Object{Path: filepath.Join(t.TempDir(), "none.so")}, "mana")
		assert.False(t, ok)
		for _, p := range []string{elfA64Libgcc, elfLib32Libgcc} {
			if _, err := os.Stat(p); err != nil {
				continue // covered (and required) by TestELFVerifyOtherArchitectures
			}
			o, err := elfload.Read(p)
			require.NoError(t, err)
			_, _, ok = elfload.ProviderABIRange(o, "gcc")
			assert.False(t, ok, p)
		}
	})
}

// Edited copies of libmana: the values are read from where the relocation
// points, implausible ones are refused, disagreeing candidates too.
func TestProviderABIRangeEdited(t *testing.T) {
	elfFixture(t, elfLibmana, elfPkgProviders)
	c0 := elfCopyOf(t, elfLibmana)
	ro := c0.section(".rodata")
	data := c0.b[ro.Offset : ro.Offset+ro.Size]
	require.Equal(t, 1, bytes.Count(data, []byte("\x00mana\x00")))
	strAddr := ro.Addr + uint64(bytes.Index(data, []byte("\x00mana\x00"))+1)
	require.EqualValues(t, 0x327f, strAddr)

	rela := c0.section(".rela.dyn")
	type rel struct{ at, place uint64 }
	var name rel
	var others []rel
	for off := rela.Offset; off+24 <= rela.Offset+rela.Size; off += 24 {
		place, info, addend := binary.LittleEndian.Uint64(c0.b[off:]), binary.LittleEndian.Uint64(c0.b[off+8:]), binary.LittleEndian.Uint64(c0.b[off+16:])
		if uint32(info) != uint32(elf.R_X86_64_RELATIVE) {
			continue
		}
		if addend == strAddr {
			name = rel{off, place}
		} else {
			others = append(others, rel{off, place})
		}
	}
	require.EqualValues(t, 0x59e0, name.place, "mana_dev_ops in .data.rel.ro")
	var other rel
	for _, r := range others {
		if r.place >= name.place+16 && r.place < 0x6000 {
			other = r
		}
	}
	require.NotZero(t, other.place)

	abi := func(t *testing.T, edit func(c *elfCopy)) []any {
		c := elfCopyOf(t, elfLibmana)
		edit(c)
		o, err := elfload.Read(c.write(""))
		require.NoError(t, err)
		min, max, ok := elfload.ProviderABIRange(o, "mana")
		return []any{min, max, ok}
	}
	setRange := func(c *elfCopy, place uint64, min, max uint32) {
		c.put32(c.fileOff(place+8), min)
		c.put32(c.fileOff(place+12), max)
	}
	second := func(min, max uint32) func(c *elfCopy) {
		return func(c *elfCopy) {
			binary.LittleEndian.PutUint64(c.b[other.at+16:], strAddr) // another pointer to "mana"
			setRange(c, other.place, min, max)
		}
	}

	assert.Equal(t, []any{uint32(3), uint32(5), true}, abi(t, func(c *elfCopy) { setRange(c, name.place, 3, 5) }))
	assert.Equal(t, []any{uint32(0), uint32(0), false}, abi(t, func(c *elfCopy) { setRange(c, name.place, 2000, 2000) }), "values > 1000")
	assert.Equal(t, []any{uint32(0), uint32(0), false}, abi(t, func(c *elfCopy) { setRange(c, name.place, 4, 1) }), "min > max")
	assert.Equal(t, []any{uint32(0), uint32(0), false}, abi(t, second(3, 3)), "two candidates that disagree")
	assert.Equal(t, []any{uint32(1), uint32(1), true}, abi(t, second(1, 1)), "two candidates that agree")
	assert.Equal(t, []any{uint32(1), uint32(1), true}, abi(t, second(0, 0)), "a NULL after another pointer to the name is not a range")
	assert.Equal(t, []any{uint32(1), uint32(1), true}, abi(t, second(7, 0xffffffff)), "neither is a pointer following it")
	assert.Equal(t, []any{uint32(0), uint32(0), false}, abi(t, func(c *elfCopy) { copy(c.b[c.fileOff(strAddr):], "mama") }), "string gone")
}

// A provider shaped like the ionic one, built here with the machine's C
// compiler against the real libibverbs: plain RELA relocations and, with
// -z pack-relative-relocs, DT_RELR.
func TestProviderBuiltWithCC(t *testing.T) {
	elfFixture(t, elfLibibverbs, elfPkgVerbs)
	cc, err := exec.LookPath("cc")
	if err != nil {
		if os.Getenv(elfRequireEnv) == "1" {
			t.Fatalf("cc not found (%s=1): install gcc", elfRequireEnv)
		}
		t.Skip("cc not found: install gcc")
	}
	ref, err := elfload.Read(elfLibibverbs)
	require.NoError(t, err)
	src := filepath.Join(t.TempDir(), "ionic.c")
	require.NoError(t, os.WriteFile(src, []byte(`#include <stdint.h>
struct ops { const char *name; uint32_t min, max; const void *table; };
extern void verbs_register_driver_34(const struct ops *ops);
static const int table[4] = { 1, 2, 3, 4 };
const struct ops ionic_dev_ops = { .name = "ionic", .min = MIN, .max = MAX, .table = table };
#ifdef SECOND
const struct ops ionic_other_ops = { .name = "ionic", .min = 1, .max = 1, .table = table };
#endif
const char *const ionic_names[] = { "ionic", 0 };
static void __attribute__((constructor)) ionic_register(void) { verbs_register_driver_34(&ionic_dev_ops); }
`), 0o644))
	build := func(t *testing.T, args ...string) *elfload.Object {
		out := filepath.Join(t.TempDir(), "elfload.so")
		cmd := exec.Command(cc, append([]string{"-shared", "-fPIC", "-O2", "-o", out, "-Wl,-soname,elfload.so.1", src, elfLibibverbs}, args...)...)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", b)
		o, err := elfload.Read(out)
		require.NoError(t, err)
		return o
	}
	relr := func(o *elfload.Object) bool {
		f, err := elf.Open(o.Path)
		require.NoError(t, err)
		defer f.Close()
		v, _ := f.DynValue(elf.DynTag(36)) // DT_RELR
		return len(v) > 0
	}

	t.Run("RELA", func(t *testing.T) {
		o := build(t, "-DMIN=4", "-DMAX=4")
		assert.False(t, relr(o))
		min, max, ok := elfload.ProviderABIRange(o, "ionic")
		assert.Equal(t, []any{uint32(4), uint32(4), true}, []any{min, max, ok})
		checks, ok := elfVerify(o, ref, "elfload.so.1", []string{elfMultiarch})
		assert.True(t, ok, "%v", elfFailed(checks))
		assert.Equal(t, "IBVERBS_PRIVATE_34 from libibverbs.so.1, defined by "+elfLibibverbs, elfCheckNamed(t, checks, "version IBVERBS_PRIVATE_34").Detail)
	})
	t.Run("RELR", func(t *testing.T) {
		o := build(t, "-DMIN=2", "-DMAX=6", "-Wl,-z,pack-relative-relocs")
		if !relr(o) {
			t.Fatalf("the linker made no DT_RELR with -z pack-relative-relocs")
		}
		min, max, ok := elfload.ProviderABIRange(o, "ionic")
		assert.Equal(t, []any{uint32(2), uint32(6), true}, []any{min, max, ok})
		checks, ok := elfVerify(o, ref, "elfload.so.1", []string{elfMultiarch})
		assert.True(t, ok, "%v", elfFailed(checks))
		assert.Equal(t, []string{"libibverbs.so.1"}, o.Needed)
	})
	t.Run("two ops that disagree", func(t *testing.T) {
		o := build(t, "-DMIN=4", "-DMAX=4", "-DSECOND")
		_, _, ok := elfload.ProviderABIRange(o, "ionic")
		assert.False(t, ok)
	})
}

// A target for any object: without a label the details name the object's
// path, and without a SONAME to match there is no soname check.
func TestVerifyUnlabelledTarget(t *testing.T) {
	host, ref := elfRealPair(t)
	checks, ok := elfload.Verify(host, elfload.Target{Like: ref, LibDirs: []string{elfMultiarch}})
	assert.True(t, ok, "%v", elfFailed(checks))
	for _, c := range checks {
		assert.NotEqual(t, "soname", c.Name)
	}
	assert.Len(t, checks, 9)

	checks, ok = elfload.Verify(host, elfload.Target{Like: ref, Soname: "libionic.so.1", LibDirs: []string{elfMultiarch}})
	assert.False(t, ok)
	assert.Equal(t, []elfload.Check{
		{Name: "soname", OK: false, Detail: elfLibmana + `'s SONAME is "libmana.so.1", want "libionic.so.1"`},
	}, elfFailed(checks))
}

// Soname reads the SONAME alone, of a PIE too (which Read refuses), and
// says when a file is not a shared object.
func TestSoname(t *testing.T) {
	elfFixture(t, elfLibibverbs, elfPkgVerbs)
	s, err := elfload.Soname(elfLibibverbs)
	require.NoError(t, err)
	assert.Equal(t, "libibverbs.so.1", s)

	elfFixture(t, "/bin/true", "coreutils")
	s, err = elfload.Soname("/bin/true")
	require.NoError(t, err, "a PIE has a dynamic table")
	assert.Equal(t, "", s)

	elfFixture(t, elfCrt1, "libc6-dev")
	_, err = elfload.Soname(elfCrt1)
	assert.EqualError(t, err, elfCrt1+": is a relocatable object file (ET_REL, an unlinked .o), not a shared object")
	assert.ErrorIs(t, err, elfload.ErrNotSharedObject)

	text := filepath.Join(t.TempDir(), "text.so")
	require.NoError(t, os.WriteFile(text, []byte("not ELF"), 0o644))
	_, err = elfload.Soname(text)
	assert.EqualError(t, err, text+`: not an ELF file (it starts with "not ELF")`)
	assert.NotErrorIs(t, err, elfload.ErrNotSharedObject)
}

// Soname reads one string of the dynamic string table, Read loads all of
// it; both give the same name on every shared object of the machine's
// library directory (many with tables far larger than one read window).
func TestSonameAgreesWithRead(t *testing.T) {
	libs, _ := filepath.Glob("/lib/x86_64-linux-gnu/lib*.so.*")
	require.NotEmpty(t, libs, "the machine's libraries")
	checked := 0
	for _, p := range libs {
		obj, err := elfload.Read(p)
		if err != nil {
			continue // not a shared object this reader takes; TestSoname covers errors
		}
		s, err := elfload.Soname(p)
		require.NoError(t, err, p)
		assert.Equal(t, obj.Soname, s, p)
		checked++
	}
	assert.Greater(t, checked, 10)
}
