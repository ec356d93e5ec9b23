package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/overlay"
)

// The payload BenchmarkInstall copies: six native libraries of 150 MB and
// 4,000 small Python files (1 to 50 KB), about 1 GB, as a payload of one
// ABI family carries.
const (
	benchLibs      = 6
	benchLibBytes  = 150 << 20
	benchPyFiles   = 4000
	benchPyMaxSize = 50 << 10
)

// installRuns is how often BenchmarkInstall runs each kind.
const installRuns = 7

// genInstallPayload writes the payload into dir (pseudo-random bytes from
// a fixed seed: the same payload every run) and its index.
func genInstallPayload(b *testing.B, dir string) int64 {
	b.Helper()
	rng := rand.NewChaCha8([32]byte{43})
	var total int64
	write := func(rel string, size int, mode os.FileMode) {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, min(size, 1<<20))
		for left := size; left > 0; left -= len(buf) {
			buf = buf[:min(left, len(buf))]
			rng.Read(buf)
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		total += int64(size)
	}
	sizes := rand.New(rand.NewPCG(43, 43))
	for i := 0; i < benchLibs; i++ {
		write(fmt.Sprintf("native/rocm7-py312/lib/libbench%d.so", i), benchLibBytes, 0o755)
	}
	for i := 0; i < benchPyFiles; i++ {
		write(fmt.Sprintf("py312/pkg%02d/mod%04d.py", i/100, i), 1<<10+sizes.IntN(benchPyMaxSize-1<<10), 0o644)
	}
	if _, err := overlay.WriteIndex(dir); err != nil {
		b.Fatal(err)
	}
	return total
}

// BenchmarkInstall is `make bench`'s install rows: side by side in one
// run, on one generated payload of about 1 GB (genInstallPayload), each
// over installRuns runs, interleaved round by round in a shuffled order:
//
//	cp -a + sync:  `cp -a SRC DEST && sync` into a DEST removed before
//	install:       `infera-exec --install DEST` into a DEST removed before
//	re-install:    `infera-exec --install DEST` over the DEST an install
//	               left: every file unchanged, vouched for by the install
//	               record
//
// A DEST is removed, and the filesystem synced, before each run, untimed:
// every run starts with nothing to write back. The source stays in the
// page cache (generated just before), for cp as for the install. It
// prints median, min and max, and each median over cp's.
func BenchmarkInstall(b *testing.B) {
	bin := shim(b)
	dir := b.TempDir()
	src := filepath.Join(dir, "payload")
	size := genInstallPayload(b, src)
	ix, _, err := overlay.ReadIndex(src)
	if err != nil {
		b.Fatal(err)
	}
	files := 0
	for _, e := range ix.Entries {
		if e.Type == "file" {
			files++
		}
	}
	env := append(os.Environ(), "PAYLOAD_ROOT="+src)
	run := func(name string, args ...string) (time.Duration, string) {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		t := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(t)
		if err != nil {
			b.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return d, string(out)
	}
	fresh := func(dest string) func() {
		return func() {
			if err := os.RemoveAll(dest); err != nil {
				b.Fatal(err)
			}
			unix.Sync()
		}
	}
	cpDest, inDest, reDest := filepath.Join(dir, "cp"), filepath.Join(dir, "install"), filepath.Join(dir, "reinstall")
	run(bin, "--install", "-q", reDest)
	var lastRe string
	type kind struct {
		name, metric string
		before       func()
		argv         []string
	}
	kinds := []kind{
		{"cp -a SRC DEST && sync", "cp-sync-s", fresh(cpDest), []string{"sh", "-c", `cp -a "$0" "$1" && sync`, src, cpDest}},
		{"--install DEST", "install-s", fresh(inDest), []string{bin, "--install", "-q", inDest}},
		{"--install over an unchanged DEST", "reinstall-s", unix.Sync, []string{bin, "--install", "-q", reDest}},
	}
	var rows []benchStats
	for b.Loop() {
		times := make([][]time.Duration, len(kinds))
		shuffle := rand.New(rand.NewPCG(3, 4))
		for r := 0; r < installRuns; r++ {
			for _, i := range shuffle.Perm(len(kinds)) {
				k := kinds[i]
				k.before()
				d, out := run(k.argv[0], k.argv[1:]...)
				times[i] = append(times[i], d)
				if i == 2 {
					lastRe = out
				}
			}
		}
		rows = rows[:0]
		for i, k := range kinds {
			ts := times[i]
			sort.Slice(ts, func(a, b int) bool { return ts[a] < ts[b] })
			rows = append(rows, benchStats{name: k.name, median: ts[len(ts)/2], min: ts[0], max: ts[len(ts)-1]})
		}
	}
	// The re-install copied nothing and had every file vouched for by
	// the record (the next one would have read none of them either).
	if !strings.Contains(lastRe, " 0 copied, ") {
		b.Fatalf("the re-install copied files: %s", lastRe)
	}
	var rec struct {
		Files map[string]json.RawMessage `json:"files"`
	}
	if data, err := os.ReadFile(filepath.Join(reDest, ".infera-install-record.json")); err != nil || json.Unmarshal(data, &rec) != nil || len(rec.Files) != files {
		b.Fatalf("the re-install's record does not vouch for all %d files (%d): %v", files, len(rec.Files), err)
	}
	cp := rows[0].median
	fmt.Printf("\n%-34s %9s %9s %9s %9s\n", "install", "median s", "min s", "max s", "/ cp+sync")
	for _, r := range rows {
		s := func(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }
		fmt.Printf("%-34s %9s %9s %9s %9.2f\n", r.name, s(r.median), s(r.min), s(r.max), float64(r.median)/float64(cp))
	}
	for i, k := range kinds {
		b.ReportMetric(rows[i].median.Seconds(), k.metric)
	}
	goal := func(r benchStats, most float64) string {
		v := float64(r.median) / float64(cp)
		met := "met"
		if v > most {
			met = "NOT MET"
		}
		return fmt.Sprintf("%.2f (<= %.2f: %s)", v, most, met)
	}
	fmt.Printf("goals: --install / cp -a + sync %s; re-install / cp -a + sync %s\n", goal(rows[1], 1.25), goal(rows[2], 0.25))
	fmt.Printf("payload: %d files, %d MB (%d libraries of %d MB, %d Python files); %d runs each, interleaved\n",
		files, size>>20, benchLibs, benchLibBytes>>20, benchPyFiles, installRuns)
}
