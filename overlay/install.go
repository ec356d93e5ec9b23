package overlay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/digest"
	"golang.org/x/sys/unix"
)

// Marker files in an install destination. While the first exists an
// install is under way or was interrupted; the second holds the index of
// the payload installed there, so a re-run knows what it owns.
const (
	installingName = ".infera-installing"
	installedName  = ".infera-installed.json"
	stagePrefix    = ".infera-stage-"
)

// DestError is an install destination that cannot take the payload (a
// file, a read-only mount, no permission), as opposed to a payload that
// is not what its index says.
type DestError struct{ Err error }

func (e *DestError) Error() string { return e.Err.Error() }
func (e *DestError) Unwrap() error { return e.Err }

// InstallResult is what --install did.
type InstallResult struct {
	Source    string   `json:"source"`
	Dest      string   `json:"dest"`
	Entries   int      `json:"entries"`
	Copied    []string `json:"copied,omitempty"`
	Unchanged int      `json:"unchanged"`
	Removed   []string `json:"removed,omitempty"` // left by an earlier payload
}

// Install copies the payload at src into dest (an emptyDir in a pod), so
// the overlay image needs no shell: every file is checked against src's
// index while it is copied, modes and symlinks are kept, entries that
// could land outside dest are refused, files already identical in dest are
// left alone (a re-run is a no-op), and new content is written into a
// staging directory inside dest and renamed into place only when all of it
// has been copied and checked. dest stays marked as incomplete until the
// last rename, so a worker never starts from half a payload.
func Install(src, dest string) (*InstallResult, error) {
	ix, raw, err := ReadIndex(src)
	if err != nil {
		return nil, err
	}
	r := &InstallResult{Source: src, Dest: dest, Entries: len(ix.Entries)}
	fi, err := os.Stat(dest)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dest, 0o755); err != nil {
			return nil, &DestError{fmt.Errorf("install destination %s: %w", dest, boundedread.BareErr(err))}
		}
	case err != nil:
		return nil, &DestError{fmt.Errorf("install destination %s: %w", dest, boundedread.BareErr(err))}
	case !fi.IsDir():
		return nil, &DestError{fmt.Errorf("install destination %s is not a directory (%s)", dest, kind(fi))}
	}
	if same, _ := samePath(src, dest); same {
		return nil, fmt.Errorf("install destination %s is the payload itself", dest)
	}
	if err := os.WriteFile(filepath.Join(dest, installingName), []byte("an infera-exec --install is under way or was interrupted\n"), 0o644); err != nil {
		return nil, &DestError{fmt.Errorf("install destination %s is not writable: %w", dest, boundedread.BareErr(err))}
	}
	removeStages(dest)
	// Temporary files of the index writes of an install that was killed.
	atomicfile.RemoveStale(filepath.Join(dest, installedName))
	atomicfile.RemoveStale(filepath.Join(dest, IndexName))
	stage, err := os.MkdirTemp(dest, stagePrefix)
	if err != nil {
		return nil, &DestError{fmt.Errorf("install destination %s: %w", dest, boundedread.BareErr(err))}
	}
	defer os.RemoveAll(stage)

	// Copy and check everything that differs into the stage.
	type staged struct{ e Entry }
	var todo []staged
	for _, e := range ix.Entries {
		if e.Type == "dir" {
			continue
		}
		if identical(filepath.Join(dest, filepath.FromSlash(e.Path)), e) {
			r.Unchanged++
			continue
		}
		sp := filepath.Join(stage, filepath.FromSlash(e.Path))
		if err := os.MkdirAll(filepath.Dir(sp), 0o755); err != nil {
			return nil, destErr(err)
		}
		switch e.Type {
		case "file":
			if err := copyChecked(filepath.Join(src, filepath.FromSlash(e.Path)), sp, e); err != nil {
				return nil, err
			}
		case "symlink":
			if t, err := os.Readlink(filepath.Join(src, filepath.FromSlash(e.Path))); err != nil || t != e.Target {
				return nil, fmt.Errorf("payload %s: symlink %s %s (index says -> %s)", src, e.Path, describeLink(t, err), e.Target)
			}
			if err := os.Symlink(e.Target, sp); err != nil {
				return nil, destErr(err)
			}
		}
		todo = append(todo, staged{e})
	}
	if err := atomicfile.SyncDir(stage); err != nil {
		return nil, destErr(err)
	}

	// What an earlier install put there that this payload no longer has
	// goes first, without following links, while every directory of the
	// old payload is still a directory: once the new links are in place a
	// stale path could lead through one of them into the new payload (or
	// out of dest).
	if r.Removed, err = removeStale(dest, ix); err != nil {
		return nil, err
	}
	// From here on, what DEST may hold of ours is the new payload: record
	// it before placing anything, so that an install killed half-way and
	// followed by one of another payload still knows what to remove.
	if err := atomicfile.WriteBytes(filepath.Join(dest, installedName), raw, atomicfile.Options{Mode: 0o644}); err != nil {
		return nil, destErr(err)
	}

	// Directories in place (idempotent), then the staged entries renamed
	// over whatever was there.
	for _, e := range ix.Entries {
		if e.Type != "dir" {
			continue
		}
		p := filepath.Join(dest, filepath.FromSlash(e.Path))
		if fi, err := os.Lstat(p); err == nil && !fi.IsDir() {
			if err := os.Remove(p); err != nil {
				return nil, destErr(err)
			}
		}
		if err := os.MkdirAll(p, e.Perm()|0o700); err != nil {
			return nil, destErr(fmt.Errorf("install %s: %w", p, boundedread.BareErr(err)))
		}
	}
	for _, s := range todo {
		p := filepath.Join(dest, filepath.FromSlash(s.e.Path))
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			if err := os.RemoveAll(p); err != nil {
				return nil, destErr(err)
			}
		}
		if err := os.Rename(filepath.Join(stage, filepath.FromSlash(s.e.Path)), p); err != nil {
			return nil, destErr(fmt.Errorf("install %s: %w", p, boundedread.BareErr(err)))
		}
		r.Copied = append(r.Copied, s.e.Path)
	}
	// Directory modes last, so a read-only directory was writable while
	// it was filled.
	for _, e := range ix.Entries {
		if e.Type == "dir" {
			os.Chmod(filepath.Join(dest, filepath.FromSlash(e.Path)), e.Perm())
		}
	}
	if err := atomicfile.WriteBytes(filepath.Join(dest, IndexName), raw, atomicfile.Options{Mode: 0o644}); err != nil {
		return nil, destErr(err)
	}
	// The (now empty) stage goes before the marker, so that a finished
	// install holds exactly the payload.
	if err := os.RemoveAll(stage); err != nil {
		return nil, destErr(err)
	}
	if err := os.Remove(filepath.Join(dest, installingName)); err != nil {
		return nil, destErr(err)
	}
	return r, destErr(atomicfile.SyncDir(dest))
}

