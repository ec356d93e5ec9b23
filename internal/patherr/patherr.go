// Package patherr answers "what did a file operation fail with, once the
// message around it already names the file?": an *fs.PathError prints its
// operation and path, so wrapping it in a message that names the path
// again reads "write /x: write /x: no space left on device".
package patherr

import (
	"errors"
	"io/fs"
)

// Bare is err without its *fs.PathError wrapper: the errno or error it
// carries, which errors.Is still matches (fs.ErrNotExist, syscall.ENOSPC).
// Anything else is returned as it is.
func Bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// For is Bare only when the *fs.PathError names path, the file the
// message around it already names; an error about another file (the
// source an io.Copy read from) keeps its path.
func For(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == path {
		return pe.Err
	}
	return err
}
