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

	"github.com/infera/infera-exec/patches/patchdef"
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
func removePycs(pyFile string, all, dry bool, srcID identity, srcVerified bool) (removed, stuck []string) {
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
		case ok && flags == 0 && srcVerified && stamp == uint64(uint32(srcID.Mtime/1e9))|uint64(uint32(srcID.Size))<<32:
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

// checkBytecode removes the cached bytecode that could run instead of the
// patched source (after a write: every .pyc of the module; otherwise the
// unchecked-hash ones) and makes the patch shadowed when some cannot be
// removed (plan.Bytecode: source gives each edited file's identity on
// disk). A dry run removes nothing: bytecode that would have to go makes
// the patch shadowed there, saying that a start removes it.
func checkBytecode(r *Result, source func(path string) (identity, bool), wrote, dry bool) {
	var shadows []string
	for i := range r.Edits {
		e := &r.Edits[i]
		if e.State == patchdef.NotApplicable || e.Path == "" {
			continue
		}
		id, verified := source(e.Path)
		removed, stuck := removePycs(e.Path, wrote, dry, id, verified)
		e.PycsRemoved = removed
		shadows = append(shadows, stuck...)
	}
	if len(shadows) > 0 {
		r.State = patchdef.Shadowed
		if dry {
			r.Why = "stale bytecode would run instead of the patched source (a start removes it): " + strings.Join(shadows, "; ")
		} else {
			r.Why = "stale bytecode that could not be removed would run instead of the patched source: " + strings.Join(shadows, "; ")
		}
	}
}
