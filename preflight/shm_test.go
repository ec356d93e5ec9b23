package preflight

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/config"
)

func shmStatfs(size uint64, noexec bool) func(string) (FS, error) {
	return func(string) (FS, error) {
		fs := fsFromMagic(0x01021994)
		fs.Size, fs.Noexec = size, noexec
		return fs, nil
	}
}

func shmInput(t *testing.T, size uint64, noexec bool, min ...uint64) *Facts {
	in := &Facts{ShmDir: t.TempDir(), Statfs: shmStatfs(size, noexec), ShmMin: config.DefaultShmMin}
	if len(min) > 0 {
		in.ShmMin = min[0]
	}
	return in
}

func TestShmPass(t *testing.T) {
	in := shmInput(t, 16<<30, false)
	r := checkShm(in)
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, in.ShmDir+" is 16 GiB (tmpfs), not noexec (minimum 1 GiB)", r.Seen)

	in = shmInput(t, 1<<30, false) // exactly the minimum
	assert.Equal(t, Pass, checkShm(in).Status)
}

func TestShmDockerDefault(t *testing.T) {
	in := shmInput(t, 64<<20, false)
	r := checkShm(in)
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, Warn, r.Severity)
	assert.Equal(t, in.ShmDir+" is 64 MiB (tmpfs), below the 1 GiB minimum", r.Seen)
	assert.Equal(t, "NCCL/RCCL and the engines' IPC put tensors in /dev/shm; the 64 MiB that Docker and containerd give by default makes multi-GPU workers crash with a bus error or hang.", r.Why)
	assert.Equal(t, "Mount a memory emptyDir at /dev/shm (emptyDir: {medium: Memory, sizeLimit: 16Gi}); with Docker, --shm-size=16g or --ipc=host.", r.Do)
}

func TestShmNoexec(t *testing.T) {
	in := shmInput(t, 16<<30, true)
	r := checkShm(in)
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, Warn, r.Severity)
	assert.Equal(t, in.ShmDir+" (16 GiB, tmpfs) is mounted noexec", r.Seen)
	assert.Equal(t, "Libraries that map executable code from /dev/shm fail to load when it is mounted noexec.", r.Why)
	assert.Equal(t, "Mount /dev/shm without noexec: a memory emptyDir is; with Docker, --ipc=host or --tmpfs /dev/shm:exec,size=16g.", r.Do)

	in = shmInput(t, 64<<20, true)
	r = checkShm(in)
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, in.ShmDir+" is 64 MiB (tmpfs), below the 1 GiB minimum, and mounted noexec", r.Seen)
	assert.Contains(t, r.Why, "bus error")
	assert.Contains(t, r.Why, "noexec")
	assert.Equal(t, "Mount a memory emptyDir at /dev/shm (emptyDir: {medium: Memory, sizeLimit: 16Gi}), which is not noexec; with Docker, --ipc=host or --tmpfs /dev/shm:exec,size=16g.", r.Do)
}

func TestShmMinimum(t *testing.T) {
	in := shmInput(t, 4<<30, false, 8<<30)
	r := checkShm(in)
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, in.ShmDir+" is 4 GiB (tmpfs), below the 8 GiB minimum", r.Seen)

	in = shmInput(t, 64<<20, false, 64<<20)
	r = checkShm(in)
	assert.Equal(t, Pass, r.Status, r.Seen)
	assert.Equal(t, in.ShmDir+" is 64 MiB (tmpfs), not noexec (minimum 64 MiB)", r.Seen)

	in = shmInput(t, 64<<20, false, 0)
	assert.Equal(t, Pass, checkShm(in).Status)
}

