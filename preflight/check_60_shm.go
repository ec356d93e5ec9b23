package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
)

func init() {
	register(Check{
		Name: "shm",
		What: "/dev/shm is large enough for NCCL/RCCL and the engines' IPC, and not mounted noexec",
		Run:  checkShm,
	})
}

// defaultShmMin is the smallest /dev/shm that does not warn, unless
// INFERA_PREFLIGHT_SHM_MIN says otherwise.
const defaultShmMin = 1 << 30

const (
	shmWhySmall = "NCCL/RCCL and the engines' IPC put tensors in /dev/shm; " +
		"the 64 MiB that Docker and containerd give by default makes " +
		"multi-GPU workers crash with a bus error or hang."
	shmWhyNoexec = "Libraries that map executable code from /dev/shm fail " +
		"to load when it is mounted noexec."
	shmDoSmall = "Mount a memory emptyDir at /dev/shm (emptyDir: {medium: " +
		"Memory, sizeLimit: 16Gi}); with Docker, --shm-size=16g or --ipc=host."
	shmDoNoexec = "Mount /dev/shm without noexec: a memory emptyDir is; with " +
		"Docker, --ipc=host or --tmpfs /dev/shm:exec,size=16g."
	shmDoBoth = "Mount a memory emptyDir at /dev/shm (emptyDir: {medium: " +
		"Memory, sizeLimit: 16Gi}), which is not noexec; with Docker, " +
		"--ipc=host or --tmpfs /dev/shm:exec,size=16g."
)

func checkShm(in *Input) Result {
	dir := in.ShmDir
	if dir == "" {
		dir = "/dev/shm"
	}
	min, note := uint64(defaultShmMin), ""
	if v := strings.TrimSpace(in.Env["INFERA_PREFLIGHT_SHM_MIN"]); v != "" {
		n, err := parseByteSize(v)
		if err != nil {
			note = fmt.Sprintf("; INFERA_PREFLIGHT_SHM_MIN=%q is not a size such as 8Gi, %s used", v, formatIEC(min))
		} else {
			min = n
		}
	}
	if d := answers(in, dir); d != nil {
		return unanswered(in, "the shared memory directory", d)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(Warn, dir+" does not exist"+note, shmWhySmall, shmDoSmall)
	case err != nil:
		return fail(Warn, fmt.Sprintf("%s cannot be read: %v%s", dir, pathErr(err), note), shmWhySmall, shmDoSmall)
	case !fi.IsDir():
		return fail(Warn, dir+" is not a directory"+note, shmWhySmall, shmDoSmall)
	}
	fsys, err := statfsOf(in, dir)
	if err != nil {
		return skipped(fmt.Sprintf("statfs %s: %v%s", dir, pathErr(err), note))
	}
	small := fsys.Size < min
	switch {
	case small && fsys.Noexec:
		return fail(Warn, fmt.Sprintf("%s is %s (%s), below the %s minimum, and mounted noexec%s",
			dir, formatIEC(fsys.Size), fsys.Type, formatIEC(min), note),
			shmWhySmall+" "+shmWhyNoexec, shmDoBoth)
	case small:
		return fail(Warn, fmt.Sprintf("%s is %s (%s), below the %s minimum%s",
			dir, formatIEC(fsys.Size), fsys.Type, formatIEC(min), note),
			shmWhySmall, shmDoSmall)
	case fsys.Noexec:
		return fail(Warn, fmt.Sprintf("%s (%s, %s) is mounted noexec%s",
			dir, formatIEC(fsys.Size), fsys.Type, note),
			shmWhyNoexec, shmDoNoexec)
	}
	return pass(fmt.Sprintf("%s is %s (%s), not noexec (minimum %s)%s",
		dir, formatIEC(fsys.Size), fsys.Type, formatIEC(min), note))
}

// parseByteSize reads a size as Kubernetes quantities write it: bytes
// (1073741824), binary suffixes (512Mi, 8Gi) or decimal ones (2G, 500M),
// with an optional B (8GiB, 2GB) and fractions (1.5Gi).
func parseByteSize(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	num := strings.TrimRightFunc(s, func(r rune) bool {
		return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
	})
	unit := strings.ToLower(s[len(num):])
	num = strings.TrimSpace(num)
	unit = strings.TrimSuffix(unit, "b")
	mult := 1.0
	if unit != "" {
		i := strings.IndexByte("kmgtp", unit[0])
		if i < 0 || len(unit) > 2 || (len(unit) == 2 && unit[1] != 'i') {
			return 0, fmt.Errorf("unknown unit in %q", s)
		}
		base := 1000.0
		if len(unit) == 2 {
			base = 1024
		}
		mult = math.Pow(base, float64(i+1))
	}
	if n, err := strconv.ParseUint(num, 10, 64); err == nil && mult == 1 {
		return n, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || f < 0 {
		return 0, fmt.Errorf("not a size: %q", s)
	}
	v := f * mult
	if v >= math.MaxUint64 {
		return 0, fmt.Errorf("too large: %q", s)
	}
	return uint64(v), nil
}

// formatIEC is a byte count in binary units: 64 MiB, 1 GiB, 23.5 GiB.
func formatIEC(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i, div := 0, uint64(1)
	for i+1 < len(units) && n/div >= 1024 {
		i, div = i+1, div*1024
	}
	if n%div == 0 {
		return fmt.Sprintf("%d %s", n/div, units[i])
	}
	return fmt.Sprintf("%.1f %s", float64(n)/float64(div), units[i])
}
