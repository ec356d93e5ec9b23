package commit

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Fix is what an operator can do about an engine file that could not
// be written, for the causes that are the deployment's rather than the
// file's: "" for anything else.
func Fix(err error) string {
	switch {
	case errors.Is(err, syscall.EROFS):
		return "the engine is on a read-only filesystem: apply the fix when the image is built (infera-exec --check ROOT lists what is pending) or mount the package directory writable"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Sprintf("uid %d may not write the engine's package directory: run the start as the engine's owner (the image's, usually root) or apply the fix when the image is built", os.Geteuid())
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "the filesystem holding the engine is full: the patch needs room for one more copy of the file while it is replaced"
	}
	return ""
}