func TestShmMissingOrBroken(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "shm")
	r := checkShm(&Facts{ShmDir: missing, Statfs: shmStatfs(16<<30, false), ShmMin: config.DefaultShmMin})
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, Warn, r.Severity)
	assert.Equal(t, missing+" does not exist", r.Seen)

	file := filepath.Join(t.TempDir(), "shm")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	r = checkShm(&Facts{ShmDir: file, Statfs: shmStatfs(16<<30, false), ShmMin: config.DefaultShmMin})
	require.Equal(t, Fail, r.Status)
	assert.Equal(t, file+" is not a directory", r.Seen)

	dir := t.TempDir()
	r = checkShm(&Facts{ShmDir: dir, Statfs: func(string) (FS, error) { return FS{}, errors.New("boom") }, ShmMin: config.DefaultShmMin})
	assert.Equal(t, Skipped, r.Status)
	assert.Equal(t, "statfs "+dir+": boom", r.Seen)
}

func TestShmReal(t *testing.T) {
	r := checkShm(&Facts{ShmDir: "/dev/shm", ShmMin: config.DefaultShmMin})
	require.NotEqual(t, Skipped, r.Status, r.Seen)
	assert.True(t, strings.HasPrefix(r.Seen, "/dev/shm "), r.Seen)
	fs, err := RealStatfs("/dev/shm")
	require.NoError(t, err)
	assert.Contains(t, r.Seen, formatIEC(fs.Size))
}

func TestParseByteSize(t *testing.T) {
	good := map[string]uint64{
		"1073741824": 1 << 30,
		"0":          0,
		"8Gi":        8 << 30,
		"512Mi":      512 << 20,
		"512mi":      512 << 20,
		"2G":         2e9,
		"500M":       500e6,
		"1k":         1000,
		"1Ki":        1024,
		"1Ti":        1 << 40,
		"1.5Gi":      3 << 29,
		" 8 GiB ":    8 << 30,
		"2GB":        2e9,
		"100B":       100,
	}
	for in, want := range good {
		got, err := config.ParseByteSize(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, got, in)
		}
	}
	for _, in := range []string{"", "lots", "Gi", "-1", "-1Gi", "1Gx", "1Gib2", "8Xi", "NaN", "Inf", "1e400", "99999999999Pi", "1.2.3"} {
		_, err := config.ParseByteSize(in)
		assert.Error(t, err, in)
	}
}

func TestFormatIEC(t *testing.T) {
	for n, want := range map[uint64]string{
		0:               "0 B",
		1023:            "1023 B",
		1024:            "1 KiB",
		64 << 20:        "64 MiB",
		1 << 30:         "1 GiB",
		24684092 * 1024: "23.5 GiB",
		3 << 29:         "1.5 GiB",
		^uint64(0):      "16.0 EiB",
	} {
		assert.Equal(t, want, formatIEC(n), "%d", n)
	}
}

func TestFSFromMagic(t *testing.T) {
	tests := []struct {
		magic   uint32
		typ     string
		network bool
	}{
		{0x6969, "nfs", true},
		{0xFF534D42, "cifs", true},
		{0xFE534D42, "smb2", true},
		{0x65735546, "fuse", true},
		{0x00C36400, "ceph", true},
		{0x0BD00BD0, "lustre", true},
		{0x47504653, "gpfs", true},
		{0x01021997, "9p", true},
		{0x794c7630, "overlay", false},
		{0x01021994, "tmpfs", false},
		{0xEF53, "ext4", false},
		{0x58465342, "xfs", false},
		{0x9123683E, "btrfs", false},
		{0x2FC12FC1, "zfs", false},
		{0x73717368, "squashfs", false},
		{0x12345678, "0x12345678", false},
	}
	for _, tt := range tests {
		fs := fsFromMagic(tt.magic)
		assert.Equal(t, tt.typ, fs.Type)
		assert.Equal(t, tt.network, fs.Network, tt.typ)
		assert.Equal(t, int64(tt.magic), fs.Magic, tt.typ)
	}
}

