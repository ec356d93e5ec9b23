package elfhdr_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/elfhdr"
)

// The build ID reader is held to binutils' readelf -n on real files:
// the interpreter, the libraries and the executables of Debian packages.
func TestBuildIDLikeReadelf(t *testing.T) {
	readelf, err := exec.LookPath("readelf")
	if err != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("readelf is absent (install binutils): %v (%s=1)", err, requireEnv)
		}
		t.Skipf("readelf is absent (install binutils): %v; set %s=1 to make this a failure", err, requireEnv)
	}
	files := readReal(t)
	for _, p := range []string{"/usr/bin/python3", "/usr/bin/python3.11"} {
		if b, err := os.ReadFile(p); err == nil {
			files[p] = b
		}
	}
	re := regexp.MustCompile(`(?m)\sBuild ID: ([0-9a-f]+)$`)
	var with int
	for name, b := range files {
		out, err := exec.Command(readelf, "-n", "-W", name).Output()
		require.NoError(t, err, name)
		f, err := elfhdr.Read(bytes.NewReader(b), int64(len(b)))
		require.NoError(t, err, name)
		id, ok := f.BuildID(bytes.NewReader(b), int64(len(b)))
		m := re.FindSubmatch(out)
		if m == nil || len(f.Progs) == 0 {
			// readelf reads sections; a relocatable object has no
			// segments, so no loadable note.
			assert.False(t, ok && len(f.Progs) == 0, "%s: a build ID without segments", name)
			continue
		}
		with++
		require.True(t, ok, "%s: readelf says build ID %s", name, m[1])
		assert.Equal(t, string(m[1]), hex.EncodeToString(id), name)
	}
	assert.Positive(t, with, "no real file with a build ID was read")
}

// note is one ELF note, padded to align.
func note(bo binary.AppendByteOrder, align int, name string, typ uint32, desc []byte) []byte {
	pad := func(b []byte) []byte {
		for len(b)%align != 0 {
			b = append(b, 0)
		}
		return b
	}
	b := bo.AppendUint32(nil, uint32(len(name)))
	b = bo.AppendUint32(b, uint32(len(desc)))
	b = bo.AppendUint32(b, typ)
	b = pad(append(b, name...))
	return pad(append(b, desc...))
}

// withNotes is an ELF file of 64 bytes of header, then one PT_NOTE
// program header per segment, then the segments.
func withNotes(bo interface {
	binary.ByteOrder
	binary.AppendByteOrder
}, segments ...struct {
	align int
	notes []byte
}) []byte {
	const ph = 56
	b := make([]byte, 64)
	copy(b, elfhdr.ELFMAG)
	b[elfhdr.EI_CLASS], b[elfhdr.EI_VERSION] = byte(elfhdr.ELFCLASS64), elfhdr.EV_CURRENT
	b[elfhdr.EI_DATA] = byte(elfhdr.ELFDATA2LSB)
	if bo == binary.BigEndian {
		b[elfhdr.EI_DATA] = byte(elfhdr.ELFDATA2MSB)
	}
	bo.PutUint16(b[16:], uint16(elfhdr.ET_EXEC))
	bo.PutUint32(b[20:], elfhdr.EV_CURRENT)
	bo.PutUint64(b[32:], 64) // e_phoff
	bo.PutUint16(b[52:], 64) // e_ehsize
	bo.PutUint16(b[54:], ph)
	bo.PutUint16(b[56:], uint16(len(segments)))
	off := 64 + ph*len(segments)
	var data []byte
	for _, s := range segments {
		p := make([]byte, ph)
		bo.PutUint32(p, uint32(elfhdr.PT_NOTE))
		bo.PutUint64(p[8:], uint64(off+len(data)))
		bo.PutUint64(p[32:], uint64(len(s.notes)))
		bo.PutUint64(p[40:], uint64(len(s.notes)))
		bo.PutUint64(p[48:], uint64(s.align))
		b = append(b, p...)
		data = append(data, s.notes...)
	}
	return append(b, data...)
}

type segment = struct {
	align int
	notes []byte
}

func TestBuildID(t *testing.T) {
	id := []byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3}
	le, be := binary.LittleEndian, binary.BigEndian
	property := note(le, 8, "GNU\x00", 5, make([]byte, 12)) // NT_GNU_PROPERTY_TYPE_0, in an 8-aligned segment
	for _, c := range []struct {
		name string
		file []byte
		want []byte
	}{
		{"after a property note in its own 8-aligned segment", withNotes(le, segment{8, property}, segment{4, note(le, 4, "GNU\x00", 3, id)}), id},
		{"after another owner's note of type 3", withNotes(le, segment{4, append(note(le, 4, "stapsdt\x00", 3, []byte{9, 9, 9, 9}), note(le, 4, "GNU\x00", 3, id)...)}), id},
		{"after an ABI tag, 8-aligned", withNotes(le, segment{8, append(note(le, 8, "GNU\x00", 1, make([]byte, 16)), note(le, 8, "GNU\x00", 3, id)...)}), id},
		{"big-endian", withNotes(be, segment{4, note(be, 4, "GNU\x00", 3, id)}), id},
		{"none: only the ABI tag", withNotes(le, segment{4, note(le, 4, "GNU\x00", 1, make([]byte, 16))}), nil},
		{"none: an empty descriptor", withNotes(le, segment{4, note(le, 4, "GNU\x00", 3, nil)}), nil},
		{"none: the owner without its NUL", withNotes(le, segment{4, note(le, 4, "GNU", 3, id)}), nil},
		{"none: no segments", withNotes(le), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := elfhdr.Read(bytes.NewReader(c.file), int64(len(c.file)))
			require.NoError(t, err)
			got, ok := f.BuildID(bytes.NewReader(c.file), int64(len(c.file)))
			assert.Equal(t, c.want != nil, ok)
			assert.Equal(t, c.want, got)
		})
	}
}

// A note whose sizes run past its segment, or a segment past the file,
// ends the search without a build ID and without reading out of bounds.
func TestBuildIDCorrupt(t *testing.T) {
	le := binary.LittleEndian
	good := note(le, 4, "GNU\x00", 3, []byte{1, 2, 3, 4})
	for _, c := range []struct {
		name string
		edit func(b []byte, notes int)
	}{
		{"name size past the segment", func(b []byte, n int) { le.PutUint32(b[n:], 1<<20) }},
		{"descriptor size past the segment", func(b []byte, n int) { le.PutUint32(b[n+4:], 0xffffffff) }},
		{"both sizes at their maximum", func(b []byte, n int) { le.PutUint32(b[n:], 0xffffffff); le.PutUint32(b[n+4:], 0xffffffff) }},
		{"the segment past the file", func(b []byte, _ int) { le.PutUint64(b[64+8:], 1<<40) }},
		{"the segment's size past the file", func(b []byte, _ int) { le.PutUint64(b[64+32:], uint64(len(b))) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := withNotes(le, segment{4, good})
			c.edit(b, 64+56)
			f, err := elfhdr.Read(bytes.NewReader(b), int64(len(b)))
			require.NoError(t, err)
			_, ok := f.BuildID(bytes.NewReader(b), int64(len(b)))
			assert.False(t, ok)
		})
	}
}
