package libionic

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/rdma"
)

// Debian bookworm's rdma-core 44 (libibverbs1, ibverbs-providers): real
// ELF files with the real layout. libmana stands in for libionic, which
// no Debian release ships yet.
const (
	multiarch = "/usr/lib/x86_64-linux-gnu"
	realVerbs = multiarch + "/libibverbs.so.1.14.44.0"
	realMana  = multiarch + "/libmana.so.1.0.44.0"
)

func needDebianRDMA(t *testing.T) {
	t.Helper()
	for _, p := range []string{realVerbs, realMana, "/lib/x86_64-linux-gnu/libc.so.6"} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("INFERA_REQUIRE_FIXTURES") == "1" {
				t.Fatalf("fixture %s missing (apt-get install libibverbs1 ibverbs-providers)", p)
			}
			t.Skipf("fixture %s missing (apt-get install libibverbs1 ibverbs-providers)", p)
		}
	}
}

func copyFile(t *testing.T, src, dst string, extra ...byte) {
	t.Helper()
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	require.NoError(t, os.WriteFile(dst, append(data, extra...), 0o644))
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	require.NoError(t, os.Symlink(target, link))
}

// fakeRoot lays out a container as the Debian packages do, with a mana
// provider that differs from the host build by one trailing byte.
func fakeRoot(t *testing.T, withProvider bool) string {
	t.Helper()
	needDebianRDMA(t)
	root := t.TempDir()
	lib := filepath.Join(root, multiarch)
	copyFile(t, realVerbs, filepath.Join(lib, "libibverbs.so.1.14.44.0"))
	symlink(t, "libibverbs.so.1.14.44.0", filepath.Join(lib, "libibverbs.so.1"))
	copyFile(t, "/lib/x86_64-linux-gnu/libc.so.6", filepath.Join(lib, "libc.so.6"))
	if withProvider {
		copyFile(t, realMana, filepath.Join(lib, "libmana.so.1.0.44.0"), 0)
		symlink(t, "libmana.so.1.0.44.0", filepath.Join(lib, "libmana.so.1"))
		symlink(t, "../libmana.so.1.0.44.0", filepath.Join(lib, "libibverbs/libmana-rdmav34.so"))
		require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/libibverbs.d"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, "etc/libibverbs.d/mana.driver"), []byte("driver mana\n"), 0o644))
	}
	copyFile(t, realMana, filepath.Join(root, "host-libionic/libionic.so"))
	return root
}

func opts(root string) Options {
	return Options{Host: "/host-libionic/libionic.so", Name: "mana", Root: root, FallbackDirs: []string{"/run/infera-exec/rdma"}}
}

func TestDiscoverReadsLibibverbs(t *testing.T) {
	root := fakeRoot(t, true)
	c, ref, err := Discover(root, "mana")
	require.NoError(t, err)
	require.NotNil(t, ref)
	assert.Equal(t, multiarch+"/libibverbs.so.1", c.Libibverbs)
	assert.Equal(t, multiarch+"/libibverbs.so.1.14.44.0", c.LibibverbsFile)
	assert.Equal(t, multiarch+"/libibverbs", c.ProviderDir, "compiled into libibverbs as .../lib%s-rdmav34.so")
	assert.Equal(t, 34, c.PABI)
	assert.Equal(t, "/etc/libibverbs.d", c.ConfigDir)
	assert.Equal(t, "/etc/libibverbs.d/mana.driver", c.DriverFile)
	assert.Equal(t, []string{multiarch + "/libmana.so.1", multiarch + "/libmana.so.1.0.44.0"}, c.SonameChain)
	assert.Equal(t, []string{multiarch + "/libibverbs/libmana-rdmav34.so", multiarch + "/libmana.so.1.0.44.0"}, c.ProviderChain)
	assert.Equal(t, []string{multiarch + "/libmana.so.1.0.44.0"}, c.Files, "both names lead to one file")
}

func TestSwapInPlaceThenNoop(t *testing.T) {
	root := fakeRoot(t, true)
	orig, err := os.ReadFile(filepath.Join(root, multiarch, "libmana.so.1.0.44.0"))
	require.NoError(t, err)
	host, err := os.ReadFile(filepath.Join(root, "host-libionic/libionic.so"))
	require.NoError(t, err)

	r := Swap(context.Background(), opts(root))
	require.Equal(t, Replaced, r.State, r.Summary)
	assert.Equal(t, "in-place", r.Route)
	assert.Equal(t, []string{multiarch + "/libmana.so.1.0.44.0"}, r.Replaced)
	assert.Equal(t, "replaced "+multiarch+"/libmana.so.1.0.44.0 with the host libionic build", r.Summary)
	for _, name := range []string{"libmana.so.1", "libibverbs/libmana-rdmav34.so", "libmana.so.1.0.44.0"} {
		got, err := os.ReadFile(filepath.Join(root, multiarch, name))
		require.NoError(t, err)
		assert.Equal(t, host, got, "%s leads to the host build", name)
	}
	backup, err := os.ReadFile(filepath.Join(root, multiarch, ".libmana.so.1.0.44.0.infera-orig"))
	require.NoError(t, err)
	assert.Equal(t, orig, backup, "the original is kept, to undo the swap")
	for _, c := range r.Checks {
		assert.True(t, c.OK, "%s: %s", c.Name, c.Detail)
	}
	assert.NotEmpty(t, r.Checks)

	// A restart finds the host build in place and writes nothing.
	fi1, _ := os.Stat(filepath.Join(root, multiarch, "libmana.so.1.0.44.0"))
	r = Swap(context.Background(), opts(root))
	assert.Equal(t, Unchanged, r.State, r.Summary)
	fi2, _ := os.Stat(filepath.Join(root, multiarch, "libmana.so.1.0.44.0"))
	assert.Equal(t, fi1.ModTime(), fi2.ModTime())
}

