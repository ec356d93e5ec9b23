package commit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The causes a deployment can fix get the fix; a file's own trouble does not.
func TestWriteFix(t *testing.T) {
	wrap := func(errno syscall.Errno) error {
		return fmt.Errorf("replace /e/f.py: create temporary file: %w", &fs.PathError{Op: "open", Path: "/e/.f.py.tmp-1", Err: errno})
	}
	assert.Contains(t, Fix(wrap(syscall.EROFS)), "read-only filesystem: apply the fix when the image is built")
	assert.Contains(t, Fix(wrap(syscall.EACCES)), fmt.Sprintf("uid %d may not write", os.Geteuid()))
	assert.Contains(t, Fix(wrap(syscall.EPERM)), "run the start as the engine's owner")
	assert.Contains(t, Fix(wrap(syscall.ENOSPC)), "is full")
	assert.Contains(t, Fix(wrap(syscall.EDQUOT)), "is full")
	assert.Empty(t, Fix(wrap(syscall.EIO)))
	assert.Empty(t, Fix(errors.New("changed while it was being patched")))
}
