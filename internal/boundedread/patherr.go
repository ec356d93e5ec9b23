// What a file operation failed with, once the message around it already
// names the file: an *fs.PathError prints its operation and path, so
// wrapping it in a message that names the path again reads
// "write /x: write /x: no space left on device".

package boundedread

import (
	"errors"
	"io/fs"
)

// BareErr is err without its *fs.PathError wrapper: the errno or error it
// carries, which errors.Is still matches (fs.ErrNotExist, syscall.ENOSPC).
// Anything else is returned as it is.
func BareErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ErrFor is BareErr only when the *fs.PathError names path, the file the
// message around it already names; an error about another file (the
// source an io.Copy read from) keeps its path.
func ErrFor(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == path {
		return pe.Err
	}
	return err
}
