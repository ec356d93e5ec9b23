// Command demo assembles the demo: a payload in the v0.2.2 layout (the
// infera-exec binary in bin/, pure-Python trees py39..py314 holding a tiny
// worker, native trees for ROCm 7 with CAPABILITIES and a real ELF library)
// a fake /opt/rocm whose libamdhip64 is a real ELF with SONAME
// libamdhip64.so.7, and a vLLM install with pending fixes. `make demo` then
// runs it in a sandbox.
package main

import (
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/infera/infera-exec/internal/fixture"
)

func main() {
	out := flag.String("out", "build/demo", "output directory (replaced)")
	bin := flag.String("bin", "bin/infera-exec", "infera-exec binary to put in the payload")
	src := flag.String("src", "testdata/demo/python", "pure-Python tree content")
	engine := flag.String("engine", "patches/testdata/trees/vllm-pending/site-packages", "a vLLM install whose fixes are pending")
	flag.Parse()
	if err := build(*out, *bin, *src, *engine); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

// Native trees as a vLLM (py312) and an SGLang (py310) payload would ship
// them; hipfile is vLLM-only.
var native = map[string]string{
	"rocm7-py310": "mooncake\n",
	"rocm7-py311": "mooncake\n",
	"rocm7-py312": "mooncake hipfile\n",
}

func build(out, bin, src, engine string) error {
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := fixture.ROCm(filepath.Join(out, "rocm"), 7, "7.1.70100"); err != nil {
		return err
	}
	payload := filepath.Join(out, "payload")
	if err := copyFile(bin, filepath.Join(payload, "bin", "infera-exec"), 0o755); err != nil {
		return err
	}
	for minor := 9; minor <= 14; minor++ {
		if err := copyTree(src, filepath.Join(payload, fmt.Sprintf("py3%d", minor))); err != nil {
			return err
		}
	}
	for name, caps := range native {
		dir := filepath.Join(payload, "native", name)
		if err := fixture.SharedObject(filepath.Join(dir, "lib", "libinfera_demo.so.1"), "libinfera_demo.so.1"); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "CAPABILITIES"), []byte(caps), 0o644); err != nil {
			return err
		}
	}
	// The "image's" engine: a vLLM install shaped like the real one, with
	// the anchors of the project's fixes, for infera-exec to patch.
	if err := copyTree(engine, filepath.Join(out, "engine")); err != nil {
		return err
	}
	fmt.Printf("demo payload in %s, fake ROCm 7 in %s, engine in %s\n", payload, filepath.Join(out, "rocm"), filepath.Join(out, "engine"))
	return nil
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if d.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		return copyFile(p, filepath.Join(dst, rel), 0o644)
	})
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
