package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/infera/infera-exec/internal/boundedread"
)

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

func checkShm(in *Facts) Result {
	dir := in.ShmDir
	if dir == "" {
		dir = "/dev/shm"
	}
	min, note := in.ShmMin, ""
	if d := answers(in, dir); d != nil {
		return unanswered(in, "the shared memory directory", d)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(Warn, dir+" does not exist"+note, shmWhySmall, shmDoSmall)
	case err != nil:
		return fail(Warn, fmt.Sprintf("%s cannot be read: %v%s", dir, boundedread.BareErr(err), note), shmWhySmall, shmDoSmall)
	case !fi.IsDir():
		return fail(Warn, dir+" is not a directory"+note, shmWhySmall, shmDoSmall)
	}
	fsys, err := statfsOf(in, dir)
	if err != nil {
		return skipped(fmt.Sprintf("statfs %s: %v%s", dir, boundedread.BareErr(err), note))
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