func TestSwapRefusesWhatWouldNotLoad(t *testing.T) {
	cases := []struct {
		name  string
		host  func(t *testing.T, p string)
		wants string
	}{
		{"needs a newer private ABI", func(t *testing.T, p string) { editBytes(t, p, "IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_59") }, "IBVERBS_PRIVATE_59"},
		{"needs a newer glibc", func(t *testing.T, p string) { editBytes(t, p, "GLIBC_2.4\x00", "GLIBC_9.9\x00") }, "GLIBC_9.9"},
		{"empty", func(t *testing.T, p string) { require.NoError(t, os.WriteFile(p, nil, 0o644)) }, "empty"},
		{"not ELF", func(t *testing.T, p string) { require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644)) }, "ELF"},
		{"dangling symlink", func(t *testing.T, p string) { os.Remove(p); require.NoError(t, os.Symlink("nowhere.so", p)) }, "libionic.so"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := fakeRoot(t, true)
			c.host(t, filepath.Join(root, "host-libionic/libionic.so"))
			before, err := os.ReadFile(filepath.Join(root, multiarch, "libmana.so.1.0.44.0"))
			require.NoError(t, err)
			r := Swap(context.Background(), opts(root))
			assert.Equal(t, Refused, r.State)
			assert.Contains(t, r.Summary, c.wants)
			after, err := os.ReadFile(filepath.Join(root, multiarch, "libmana.so.1.0.44.0"))
			require.NoError(t, err)
			assert.Equal(t, before, after, "the container's provider is kept")
			assert.Empty(t, r.Replaced)
			_, err = os.Lstat(filepath.Join(root, multiarch, ".libmana.so.1.0.44.0.infera-orig"))
			assert.True(t, os.IsNotExist(err), "nothing written, not even a backup")
		})
	}
}

func TestSwapWrongSoname(t *testing.T) {
	root := fakeRoot(t, true)
	o := opts(root)
	o.Name = "ionic" // the host file is a libmana: SONAME libmana.so.1
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/libibverbs.d/ionic.driver"), []byte("driver ionic\n"), 0o644))
	r := Swap(context.Background(), o)
	assert.Equal(t, Refused, r.State)
	assert.Contains(t, r.Summary, "libionic.so.1")
}

func TestSwapNotMountedOrDirectory(t *testing.T) {
	root := fakeRoot(t, true)
	o := opts(root)
	o.Host = "/host-libionic/absent.so"
	r := Swap(context.Background(), o)
	assert.Equal(t, NotMounted, r.State)
	o.Host = "/host-libionic"
	r = Swap(context.Background(), o)
	assert.Equal(t, Refused, r.State)
	assert.Contains(t, r.Summary, "is a directory")
}

// An image without the provider at all: the host build becomes
// lib<name>.so.1, with the provider link and the .driver file created.
func TestSwapCreatesMissingNames(t *testing.T) {
	root := fakeRoot(t, false)
	r := Swap(context.Background(), opts(root))
	require.Equal(t, Replaced, r.State, r.Summary)
	assert.ElementsMatch(t, []string{multiarch + "/libmana.so.1", multiarch + "/libibverbs/libmana-rdmav34.so", "/etc/libibverbs.d/mana.driver"}, r.Created)
	link, err := os.Readlink(filepath.Join(root, multiarch, "libibverbs/libmana-rdmav34.so"))
	require.NoError(t, err)
	assert.Equal(t, "../libmana.so.1", link)
	drv, err := os.ReadFile(filepath.Join(root, "etc/libibverbs.d/mana.driver"))
	require.NoError(t, err)
	assert.Equal(t, "driver mana\n", string(drv))
}

func TestDryRunWritesNothing(t *testing.T) {
	root := fakeRoot(t, true)
	o := opts(root)
	o.DryRun = true
	before := listing(t, root)
	r := Swap(context.Background(), o)
	assert.Equal(t, Planned, r.State)
	assert.Equal(t, "in-place", r.Route)
	assert.Contains(t, r.Summary, "would replace "+multiarch+"/libmana.so.1.0.44.0")
	assert.Equal(t, before, listing(t, root))
}