// copyChecked copies src to dst with the entry's mode, hashing as it goes;
// a file that differs from the index in size or content is refused.
func copyChecked(src, dst string, e Entry) error {
	// Opened without blocking and checked on the descriptor: a FIFO put
	// in the payload would otherwise hold the install.
	in, err := boundedread.Open(src, 0)
	if err != nil {
		if errors.Is(err, boundedread.ErrNotRegular) {
			return fmt.Errorf("payload file %s: not a regular file %w", src, errMismatch)
		}
		return fmt.Errorf("payload file %s: %w", src, boundedread.Reason(err))
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return destErr(err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), in)
	if err == nil {
		err = out.Chmod(e.Perm())
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return destErr(fmt.Errorf("copy %s: %w", src, err))
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != e.Size || got != e.SHA256 {
		return fmt.Errorf("payload file %s %w: %d bytes with SHA-256 %s, the index says %d bytes with %s (tampered or truncated; rebuild the payload)", src, errMismatch, n, got, e.Size, e.SHA256)
	}
	return nil
}

// identical reports whether dest already holds exactly entry e.
func identical(p string, e Entry) bool {
	fi, err := os.Lstat(p)
	if err != nil {
		return false
	}
	switch e.Type {
	case "symlink":
		t, err := os.Readlink(p)
		return err == nil && t == e.Target
	case "file":
		if !fi.Mode().IsRegular() || fi.Size() != e.Size || fi.Mode().Perm() != e.Perm() {
			return false
		}
		sum, err := digest.File(p)
		return err == nil && sum == e.SHA256
	}
	return false
}

// removeStale deletes what an earlier install put in dest that the new
// payload no longer has; entries dest had before any install are left.
// Nothing is followed: each entry is removed with unlinkat relative to its
// parent directory, reached from dest one O_NOFOLLOW directory at a time,
// so an entry whose parent is now a link (into the new payload, or out of
// dest) is not touched.
func removeStale(dest string, ix *Index) ([]string, error) {
	data, err := boundedread.FileNoFollow(filepath.Join(dest, installedName), boundedread.Index)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("install destination %w", err)
	}
	var old Index
	if json.Unmarshal(data, &old) != nil {
		return nil, nil
	}
	keep := map[string]bool{}
	for _, e := range ix.Entries {
		keep[e.Path] = true
	}
	var removed []string
	for i := len(old.Entries) - 1; i >= 0; i-- { // children before parents
		e := old.Entries[i]
		if keep[e.Path] || e.check() != nil {
			continue
		}
		err := unlinkBeneath(dest, e.Path, e.Type == "dir")
		switch {
		case err == nil:
			removed = append(removed, e.Path)
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EROFS):
			return removed, destErr(err)
		}
	}
	return removed, nil
}