func TestRealStatfs(t *testing.T) {
	for _, p := range []string{t.TempDir(), "/dev/shm"} {
		fs, err := RealStatfs(p)
		require.NoError(t, err, p)
		assert.NotEmpty(t, fs.Type, p)
		assert.NotZero(t, fs.Magic, p)
		assert.NotZero(t, fs.Size, p)
		// The same answer as the mount table, where it names the type.
		if typ, opts, ok := mountOf(t, p); ok && typ == "tmpfs" {
			assert.Equal(t, "tmpfs", fs.Type, p)
			assert.Equal(t, strings.Contains(","+opts+",", ",noexec,"), fs.Noexec, p)
		}
	}
	_, err := RealStatfs(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorIs(t, err, unix.ENOENT)
}

// mountOf finds the mount point of p in /proc/self/mounts.
func mountOf(t *testing.T, p string) (typ, opts string, ok bool) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", "", false
	}
	best := ""
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		mp := f[1]
		if (p == mp || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, typ, opts, ok = mp, f[2], f[3], true
		}
	}
	return typ, opts, ok
}

// TestRealStatfsMounts mounts tmpfs filesystems of known sizes and options
// in a private mount namespace and reads them back through RealStatfs and
// the shm check.
func TestRealStatfsMounts(t *testing.T) {
	if dir := os.Getenv("INFERA_TEST_STATFS_CHILD"); dir != "" {
		statfsChild(t, dir)
		return
	}
	dir := t.TempDir()
	args := []string{"--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		args = append(args, "--map-root-user")
	}
	args = append(args, os.Args[0], "-test.run=^TestRealStatfsMounts$", "-test.count=1")
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), "INFERA_TEST_STATFS_CHILD="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if os.Getenv("INFERA_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("unshare: %v\n%s", err, out)
		}
		if _, statErr := os.Stat(filepath.Join(dir, "mounted")); statErr != nil {
			t.Skipf("no mount namespace here: %v\n%s", err, out)
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
	var got struct {
		Small, Large FS
		SmallShm     Result
		LargeShm     Result
	}
	data, err := os.ReadFile(filepath.Join(dir, "out.json"))
	require.NoError(t, err, string(out))
	require.NoError(t, json.Unmarshal(data, &got))

	assert.Equal(t, FS{Magic: 0x01021994, Type: "tmpfs", Size: 64 << 20, Noexec: true}, got.Small)
	assert.Equal(t, FS{Magic: 0x01021994, Type: "tmpfs", Size: 2 << 30}, got.Large)

	assert.Equal(t, Fail, got.SmallShm.Status)
	assert.Equal(t, filepath.Join(dir, "small")+" is 64 MiB (tmpfs), below the 1 GiB minimum, and mounted noexec", got.SmallShm.Seen)
	assert.Equal(t, Pass, got.LargeShm.Status)
	assert.Equal(t, filepath.Join(dir, "large")+" is 2 GiB (tmpfs), not noexec (minimum 1 GiB)", got.LargeShm.Seen)
}

func statfsChild(t *testing.T, dir string) {
	small, large := filepath.Join(dir, "small"), filepath.Join(dir, "large")
	require.NoError(t, os.Mkdir(small, 0o755))
	require.NoError(t, os.Mkdir(large, 0o755))
	require.NoError(t, unix.Mount("tmpfs", small, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, "size=64m"))
	require.NoError(t, unix.Mount("tmpfs", large, "tmpfs", 0, "size=2g"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mounted"), nil, 0o644))
	var out struct {
		Small, Large FS
		SmallShm     Result
		LargeShm     Result
	}
	var err error
	out.Small, err = RealStatfs(small)
	require.NoError(t, err)
	out.Large, err = RealStatfs(large)
	require.NoError(t, err)
	out.SmallShm = checkShm(&Facts{ShmDir: small, ShmMin: config.DefaultShmMin})
	out.LargeShm = checkShm(&Facts{ShmDir: large, ShmMin: config.DefaultShmMin})
	data, err := json.Marshal(out)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "out.json"), data, 0o644))
}
