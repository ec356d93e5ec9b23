// Package lookpath answers which file a command name runs, the way
// execvp(3) and a POSIX shell resolve it: "not found" (exit 127) is told
// from "found but not executable" (exit 126).
package lookpath

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/infera/infera-exec/internal/boundedread"
	"golang.org/x/sys/unix"
)

// Exit codes a shell uses for a command it cannot run; infera-exec exits
// with them when the worker cannot be started.
const (
	CodeNotExecutable = 126
	CodeNotFound      = 127
)

// Error is a command that cannot be run, with the shell's exit code.
type Error struct {
	Name   string
	Code   int
	Reason string
	path   string // the PATH searched, when the name was not found there
	brief  string // the reason for a text line, when shorter (HintRelative)
}

// ExitCode is the shell's code for the command: 126 or 127.
func (e *Error) ExitCode() int { return e.Code }

func (e *Error) Error() string {
	if strings.HasPrefix(e.Reason, e.Name) {
		return e.Reason // the reason already names the path
	}
	return e.Name + ": " + e.Reason
}

// Brief is Error for a text log line (logging.Briefer): a name not
// found says how many PATH directories were searched, not each one.
func (e *Error) Brief() string {
	if e.brief != "" {
		return e.brief
	}
	if e.path == "" {
		return ""
	}
	return fmt.Sprintf("%s: not found in the %d directories of PATH", e.Name, len(strings.Split(e.path, ":")))
}

// DefaultPath is used when PATH is unset, as glibc's execvp does.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Command resolves name. A name with a slash is used as it is; otherwise
// each element of pathList is tried in order. Relative paths are taken
// relative to cwd, the directory the command will run in.
func Command(name, pathList, cwd string) (string, error) {
	if name == "" {
		return "", &Error{Name: `""`, Code: CodeNotFound, Reason: "empty command name"}
	}
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if err := executable(p); err != nil {
			return "", &Error{Name: name, Code: codeOf(err), Reason: err.Error()}
		}
		return p, nil
	}
	var denied error
	for _, dir := range strings.Split(pathList, ":") {
		if dir == "" {
			dir = "." // POSIX: an empty element is the current directory
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, name)
		err := executable(p)
		if err == nil {
			return p, nil
		}
		// A PATH element that is not a directory holds no commands:
		// execvp(3) and shells go on (ENOTDIR), as for a missing one.
		if denied == nil && codeOf(err) == CodeNotExecutable && !errors.Is(err, unix.ENOTDIR) {
			denied = err
		}
	}
	if denied != nil {
		return "", &Error{Name: name, Code: CodeNotExecutable, Reason: denied.Error()}
	}
	return "", &Error{Name: name, Code: CodeNotFound, Reason: "not found in PATH=" + pathList, path: pathList}
}

var errNotExist = errors.New("no such file")

// executable checks p the way execve(2) will: it must exist, be a regular
// file, and be executable by this process (access(2) with X_OK honours the
// real uid, ACLs and noexec mounts).
func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", p, errNotExist)
		}
		return fmt.Errorf("%s: %w", p, boundedread.BareErr(err))
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", p)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", p, fi.Mode().Type())
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return fmt.Errorf("%s is not executable (mode %s): %w", p, fi.Mode().Perm(), err)
	}
	return nil
}

func codeOf(err error) int {
	if errors.Is(err, errNotExist) {
		return CodeNotFound
	}
	return CodeNotExecutable
}

// HintRelative adds to a "not found" for a relative command with a slash
// (./run-worker.sh) what the operator most likely needs: it was looked up
// in the worker's working directory cwd (INFERA_EXEC_CHDIR, / by default),
// not in startDir, the directory infera-exec was started in, where it
// exists. Other errors are returned as they are.
func HintRelative(err error, name, cwd, startDir string) error {
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotFound || !strings.Contains(name, "/") || filepath.IsAbs(name) || cwd == startDir {
		return err
	}
	there := filepath.Join(startDir, name)
	if _, serr := os.Stat(there); serr != nil {
		return err
	}
	hint := *e
	hint.Reason = fmt.Sprintf("%s (looked up in the worker's working directory %s, INFERA_EXEC_CHDIR; it exists in %s, where infera-exec was started: give its absolute path %s, or set INFERA_EXEC_CHDIR=%s)",
		e.Reason, cwd, startDir, there, startDir)
	short := hint
	short.Reason = fmt.Sprintf("%s (looked up in %s, the worker's working directory; it is in %s: give its absolute path or set INFERA_EXEC_CHDIR=%s)", e.Reason, cwd, startDir, startDir)
	hint.brief = short.Error()
	return &hint
}

// AbsDirs are the absolute directories of a PATH-like list, each once;
// relative and empty entries (the working directory) are left out.
func AbsDirs(pathList string) []string {
	var out []string
	for _, d := range strings.Split(pathList, ":") {
		if filepath.IsAbs(d) && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// Runnable checks that the kernel will execute path: an ELF file or a
// script with a #! line. Anything else fails execve with ENOEXEC, which
// a shell reports as 126; saying so before the start writes anything
// keeps a wrong command from changing the container. A kernel with
// binfmt_misc handlers may run other formats too: then nothing is
// refused here and execve decides.
func Runnable(path string) error {
	f, err := boundedread.Open(path, unix.O_RDONLY)
	if err != nil {
		// The lookup found it: a file that cannot be opened for reading
		// may still be executable (mode 0111); execve decides.
		return nil
	}
	defer f.Close()
	var head [4]byte
	n, _ := io.ReadFull(f, head[:])
	switch {
	case n == 4 && string(head[:]) == "\x7fELF", n >= 2 && string(head[:2]) == "#!":
		return nil
	case binfmtHandlers():
		return nil
	}
	return &Error{Name: path, Code: CodeNotExecutable, Reason: path + " is neither an ELF binary nor a script with a #! line, so the kernel will not run it (ENOEXEC); add a #! line such as #!/bin/sh, or run it through its interpreter"}
}

// binfmtHandlers reports whether the kernel has binfmt_misc formats
// registered (entries besides register and status).
func binfmtHandlers() bool {
	entries, err := os.ReadDir("/proc/sys/fs/binfmt_misc")
	if err != nil {
		return false
	}
	for _, e := range entries {
		if n := e.Name(); n != "register" && n != "status" {
			return true
		}
	}
	return false
}
