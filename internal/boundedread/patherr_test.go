package boundedread

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBareErr(t *testing.T) {
	_, err := os.Open(filepath.Join(t.TempDir(), "missing"))
	bare := BareErr(err)
	assert.Equal(t, "no such file or directory", bare.Error())
	assert.ErrorIs(t, bare, fs.ErrNotExist)
	assert.ErrorIs(t, bare, syscall.ENOENT)

	// Wrapped: the PathError inside is found and unwrapped.
	assert.Equal(t, "no such file or directory", BareErr(fmt.Errorf("open it: %w", err)).Error())

	// Not a path error: unchanged.
	other := errors.New("something else")
	assert.Same(t, other, BareErr(other))
	assert.Nil(t, BareErr(nil))
}

func TestErrFor(t *testing.T) {
	err := &fs.PathError{Op: "write", Path: "/d/.f.tmp-1", Err: syscall.ENOSPC}
	assert.Equal(t, "no space left on device", ErrFor("/d/.f.tmp-1", err).Error())
	assert.ErrorIs(t, ErrFor("/d/.f.tmp-1", err), syscall.ENOSPC)
	// Another file's error keeps its path.
	src := &fs.PathError{Op: "read", Path: "/src/f", Err: syscall.EIO}
	assert.Equal(t, "read /src/f: input/output error", ErrFor("/d/.f.tmp-1", src).Error())
}
