package ociimage

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/infera/infera-exec/tools/payloadindex"
)

// The payload BenchmarkImage builds an image of: four native libraries of
// 64 MB and 2,000 Python modules (1 to 50 KB), about 300 MB, compressible
// about as a real one is (machine-code-like runs of random bytes between
// repeated text), generated from a fixed seed: the same payload every run.
const (
	benchImageLibs      = 4
	benchImageLibBytes  = 64 << 20
	benchImagePyFiles   = 2000
	benchImagePyMaxSize = 50 << 10
)

// genImageTrees writes the benchmark's trees under dir: dir/py312 and
// dir/native, and returns their bytes.
func genImageTrees(b *testing.B, dir string) int64 {
	b.Helper()
	rng := rand.NewChaCha8([32]byte{43})
	words := strings.Fields("def return self import from class if else for in not None True False " +
		"torch tensor device stream event kv_cache chunk send recv layer block size len range")
	var total int64
	write := func(rel string, size int, text bool) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 0, size+64)
		for len(buf) < size {
			if !text && rng.Uint64()%2 == 0 {
				run := make([]byte, 16+rng.Uint64()%64)
				rng.Read(run)
				buf = append(buf, run...)
				continue
			}
			for i := 0; i < 8; i++ {
				buf = append(buf, words[rng.Uint64()%uint64(len(words))]...)
				buf = append(buf, ' ')
			}
			buf = append(buf, '\n')
		}
		if err := os.WriteFile(p, buf[:size], 0o644); err != nil {
			b.Fatal(err)
		}
		total += int64(size)
	}
	sizes := rand.New(rand.NewPCG(43, 43))
	for i := 0; i < benchImageLibs; i++ {
		write(fmt.Sprintf("native/lib/libbench%d.so", i), benchImageLibBytes, false)
	}
	for i := 0; i < benchImagePyFiles; i++ {
		write(fmt.Sprintf("py312/pkg%02d/mod%04d.py", i/100, i), 1<<10+sizes.IntN(benchImagePyMaxSize-1<<10), true)
	}
	return total
}

// cpuTime is the process's user and system time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkImage is `make bench`'s image row: `infera-payload image` (Build:
// the check of the payload against its index, the layer, the OCI layout
// and the docker-archive) on the generated payload of genImageTrees, with
// the wall time and the CPU time (user+system, all threads) of each build,
// and the layer's size. Run it with -benchtime 1x (make bench): one
// build per run is the figure.
func BenchmarkImage(b *testing.B) {
	dir := b.TempDir()
	size := genImageTrees(b, filepath.Join(dir, "trees"))
	payload := filepath.Join(dir, "payload")
	if _, err := payloadindex.Build(payloadindex.Options{Out: payload, Bin: shim(b),
		Trees: []string{filepath.Join(dir, "trees", "py312") + ":py312", filepath.Join(dir, "trees", "native") + ":native/rocm7-py312"}}); err != nil {
		b.Fatal(err)
	}
	o := Options{
		Payload: payload, OCI: filepath.Join(dir, "oci"), Archive: filepath.Join(dir, "overlay.tar"),
		Tag: "latest", Name: "infera/overlay:bench", Version: "bench", Revision: "0123456789ab",
		Arch: runtime.GOARCH, OS: "linux", Created: time.Unix(0, 0).UTC(),
		Busybox: shim(b), BusyboxCopyright: testCopyright(b), Force: true,
	}
	var wall, cpu time.Duration
	var digest string
	n := 0
	for b.Loop() {
		t, c := time.Now(), cpuTime(b)
		r, err := Build(o)
		wall, cpu = wall+time.Since(t), cpu+cpuTime(b)-c
		if err != nil {
			b.Fatal(err)
		}
		if digest != "" && r.Digest.String() != digest {
			b.Fatalf("two builds of one payload: digests %s and %s", digest, r.Digest)
		}
		digest = r.Digest.String()
		n++
	}
	fi, err := os.Stat(o.Archive)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(wall.Seconds()/float64(n), "wall-s/build")
	b.ReportMetric(cpu.Seconds()/float64(n), "cpu-s/build")
	b.ReportMetric(float64(size)/1e6, "payload-MB")
	b.ReportMetric(float64(fi.Size())/1e6, "archive-MB")
	fmt.Printf("BenchmarkImage: %d MB payload, GOMAXPROCS %d: wall %.2f s, CPU %.2f s per build; archive %.1f MB; digest %s\n",
		size/1e6, runtime.GOMAXPROCS(0), wall.Seconds()/float64(n), cpu.Seconds()/float64(n), float64(fi.Size())/1e6, digest)
}