// The read-only route itself (the container tests make the directory
// really read-only): the host build goes where RDMAV_DRIVERS can name it.
func TestFallbackRoute(t *testing.T) {
	root := fakeRoot(t, true)
	c, _, err := Discover(root, "mana")
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "host-libionic/libionic.so"))
	require.NoError(t, err)
	o := opts(root)
	r := fallback(root, o, c, data, &Result{})
	require.Equal(t, Fallback, r.State, r.Summary)
	assert.Equal(t, "rdmav-drivers", r.Route)
	assert.Equal(t, map[string]string{"RDMAV_DRIVERS": "/run/infera-exec/rdma/libmana"}, r.Env)
	got, err := os.ReadFile(filepath.Join(root, "run/infera-exec/rdma/libmana-rdmav34.so"))
	require.NoError(t, err)
	assert.Equal(t, data, got)
	a, _ := os.Stat(filepath.Join(root, "run/infera-exec/rdma/libmana-rdmav34.so"))
	b, _ := os.Stat(filepath.Join(root, "run/infera-exec/rdma/libmana.so.1"))
	assert.True(t, os.SameFile(a, b), "one inode under both names, so the loader maps it once")

	// Again: nothing to write, same answer.
	r = fallback(root, o, c, data, &Result{})
	assert.Equal(t, Fallback, r.State)
	assert.Empty(t, r.Created)

	// No usable directory: no route, and the summary says why.
	require.NoError(t, os.WriteFile(filepath.Join(root, "afile"), nil, 0o644))
	o.FallbackDirs = []string{"/afile/rdma"}
	r = fallback(root, o, c, data, &Result{})
	assert.Equal(t, NoRoute, r.State)
	assert.Contains(t, r.Summary, "afile: not a directory")
}

// The kernel ABIs come from the run's inventory, and one the host build
// does not support is reported next to its range.
func TestKernelABI(t *testing.T) {
	root := fakeRoot(t, true)
	sys := filepath.Join(root, "sys")
	for i, dev := range []struct{ name, vendor, abi string }{{"ionic_0", "0x1dd8", "1"}, {"mlx5_0", "0x15b3", "1"}} {
		u := filepath.Join(sys, "class/infiniband_verbs", fmt.Sprintf("uverbs%d", i))
		require.NoError(t, os.MkdirAll(u, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(u, "ibdev"), []byte(dev.name+"\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(u, "abi_version"), []byte(dev.abi+"\n"), 0o644))
		d := filepath.Join(sys, "class/infiniband", dev.name, "device")
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "vendor"), []byte(dev.vendor+"\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(d, "device"), []byte("0x1002\n"), 0o644))
	}
	o := opts(root)
	o.RDMA = rdma.Read(sys, filepath.Join(root, "dev/infiniband"))
	r := Swap(context.Background(), o)
	require.Equal(t, Replaced, r.State)
	assert.Equal(t, []rdma.Uverbs{{Name: "uverbs0", IBDev: "ionic_0", ABI: 1}, {Name: "uverbs1", IBDev: "mlx5_0", ABI: 1}}, r.Kernel)
	require.NotNil(t, r.HostABI, "libmana's range is readable from the binary")
	assert.Equal(t, &ABIRange{1, 1}, r.HostABI)
	assert.Empty(t, r.Notes, "both devices speak ABI 1, which the host build supports")

	// A kernel whose driver speaks an ABI the host build does not support
	// is reported next to the range.
	require.NoError(t, os.WriteFile(filepath.Join(sys, "class/infiniband_verbs/uverbs0/abi_version"), []byte("4\n"), 0o644))
	o.RDMA = rdma.Read(sys, filepath.Join(root, "dev/infiniband"))
	r = Swap(context.Background(), o)
	assert.Contains(t, r.Notes, "the host build supports kernel ABI 1 to 1 but uverbs0 (ionic_0) speaks 4")

	// Without an inventory there is no kernel side to report.
	r = Swap(context.Background(), opts(root))
	assert.Empty(t, r.Kernel)
	assert.Empty(t, r.Notes)
}

func editBytes(t *testing.T, p, from, to string) {
	t.Helper()
	require.Equal(t, len(from), len(to))
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Contains(t, string(data), from)
	require.NoError(t, os.WriteFile(p, []byte(strings.ReplaceAll(string(data), from, to)), 0o644))
}

func listing(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			fmt.Fprintf(&b, "%s %v %d %d\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		}
		return nil
	})
	return b.String()
}

// The container's range the swap step already read is used as it is: the
// provider is not found and read a second time (here root has none).
func TestProviderABIReusesContainerRange(t *testing.T) {
	o := &Outcome{Swap: &Result{State: Refused, ContainerABI: &ABIRange{Min: 3, Max: 4}}}
	o.bind(t.TempDir(), "mana")
	lo, hi, ok := o.ProviderABI("mana0")
	require.True(t, ok)
	assert.Equal(t, [2]uint32{3, 4}, [2]uint32{lo, hi})
	_, _, ok = o.ProviderABI("mlx5_0")
	assert.False(t, ok, "another provider's device")
}