// unlinkBeneath removes dest/rel without following any link on the way:
// every directory from dest down is opened O_DIRECTORY|O_NOFOLLOW
// relative to the one before, and the last name is unlinked in it.
func unlinkBeneath(dest, rel string, dir bool) error {
	fd, err := unix.Open(dest, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		next, err := unix.Openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return err
		}
		fd = next
	}
	defer unix.Close(fd)
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	return unix.Unlinkat(fd, parts[len(parts)-1], flags)
}

// destErr marks an error of writing into the destination (a full disk, a
// read-only mount, no permission) so that it exits 73, not as a payload
// error.
func destErr(err error) error {
	if err == nil {
		return nil
	}
	var de *DestError
	if errors.As(err, &de) {
		return err
	}
	for _, errno := range []error{unix.ENOSPC, unix.EDQUOT, unix.EROFS, unix.EACCES, unix.EPERM} {
		if errors.Is(err, errno) {
			return &DestError{err}
		}
	}
	return err
}

func removeStages(dest string) {
	entries, _ := os.ReadDir(dest)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), stagePrefix) {
			os.RemoveAll(filepath.Join(dest, e.Name()))
		}
	}
}

// Interrupted reports whether dir is an install destination whose install
// did not finish.
func Interrupted(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, installingName))
	return err == nil
}

func samePath(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

func describeLink(t string, err error) string {
	if err != nil {
		return "cannot be read: " + boundedread.BareErr(err).Error()
	}
	return "-> " + t
}

// InstallAnswering is Install after asking, through answers, whether the
// filesystems of src and dest answer in time: the copy would otherwise
// block on a dead mount. A destination that does not answer is a
// *DestError, as any destination that cannot be written.
func InstallAnswering(src, dest string, answers func(paths ...string) error) (*InstallResult, error) {
	if err := answers(src); err != nil {
		return nil, fmt.Errorf("payload %w", err)
	}
	if err := answers(dest); err != nil {
		return nil, &DestError{fmt.Errorf("destination %w", err)}
	}
	return Install(src, dest)
}
