package capability_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
)

// BenchmarkCheckLoadsNewMount is the native load verdict of a tree whose
// library over 1 MiB (a copy of the real libcrypto.so.3) was given a new
// inode and change time with its bytes, size and mtime kept, as a new
// overlay mount of the same image shows it: "full" checks the tree again
// (no state directory), "cached" takes the verdict by the library's build
// ID.
func BenchmarkCheckLoadsNewMount(b *testing.B) {
	data, _ := largeLibrary(b)
	tree := b.TempDir()
	lib := filepath.Join(tree, "lib")
	big := filepath.Join(lib, "libcrypto.so.3")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(big, data, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, n := range []string{"libdemo.so.1", "libother.so.1", "libthird.so.1"} {
		if err := fixture.SharedObject(filepath.Join(lib, n), n, "libcrypto.so.3"); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(fileid.RacyWindow)
	for _, c := range []struct {
		name   string
		cached bool
	}{{"full", false}, {"cached", true}} {
		b.Run(c.name, func(b *testing.B) {
			in := capability.LoadInput{Dir: tree, ImageRoot: "/", LibraryPath: []string{lib}}
			if c.cached {
				in.CacheDir = b.TempDir()
				time.Sleep(fileid.RacyWindow) // after the last run's new inode
				if capability.CheckLoads(in).Cached || !capability.CheckLoads(in).Cached {
					b.Fatal("no verdict kept")
				}
			}
			for b.Loop() {
				b.StopTimer()
				remount(b, big, data)
				b.StartTimer()
				if v := capability.CheckLoads(in); v.Cached != c.cached || !v.OK() {
					b.Fatalf("cached %t, want %t; failed %v %s", v.Cached, c.cached, v.Failed, v.Error)
				}
			}
		})
	}
}
