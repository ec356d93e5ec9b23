package elfhdr

import (
	"bytes"
	"io"
)

// MaxNoteSegment caps the bytes of one PT_NOTE segment BuildID reads (a
// real one holds a few notes of some dozen bytes).
const MaxNoteSegment = 1 << 16

// ntGNUBuildID is the type of the GNU build ID note (NT_GNU_BUILD_ID),
// owned by "GNU".
const ntGNUBuildID = 3

// BuildID is the descriptor of the file's GNU build ID note
// (NT_GNU_BUILD_ID, owner "GNU", in a PT_NOTE segment): the identifier
// the linker computes over what it linked, which strip keeps. ok is false
// when no loadable note segment carries one. r and size are the file f
// was read from; every read is bounds-checked as in Read.
func (f *File) BuildID(r io.ReaderAt, size int64) (id []byte, ok bool) {
	if size < 0 {
		return nil, false
	}
	for _, p := range f.Progs {
		if p.Type != PT_NOTE || p.Filesz > MaxNoteSegment {
			continue
		}
		b, ok := ReadAt(r, uint64(size), p.Off, p.Filesz)
		if !ok {
			continue
		}
		// Notes are padded to 4 bytes, or to 8 in a segment aligned so
		// (where the linker puts .note.gnu.property).
		align := uint64(4)
		if p.Align == 8 {
			align = 8
		}
		if id, ok := gnuNote(b, f.ByteOrder.Uint32, align, ntGNUBuildID); ok {
			return id, true
		}
	}
	return nil, false
}

// gnuNote is the descriptor of the first note of type typ owned by "GNU"
// in the notes b: each a header of three words (name size, descriptor
// size, type), the name, and the descriptor, where the descriptor and the
// next note begin at offsets (from the note's start) rounded up to align,
// as the loader reads them.
func gnuNote(b []byte, word func([]byte) uint32, align uint64, typ uint32) ([]byte, bool) {
	up := func(n uint64) uint64 { return (n + align - 1) &^ (align - 1) }
	for uint64(len(b)) >= 12 {
		namesz, descsz, t := uint64(word(b)), uint64(word(b[4:])), word(b[8:])
		// Both sizes are below 1<<32, so no sum overflows.
		descAt := up(12 + namesz)
		end := descAt + descsz
		if end > uint64(len(b)) {
			return nil, false
		}
		if t == typ && descsz > 0 && bytes.Equal(b[12:12+namesz], []byte("GNU\x00")) {
			return bytes.Clone(b[descAt:end]), true
		}
		next := up(end)
		if next >= uint64(len(b)) {
			return nil, false
		}
		b = b[next:]
	}
	return nil, false
}
