package mountinfo

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pod's table: the image's overlay root, a model volume on NFS, a
// FUSE-mounted bucket, a CIFS share with a space in its mount point, and a
// tmpfs stacked over part of the NFS volume.
const podTable = `626 555 0:52 / / rw,relatime master:210 - overlay overlay rw,lowerdir=/var/lib/l/1,upperdir=/var/lib/u,workdir=/var/lib/w
627 626 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
628 626 0:56 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
640 626 0:60 / /models rw,relatime shared:7 master:3 - nfs4 10.0.0.5:/export/models rw,vers=4.2,rsize=1048576
641 626 0:61 / /buckets/weights rw,nosuid,nodev,relatime - fuse.s3fs s3fs rw,user_id=0,group_id=0
642 626 0:62 / /mnt/team\040share rw,relatime - cifs //fs/team rw,vers=3.0
643 640 0:63 / /models/scratch rw,relatime - tmpfs tmpfs rw
644 626 0:64 / /data rw - myfancyfs /dev/sdz rw
645 644 0:65 / /data rw - xfs /dev/nvme0n1 rw
`

func podT(t *testing.T) *Table {
	tab, err := Parse(strings.NewReader(podTable))
	require.NoError(t, err)
	return tab
}

func TestLookup(t *testing.T) {
	tab := podT(t)
	for _, tc := range []struct {
		path, point, fstype string
		kind                Kind
	}{
		{"/models/Llama-3.1-8B", "/models", "nfs4", Remote},
		{"/models", "/models", "nfs4", Remote},
		{"/models/", "/models", "nfs4", Remote},
		{"/modelsX/a", "/", "overlay", Local}, // a prefix, not a parent
		{"/models/scratch/x", "/models/scratch", "tmpfs", Local},
		{"/models/a/../scratch/x", "/models/scratch", "tmpfs", Local},
		{"/buckets/weights/m", "/buckets/weights", "fuse.s3fs", Remote},
		{"/mnt/team share/m", "/mnt/team share", "cifs", Remote},
		{"/data/m", "/data", "xfs", Local}, // stacked: the later mount answers
		{"/usr/lib", "/", "overlay", Local},
	} {
		m, kind := tab.KindOf(tc.path)
		assert.Equal(t, tc.point, m.Point, tc.path)
		assert.Equal(t, tc.fstype, m.FSType, tc.path)
		assert.Equal(t, tc.kind, kind, tc.path)
	}
	_, kind := tab.KindOf("relative/path")
	assert.Equal(t, Unknown, kind)
	_, kind = (&Table{}).KindOf("/models")
	assert.Equal(t, Unknown, kind, "no mount for the path")
}

func TestDescribe(t *testing.T) {
	m, _ := podT(t).KindOf("/models/x")
	assert.Equal(t, "nfs4 from 10.0.0.5:/export/models", m.Describe())
	m, _ = podT(t).KindOf("/dev/x")
	assert.Equal(t, "tmpfs", m.Describe())
	assert.Equal(t, "an unknown filesystem", Mount{}.Describe())
}

func TestClassify(t *testing.T) {
	for fstype, kind := range map[string]Kind{
		"nfs": Remote, "nfs4": Remote, "cifs": Remote, "fuse.sshfs": Remote, "fuse": Remote,
		"fuseblk": Remote, "lustre": Remote, "ceph": Remote, "9p": Remote, "virtiofs": Remote,
		"ext4": Local, "xfs": Local, "btrfs": Local, "tmpfs": Local, "overlay": Local,
		"myfancyfs": Unknown, "": Unknown,
	} {
		assert.Equal(t, kind, Classify(fstype), fstype)
	}
}

func TestParseRejects(t *testing.T) {
	for _, bad := range []string{
		"1 2 0:1 / /x rw\n",            // no separator
		"1 2 0:1 / /x rw - ext4\n",     // no source
		"garbage\n",                    // too short
		"1 2 0:1 / /x rw shared:1 -\n", // nothing after the separator
	} {
		_, err := Parse(strings.NewReader(bad))
		assert.Error(t, err, bad)
	}
}

