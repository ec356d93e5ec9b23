package preflight

import (
	"github.com/infera/infera-exec/internal/fsprobe"
	"github.com/infera/infera-exec/internal/mountinfo"

	"golang.org/x/sys/unix"
)

// fsFromMagic names a filesystem magic (mountinfo.Magic); an unknown one
// is named by its hex value and taken for local.
func fsFromMagic(magic uint32) FS {
	name, network := mountinfo.Magic(magic)
	return FS{Magic: int64(magic), Type: name, Network: network}
}

// RealStatfs is statfs(2) of path: the filesystem type by its magic, its
// size and whether it is mounted noexec.
func RealStatfs(path string) (FS, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return FS{}, err
	}
	// f_type is a 32-bit magic in a word whose width and signedness vary
	// by architecture (0xFF534D42 would be negative in an int32).
	fs := fsFromMagic(uint32(st.Type))
	// Block counts are in units of f_frsize; kernels that do not fill it
	// mean f_bsize.
	unit := st.Frsize
	if unit <= 0 {
		unit = st.Bsize
	}
	if unit > 0 {
		fs.Size = st.Blocks * uint64(unit)
	}
	fs.Noexec = st.Flags&unix.ST_NOEXEC != 0
	return fs, nil
}

// statfsOp is statfs(2) where it may block.
var statfsOp = fsprobe.Define("statfs", RealStatfs)

// statfsOf is in.Statfs, or the real statfs(2) when the seam is not set,
// with the deadline when path's filesystem may not answer.
func statfsOf(in *Facts, path string) (FS, error) {
	if in.Statfs != nil {
		return in.Statfs(path)
	}
	fs, _, err := fsprobe.Call(in.Probe, statfsOp, path, path)
	return fs, err
}
