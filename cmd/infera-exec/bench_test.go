package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/infera/infera-exec/internal/fixture"
)

// benchPayload lays out a vLLM-style container: ROCm 7, an interpreter
// whose name decides its version, a payload with several trees.
func benchPayload(b *testing.B) []string {
	b.Helper()
	dir := b.TempDir()
	if err := fixture.ROCm(filepath.Join(dir, "rocm"), 7, "7.1.70100"); err != nil {
		b.Fatal(err)
	}
	for _, d := range []string{"payload/bin", "payload/py310", "payload/py312", "payload/native/rocm7-py310", "payload/native/rocm7-py312/lib", "payload/native/rocm7-py312/bin", "py"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "payload/native/rocm7-py312/CAPABILITIES"), []byte("mooncake hipfile\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "py/python3.12"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	return append(os.Environ(),
		"PAYLOAD_ROOT="+filepath.Join(dir, "payload"),
		"ROCM_PATH="+filepath.Join(dir, "rocm"),
		"INFERA_PYTHON="+filepath.Join(dir, "py/python3.12"),
		"INFERA_REQUIRE_NATIVE=mooncake",
		"INFERA_EXEC_REPORT=off",
	)
}

// BenchmarkPlan is the whole pass short of exec, in process: what every
// pod start pays before its worker runs (no Python is started: the
// interpreter's name decides).
func BenchmarkPlan(b *testing.B) {
	env := benchPayload(b)
	o := options{explain: true, json: true, command: []string{"true"}}
	b.ReportAllocs()
	for b.Loop() {
		if code := newPass(o, env, io.Discard, io.Discard).run(); code != 0 {
			b.Fatalf("exit %d", code)
		}
	}
}

// BenchmarkStartToExec runs the real static binary as a process that
// execs /bin/true, against /bin/true alone: the difference is what the
// shim adds to a container start.
func BenchmarkStartToExec(b *testing.B) {
	env := benchPayload(b)
	bin := shim(b)
	b.Run("true", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("infera-exec+true", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(bin, "/bin/true")
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
}