func TestReadSelf(t *testing.T) {
	tab, err := Read(SelfPath)
	require.NoError(t, err)
	m, ok := tab.Lookup("/")
	require.True(t, ok)
	assert.Equal(t, "/", m.Point)
	_, err = Read(filepath.Join(t.TempDir(), "missing"))
	assert.Error(t, err)
	// Only a regular file is read: a FIFO in its place is refused at
	// once, not waited on.
	fifo := filepath.Join(t.TempDir(), "mountinfo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	_, err = Read(fifo)
	assert.ErrorIs(t, err, boundedread.ErrNotRegular)
}

// Links are followed on local filesystems only: a local link into the NFS
// volume lands on NFS; past the first remote component nothing is
// resolved.
func TestWhere(t *testing.T) {
	dir := t.TempDir()
	tab := &Table{Mounts: []Mount{
		{Point: "/", FSType: "ext4", Source: "/dev/vda", Kind: Local},
		{Point: "/nfs", FSType: "nfs4", Source: "srv:/export", Kind: Remote},
	}}
	require.NoError(t, os.Symlink("/nfs/models", filepath.Join(dir, "abs")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "real"), 0o755))
	require.NoError(t, os.Symlink("real", filepath.Join(dir, "rel")))
	require.NoError(t, os.Symlink("loop", filepath.Join(dir, "loop")))

	p, m, kind := tab.Where(filepath.Join(dir, "abs", "llama"))
	assert.Equal(t, "/nfs/models/llama", p)
	assert.Equal(t, Remote, kind)
	assert.Equal(t, "srv:/export", m.Source)

	p, _, kind = tab.Where(filepath.Join(dir, "rel", "x"))
	assert.Equal(t, filepath.Join(dir, "real", "x"), p)
	assert.Equal(t, Local, kind)

	p, _, kind = tab.Where(filepath.Join(dir, "loop", "x"))
	assert.Equal(t, Local, kind, "a loop ends the walk; the caller's access reports it")
	assert.True(t, strings.HasPrefix(p, dir), p)

	// Past the remote mount point the path is text: nothing is looked at.
	p, _, kind = tab.Where("/nfs/a/../b")
	assert.Equal(t, "/nfs/b", p)
	assert.Equal(t, Remote, kind)
}

// refParse is the mountinfo grammar written plainly (a field slice per
// line): Parse must agree with it on every input.
func refParse(s string) ([]Mount, bool) {
	var out []Mount
	for _, line := range strings.Split(s, "\n") {
		f := strings.FieldsFunc(line, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
		if len(f) == 0 {
			continue
		}
		sep := slices.Index(f[min(6, len(f)):], "-")
		if len(f) < 7 || sep < 0 || 6+sep+2 >= len(f) {
			return nil, false
		}
		sep += 6
		fstype := unescape(f[sep+1])
		out = append(out, Mount{Point: unescape(f[4]), FSType: fstype, Source: unescape(f[sep+2]), Kind: Classify(fstype)})
	}
	return out, true
}

// A mount point may hold any byte but the four the kernel escapes; a
// no-break space (U+00A0) is part of the name, not a separator.
func TestParseKeepsUnicodeSpaces(t *testing.T) {
	tab, err := Parse(strings.NewReader("1 2 0:1 / /mnt/a\u00a0b rw - ext4 /dev/vda rw\n\n"))
	require.NoError(t, err)
	require.Len(t, tab.Mounts, 1)
	assert.Equal(t, "/mnt/a\u00a0b", tab.Mounts[0].Point)
}

func FuzzParse(f *testing.F) {
	f.Add(podTable)
	f.Add(`1 2 0:1 / /a\040b rw - fuse.x y\134z rw`)
	f.Add("1 2 0:1 / /x rw shared:1 -\n")
	f.Add("\t\n1 2 0:1 / /x rw a b - - - -\r\n")
	f.Fuzz(func(t *testing.T, s string) {
		tab, err := Parse(strings.NewReader(s))
		want, ok := refParse(s)
		if ok != (err == nil) {
			t.Fatalf("Parse error %v, reference ok %v", err, ok)
		}
		if err != nil {
			return
		}
		if len(want) != len(tab.Mounts) || (len(want) > 0 && !reflect.DeepEqual(want, tab.Mounts)) {
			t.Fatalf("Parse gave %+v, reference %+v", tab.Mounts, want)
		}
		for _, m := range tab.Mounts {
			if got, ok := tab.Lookup(m.Point); ok && !under(filepath.Clean(m.Point), got.Point) && filepath.IsAbs(m.Point) {
				t.Fatalf("lookup of %q gave %q", m.Point, got.Point)
			}
		}
	})
}
