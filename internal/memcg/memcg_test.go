package memcg

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tree writes files (path relative to root: content) and returns root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(c), 0o644))
	}
	return root
}

// The files as the kernel writes them (mm/memcontrol.c, memcontrol-v1.c).
const (
	v2Events = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
	v1OOM    = "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"
	// A cgroup v1 host with a v2 hierarchy mounted beside it (hybrid).
	selfV1 = "12:pids:/kubepods/pod1/c1\n4:cpu,cpuacct:/kubepods/pod1/c1\n3:memory:/kubepods/pod1/c1\n0::/\n"
	selfV2 = "0::/kubepods.slice/pod1/c1\n"
)

func TestV2(t *testing.T) {
	root := tree(t, map[string]string{
		"kubepods.slice/pod1/c1/memory.max":    "103079215104\n",
		"kubepods.slice/pod1/c1/memory.events": v2Events,
	})
	g := FindFrom(root, selfV2)
	assert.Equal(t, Group{Dir: filepath.Join(root, "kubepods.slice/pod1/c1")}, g)
	lim, from, ok := g.Limit()
	require.True(t, ok, from)
	assert.Equal(t, uint64(96<<30), lim)
	assert.Equal(t, filepath.Join(g.Dir, "memory.max"), from)
	n, from, ok := g.OOMKills()
	require.True(t, ok, from)
	assert.Equal(t, uint64(2), n, "oom_kill, not oom or oom_group_kill")
}

func TestV2Max(t *testing.T) {
	g := FindFrom(tree(t, map[string]string{"memory.max": "max\n", "memory.events": v2Events}), selfV2)
	lim, _, ok := g.Limit()
	require.True(t, ok)
	assert.Zero(t, lim, "max is no limit")
}

// In a private cgroup namespace, or with the container's cgroup bound at
// the root, /proc/self/cgroup names a path the root does not show.
func TestNamespacedFallsBackToRoot(t *testing.T) {
	root := tree(t, map[string]string{"memory.max": "1073741824\n", "memory.events": v2Events})
	g := FindFrom(root, selfV2)
	assert.Equal(t, Group{Dir: root}, g)
	lim, _, ok := g.Limit()
	require.True(t, ok)
	assert.Equal(t, uint64(1<<30), lim)

	root = tree(t, map[string]string{"memory/memory.limit_in_bytes": "1073741824\n", "memory/memory.oom_control": v1OOM})
	g = FindFrom(root, selfV1)
	assert.Equal(t, Group{Dir: filepath.Join(root, "memory"), V1: true}, g)
}

func TestV1(t *testing.T) {
	root := tree(t, map[string]string{
		"memory/kubepods/pod1/c1/memory.limit_in_bytes": "2199023255552\n",
		"memory/kubepods/pod1/c1/memory.oom_control":    v1OOM,
		"memory/memory.limit_in_bytes":                  "9223372036854771712\n",
		"unified/cgroup.procs":                          "",
	})
	g := FindFrom(root, selfV1)
	assert.Equal(t, Group{Dir: filepath.Join(root, "memory/kubepods/pod1/c1"), V1: true}, g)
	lim, _, ok := g.Limit()
	require.True(t, ok)
	assert.Equal(t, uint64(2<<40), lim)
	n, _, ok := g.OOMKills()
	require.True(t, ok)
	assert.Equal(t, uint64(5), n)
}

func TestV1NoLimit(t *testing.T) {
	g := FindFrom(tree(t, map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}), selfV1)
	lim, from, ok := g.Limit()
	require.True(t, ok, from)
	assert.Zero(t, lim, "v1's largest page-aligned value is no limit")
}

// An unreadable /proc/self/cgroup: the root's files decide the version.
func TestNoSelf(t *testing.T) {
	root := tree(t, map[string]string{"memory/memory.limit_in_bytes": "4096\n"})
	g := FindFrom(root, "")
	assert.True(t, g.V1)
	lim, _, ok := g.Limit()
	require.True(t, ok)
	assert.Equal(t, uint64(4096), lim)
}

func TestMissingFiles(t *testing.T) {
	root := t.TempDir()
	g := FindFrom(root, selfV2)
	_, from, ok := g.Limit()
	assert.False(t, ok)
	assert.Contains(t, from, "no memory.max (cgroup v2)")
	_, from, ok = g.OOMKills()
	assert.False(t, ok)
	assert.Contains(t, from, "no memory.events (cgroup v2)")

	// A memory.events without the line (kernels before 4.13 in v1).
	g = FindFrom(tree(t, map[string]string{"memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n"}), selfV1)
	_, from, ok = g.OOMKills()
	assert.False(t, ok)
	assert.Contains(t, from, "has no oom_kill line")

	g = FindFrom(tree(t, map[string]string{"memory.max": "lots\n"}), selfV2)
	_, from, ok = g.Limit()
	assert.False(t, ok)
	assert.Contains(t, from, `holds "lots"`)
}

// A group outside this cgroup namespace reads as "/..": never a
// directory above root, even one that holds memory files.
func TestOutsideTheNamespaceStaysUnderRoot(t *testing.T) {
	top := tree(t, map[string]string{"memory.max": "1\n", "memory.events": v2Events, "cg/memory.max": "1073741824\n", "cg/memory.events": v2Events})
	root := filepath.Join(top, "cg")
	g := FindFrom(root, "0::/..\n")
	assert.Equal(t, Group{Dir: root}, g)
}
