package preflight

import (
	"fmt"

	"github.com/infera/infera-exec/internal/fsprobe"

	"golang.org/x/sys/unix"
)

// fsKind is a filesystem type as statfs(2) reports it in f_type.
type fsKind struct {
	name    string
	network bool
}

// fsMagics maps f_type magics (linux/magic.h and the filesystems' own
// headers) to names. Network: reads cross a network (or, for FUSE, a
// userspace daemon that usually fetches over one).
var fsMagics = map[uint32]fsKind{
	0x6969:     {"nfs", true},
	0xFF534D42: {"cifs", true},
	0xFE534D42: {"smb2", true},
	0x65735546: {"fuse", true},
	0x00C36400: {"ceph", true},
	0x0BD00BD0: {"lustre", true},
	0x47504653: {"gpfs", true},
	0x01021997: {"9p", true},
	0x794c7630: {"overlay", false},
	0x01021994: {"tmpfs", false},
	0xEF53:     {"ext4", false}, // also ext2 and ext3: one magic
	0x58465342: {"xfs", false},
	0x9123683E: {"btrfs", false},
	0x2FC12FC1: {"zfs", false},
	0x73717368: {"squashfs", false},
}

// fsFromMagic names a filesystem magic; an unknown one is named by its hex
// value and taken for local.
func fsFromMagic(magic uint32) FS {
	if k, ok := fsMagics[magic]; ok {
		return FS{Magic: int64(magic), Type: k.name, Network: k.network}
	}
	return FS{Magic: int64(magic), Type: fmt.Sprintf("0x%x", magic)}
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
