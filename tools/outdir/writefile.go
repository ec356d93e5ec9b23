package outdir

import (
	"io"
	"os"
	"path/filepath"
)

// WriteFile replaces file with what write produces, mode 0644: written
// to a temporary file beside it (".NAME.tmp-*") and renamed over it only
// when write, the chmod and the close all succeed, so a reader of file
// sees the old output or the whole new one; the temporary file is
// removed on every failure. file's directory must exist.
func WriteFile(file string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	err = write(f)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}
