package elfload_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infera/infera-exec/internal/elfload"
)

// elfFuzzSeeds are the real libmana and corruptions of it.
func elfFuzzSeeds(t testing.TB) [][]byte {
	elfFixture(t, elfLibmana, elfPkgProviders)
	mana, err := os.ReadFile(elfLibmana)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(b []byte)) []byte {
		b := bytes.Clone(mana)
		f(b)
		return b
	}
	replace := func(old, new string) []byte {
		return edit(func(b []byte) { copy(b[bytes.Index(b, []byte(old)):], new) })
	}
	return [][]byte{
		mana,
		mana[:200],
		mana[:4000],
		mana[:len(mana)/2],
		nil,
		[]byte("#!/bin/sh\n"),
		replace("IBVERBS_PRIVATE_34", "IBVERBS_PRIVATE_59"),
		replace("GLIBC_2.4\x00", "GLIBC_9.9\x00"),
		replace("libibverbs.so.1", "libibverbz.so.1"),
		edit(func(b []byte) { binary.LittleEndian.PutUint32(b[0x968+12:], 0xfffffff0) }),       // vn_next far away
		edit(func(b []byte) { binary.LittleEndian.PutUint16(b[0x968+2:], 0xffff) }),            // vn_cnt huge
		edit(func(b []byte) { binary.LittleEndian.PutUint64(b[0x4ca0+10*16+8:], 1<<62) }),      // DT_STRTAB wild
		edit(func(b []byte) { binary.LittleEndian.PutUint64(b[0x4ca0+19*16+8:], 0xffffffff) }), // DT_RELASZ huge
		edit(func(b []byte) { b[4] = 1 }),                                                      // claims ELFCLASS32
		edit(func(b []byte) { b[5] = 2 }),                                                      // claims big-endian
	}
}

func FuzzReadVerify(f *testing.F) {
	for _, s := range elfFuzzSeeds(f) {
		f.Add(s)
	}
	ref, err := elfload.Read(elfLibibverbs)
	if err != nil {
		f.Fatal(err)
	}
	// One file per fuzz worker process, rewritten for each input (inputs
	// run one at a time in a worker): a directory per input costs more
	// than the code under test.
	p := filepath.Join(f.TempDir(), "elfload.so")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		o, err := elfload.Read(p)
		if err != nil {
			if o != nil {
				t.Fatalf("Read returned an object and an error: %v", err)
			}
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error does not name the path %s: %v", p, err)
			}
			return
		}
		if o.Path != p || o.Size != int64(len(data)) {
			t.Fatalf("object %s of %d bytes, want %s of %d", o.Path, o.Size, p, len(data))
		}
		checks, ok := elfVerify(o, ref, "libmana.so.1", []string{elfMultiarch})
		all := true
		for _, c := range checks {
			all = all && c.OK
			if c.Name == "" || c.Detail == "" {
				t.Fatalf("check without name or detail: %+v", c)
			}
		}
		if ok != all || len(checks) < 5 {
			t.Fatalf("ok=%v but checks %v", ok, checks)
		}
		elfload.ProviderABIRange(o, "mana")
	})
}

func FuzzProviderABIRange(f *testing.F) {
	for _, s := range elfFuzzSeeds(f) {
		f.Add(s, "mana")
	}
	f.Add([]byte(nil), "")
	p := filepath.Join(f.TempDir(), "provider.so")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		// Also on files Read refuses: the Object may be made by hand.
		min, max, ok := elfload.ProviderABIRange(&elfload.Object{Path: p}, name)
		if ok && (min > max || max > 1000) {
			t.Fatalf("ok with implausible range %d..%d", min, max)
		}
		if !ok && (min != 0 || max != 0) {
			t.Fatalf("not ok but %d..%d", min, max)
		}
	})
}
