// Package linkchain follows a symlink chain one hop at a time, so callers
// can both resolve a library or interpreter and say how they got there.
package linkchain

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxHops matches the kernel's limit for nested symlinks (ELOOP).
const maxHops = 40

// Error says why a chain could not be followed; Chain holds the hops seen.
type Error struct {
	Chain []string
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }

// Reason is the error without the path it starts with (the chain's
// first), for a caller that has named that path already.
func (e *Error) Reason() string {
	if len(e.Chain) > 0 {
		return strings.TrimPrefix(e.Error(), e.Chain[0]+": ")
	}
	return e.Error()
}
func (e *Error) Unwrap() error { return e.Err }

// ErrLoop is wrapped by Follow when the chain does not end.
var ErrLoop = errors.New("symlink loop")

// ErrDangling is wrapped by Follow when a link points at nothing.
var ErrDangling = errors.New("dangling symlink")

// Follow returns every path from path to the file it finally names, path
// first. Each hop is read with readlink(2); a relative target is resolved
// against the real directory of the link, as the kernel does.
func Follow(path string) ([]string, error) { return FollowIn("/", path) }

// FollowIn is Follow for a tree that is a container's root filesystem seen
// from outside it: absolute link targets are taken inside root.
func FollowIn(root, path string) ([]string, error) {
	chain := []string{path}
	cur := path
	// The directory last resolved and what it resolved to: the hops of a
	// library's chain (libx.so -> libx.so.7 -> libx.so.7.1) stay in one
	// directory, which is resolved once, not once per hop.
	var lastDir, lastReal string
	for hop := 0; ; hop++ {
		fi, err := os.Lstat(cur)
		if err != nil {
			if hop > 0 && errors.Is(err, fs.ErrNotExist) {
				return chain, &Error{chain, fmt.Errorf("%s: %w: %s does not exist", path, ErrDangling, cur)}
			}
			return chain, &Error{chain, err}
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return chain, nil
		}
		if hop == maxHops {
			return chain, &Error{chain, fmt.Errorf("%s: %w (more than %d links)", path, ErrLoop, maxHops)}
		}
		target, err := os.Readlink(cur)
		if err != nil {
			return chain, &Error{chain, err}
		}
		if filepath.IsAbs(target) {
			target = filepath.Join(root, target)
		} else {
			dir := filepath.Dir(cur)
			if dir != lastDir && dir != lastReal {
				real, err := filepath.EvalSymlinks(dir)
				if err != nil {
					return chain, &Error{chain, fmt.Errorf("%s: resolve directory of %s: %w", path, cur, err)}
				}
				lastDir, lastReal = dir, real
			}
			target = filepath.Join(lastReal, target)
		}
		for _, seen := range chain {
			if seen == target {
				return append(chain, target), &Error{append(chain, target), fmt.Errorf("%s: %w via %s", path, ErrLoop, target)}
			}
		}
		chain = append(chain, target)
		cur = target
	}
}
