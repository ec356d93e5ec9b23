// Package outdir decides whether a build tool may replace the directory
// it was told to write (`infera-payload index -out`, `-demo`, `harvest
// -out`, `image -oci`). Replacing means removing everything in it, so a
// directory is replaced only when nothing but an earlier output can be
// lost: it does not hold an input of the run or the working directory,
// it is not inside an input, and it is new, empty, or holds the Marker
// an earlier run wrote (or the operator said -force).
package outdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/infera/infera-exec/overlay"
)

// Marker is the file a tool writes into every directory it produced; its
// presence is what lets a later run replace the directory without
// -force. A payload's index never lists it (overlay.OutMarker).
const Marker = overlay.OutMarker

// Path is a path given on the command line, with the flag that gave it.
type Path struct {
	Flag   string // "-tree", "-bin", ...
	Path   string
	Output bool // another output of the same run, not something it reads
}

// Error is an output directory the tool refuses to replace. It is a
// mistake on the command line: infera-payload exits 64 with it.
type Error struct {
	Out Path
	Why string // what replacing it would do
	Fix string // what to give instead
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: %s; %s", e.Out.Flag, e.Out.Path, e.Why, e.Fix)
}

// Check refuses out when replacing it could remove something that is not
// an earlier output: out holds (or is) one of inputs or the working
// directory, out is inside one of inputs, or out exists and is not a
// directory an earlier run wrote (a non-empty directory without Marker,
// a file, a link) unless force. Other outputs of the same run count as
// inputs. Nothing is changed.
func Check(out Path, inputs []Path, force bool) error {
	if out.Path == "" {
		return &Error{out, "no directory given", "name the directory to write"}
	}
	o, err := resolve(out.Path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", out.Flag, out.Path, err)
	}
	if o == "/" {
		return &Error{out, "is the root directory", "name a directory of its own, e.g. build/payload"}
	}
	if wd, err := os.Getwd(); err == nil {
		if w, err := resolve(wd); err == nil && within(w, o) {
			return &Error{out, fmt.Sprintf("holds the working directory %s, which replacing it would delete", wd), "name a directory of its own, e.g. build/payload"}
		}
	}
	for _, in := range inputs {
		if in.Path == "" {
			continue
		}
		i, err := resolve(in.Path)
		if err != nil {
			return fmt.Errorf("%s %s: %w", in.Flag, in.Path, err)
		}
		switch {
		case i == o:
			return &Error{out, fmt.Sprintf("is %s %s itself, which replacing it would delete", in.Flag, in.Path), "name a directory outside every input"}
		case within(i, o):
			return &Error{out, fmt.Sprintf("holds %s %s, which replacing it would delete", in.Flag, in.Path), fmt.Sprintf("name a directory outside every input, e.g. a sibling of %s", in.Path)}
		case within(o, i) && in.Output:
			return &Error{out, fmt.Sprintf("is inside %s %s, which the run also replaces", in.Flag, in.Path), "name outputs apart from each other"}
		case within(o, i):
			return &Error{out, fmt.Sprintf("is inside %s %s, which the run reads", in.Flag, in.Path), "name a directory outside every input"}
		}
	}
	fi, err := os.Lstat(out.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%s %s: %w", out.Flag, out.Path, err)
	case force:
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		return &Error{out, "is a symbolic link, not a directory this tool wrote", "name the directory itself, or add -force to replace the link"}
	case !fi.IsDir():
		return &Error{out, "is a file, not a directory this tool wrote", "name a new or empty directory, or add -force to replace the file"}
	}
	names, err := readNames(out.Path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", out.Flag, out.Path, err)
	}
	if len(names) == 0 {
		return nil
	}
	for _, n := range names {
		if n == Marker {
			return nil
		}
	}
	return &Error{out, fmt.Sprintf("is a non-empty directory that infera-payload did not write (no %s in it), and replacing it would delete everything in it", Marker),
		"name a new or empty directory (e.g. build/payload), remove it yourself, or add -force to replace it"}
}

// Replace checks out (Check), then removes it and makes it anew, empty
// but for Marker.
func Replace(out Path, inputs []Path, force bool) error {
	if err := Check(out, inputs, force); err != nil {
		return err
	}
	if err := os.RemoveAll(out.Path); err != nil {
		return err
	}
	if err := os.MkdirAll(out.Path, 0o755); err != nil {
		return err
	}
	return Mark(out.Path)
}

// Mark writes Marker into dir, a directory the tool has just produced.
func Mark(dir string) error {
	return os.WriteFile(filepath.Join(dir, Marker), []byte("written by infera-payload; a later run replaces this directory\n"), 0o644)
}

// CheckFile refuses a file output (image -archive) inside an input or
// holding nothing else: replacing it must not change what the run reads.
func CheckFile(out Path, inputs []Path) error {
	if out.Path == "" {
		return nil
	}
	o, err := resolve(out.Path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", out.Flag, out.Path, err)
	}
	for _, in := range inputs {
		if in.Path == "" {
			continue
		}
		i, err := resolve(in.Path)
		if err != nil {
			return fmt.Errorf("%s %s: %w", in.Flag, in.Path, err)
		}
		if within(o, i) {
			return &Error{out, fmt.Sprintf("is inside %s %s, which the run reads", in.Flag, in.Path), "name a file outside every input"}
		}
	}
	return nil
}

// resolve is p made absolute with every link of its existing part
// resolved: two spellings of one directory compare equal.
func resolve(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	for cur := abs; ; cur = filepath.Dir(cur) {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			for i := len(rest) - 1; i >= 0; i-- {
				real = filepath.Join(real, rest[i])
			}
			return real, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || cur == "/" {
			return "", err
		}
		rest = append(rest, filepath.Base(cur))
	}
}

// within reports whether p is dir or below it (both resolved).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+string(filepath.Separator))
}

func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
