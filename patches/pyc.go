package patches

import (
	"encoding/binary"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// removeFile deletes cached bytecode; a variable so tests can make it fail.
var removeFile = os.Remove

// removePycs deletes the cached bytecode of a patched module. After a
// write every cache file goes; otherwise only unchecked-hash pycs (PEP 552
// flags = 0b01), which Python never revalidates and which would keep
// running the unpatched code after a start that died before this step.
// stuck names the ones that could not be removed (or, dry, would have to
// be) and would run instead of the source: unchecked-hash ones, and
// timestamp ones whose recorded mtime and size match the source's.
func removePycs(pyFile string, all, dry bool, src *target) (removed, stuck []string) {
	if !strings.HasSuffix(pyFile, ".py") {
		return nil, nil
	}
	dir, base := filepath.Split(pyFile)
	matches, _ := filepath.Glob(filepath.Join(dir, "__pycache__", strings.TrimSuffix(base, ".py")+".*.pyc"))
	for _, m := range matches {
		flags, stamp, ok := pycHeader(m)
		unchecked := ok && flags == 0b01
		if !all && !unchecked {
			continue
		}
		if dry {
			if unchecked {
				stuck = append(stuck, m+" (unchecked-hash)")
			}
			continue
		}
		err := removeFile(m)
		if err == nil || errors.Is(err, iofs.ErrNotExist) {
			removed = append(removed, m)
			continue
		}
		switch {
		case unchecked:
			stuck = append(stuck, fmt.Sprintf("%s (unchecked-hash, never revalidated): %v", m, err))
		case ok && flags == 0 && src != nil && src.verified && stamp == uint64(uint32(src.id.Mtime/1e9))|uint64(uint32(src.id.Size))<<32:
			stuck = append(stuck, fmt.Sprintf("%s (its mtime and size match the new source): %v", m, err))
		}
	}
	return removed, stuck
}

// pycHeader reads a .pyc's PEP 552 flags and, for a timestamp pyc, its
// source mtime (low 32 bits) and size (high 32 bits).
func pycHeader(pyc string) (flags uint32, stamp uint64, ok bool) {
	fd, err := unix.Open(pyc, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, 0, false // a FIFO or device named *.pyc is not bytecode
	}
	var hdr [16]byte
	n, err := unix.Pread(fd, hdr[:], 0)
	if err != nil || n < 8 {
		return 0, 0, false
	}
	if n == 16 {
		stamp = binary.LittleEndian.Uint64(hdr[8:16])
	}
	return binary.LittleEndian.Uint32(hdr[4:8]), stamp, true
}
