package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/infera/infera-exec/environ"
	"github.com/infera/infera-exec/overlay"
)

// runInstall copies the payload this binary belongs to into dest: what the
// overlay image's init container runs, so the image needs no shell.
func runInstall(dest string, env []string, stdout, stderr io.Writer) int {
	src := environ.New(env).Value("PAYLOAD_ROOT")
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "infera-exec: error: cannot find this binary to locate its payload: %v\n", err)
			return exitSoftware
		}
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		src = filepath.Dir(filepath.Dir(exe))
	}
	if abs, err := filepath.Abs(dest); err == nil {
		dest = abs
	}
	if err := answer(environ.New(env), stderr, src); err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitConfig
	}
	if err := answer(environ.New(env), io.Discard, dest); err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitCantCreate
	}
	r, err := overlay.Install(src, dest)
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		var de *overlay.DestError
		if errors.As(err, &de) {
			return exitCantCreate
		}
		return exitConfig
	}
	fmt.Fprintf(stderr, "infera-exec: installed the payload %s into %s: %d entries, %d copied, %d already identical, %d removed\n",
		r.Source, r.Dest, r.Entries, len(r.Copied), r.Unchanged, len(r.Removed))
	return exitOK
}
