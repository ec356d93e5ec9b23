// Command mkpayload assembles a payload in the v0.2.2 layout and writes its
// index (payload.index.json), which `infera-exec --install` checks every
// byte against:
//
//	bin/infera-exec             the static binary
//	py3XX/, native/rocmN-py3XX/ the trees given with -tree SRC:DEST, or the
//	                            demo trees (py39..py314 holding a tiny worker;
//	                            native trees for ROCm 7 with CAPABILITIES and a
//	                            real ELF library)
//	patches/<import-name>/      extra patch definitions given with -patches
//
// With -demo it also makes what `make demo` mounts beside the payload: a
// fake /opt/rocm whose libamdhip64 is a real ELF with SONAME
// libamdhip64.so.7, and a vLLM install with pending fixes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/overlay"
)

type trees []string

func (t *trees) String() string     { return strings.Join(*t, ",") }
func (t *trees) Set(v string) error { *t = append(*t, v); return nil }

func main() {
	out := flag.String("out", "build/payload", "payload directory (replaced)")
	bin := flag.String("bin", "bin/infera-exec", "infera-exec binary to put in bin/")
	src := flag.String("src", "testdata/demo/python", "pure-Python content of the demo trees")
	patches := flag.String("patches", "", "directory of extra patch definitions (<import-name>/*.toml)")
	demo := flag.String("demo", "", "also make the demo's ROCm and engine fixtures in this directory")
	engine := flag.String("engine", "patches/testdata/trees/vllm-pending/site-packages", "with -demo: a vLLM install whose fixes are pending")
	var ts trees
	flag.Var(&ts, "tree", "SRC:DEST, a tree to copy into the payload (repeatable); default: the demo trees")
	flag.Parse()
	if err := build(*out, *bin, *src, *patches, ts); err != nil {
		fmt.Fprintf(os.Stderr, "mkpayload: %v\n", err)
		os.Exit(1)
	}
	if *demo != "" {
		if err := fixtures(*demo, *engine); err != nil {
			fmt.Fprintf(os.Stderr, "mkpayload: %v\n", err)
			os.Exit(1)
		}
	}
}

// Native trees as a vLLM (py312) and an SGLang (py310) payload would ship
// them; hipfile is vLLM-only.
var native = map[string]string{
	"rocm7-py310": "mooncake\n",
	"rocm7-py311": "mooncake\n",
	"rocm7-py312": "mooncake hipfile\n",
}

func build(out, bin, src, patches string, ts trees) error {
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := fixture.CopyFile(bin, filepath.Join(out, "bin", "infera-exec"), 0o755); err != nil {
		return err
	}
	if patches != "" {
		if err := fixture.CopyTree(patches, filepath.Join(out, "patches")); err != nil {
			return err
		}
	}
	if len(ts) > 0 {
		for _, t := range ts {
			from, to, ok := strings.Cut(t, ":")
			if !ok || to == "" || filepath.IsAbs(to) || strings.Contains(to, "..") {
				return fmt.Errorf("-tree %q: want SRC:DEST with DEST relative, e.g. build/py312:py312", t)
			}
			if err := fixture.CopyTree(from, filepath.Join(out, to)); err != nil {
				return err
			}
		}
	} else if err := demoTrees(out, src); err != nil {
		return err
	}
	ix, err := overlay.WriteIndex(out)
	if err != nil {
		return err
	}
	fmt.Printf("payload in %s: %d entries, index %s\n", out, len(ix.Entries), filepath.Join(out, overlay.IndexName))
	return nil
}

func demoTrees(out, src string) error {
	for minor := 9; minor <= 14; minor++ {
		if err := fixture.CopyTree(src, filepath.Join(out, fmt.Sprintf("py3%d", minor))); err != nil {
			return err
		}
	}
	for name, caps := range native {
		dir := filepath.Join(out, "native", name)
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
	return nil
}

// fixtures are the demo's stand-ins for the engine image: ROCm 7 and a
// vLLM install shaped like the real one, with the anchors of the
// project's fixes, for infera-exec to patch.
func fixtures(dir, engine string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := fixture.ROCm(filepath.Join(dir, "rocm"), 7, "7.1.70100"); err != nil {
		return err
	}
	if err := fixture.CopyTree(engine, filepath.Join(dir, "engine")); err != nil {
		return err
	}
	// A model directory for the model-dir check: one small shard.
	if err := os.MkdirAll(filepath.Join(dir, "models", "demo"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "models", "demo", "model-00001-of-00001.safetensors"), make([]byte, 1<<20), 0o644); err != nil {
		return err
	}
	fmt.Printf("fake ROCm 7 in %s, engine in %s\n", filepath.Join(dir, "rocm"), filepath.Join(dir, "engine"))
	return nil
}
