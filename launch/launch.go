// Package launch answers how the worker is started: the command resolved
// as execvp(3) would (126 and 127 as a shell reports them), the working
// directory, the open-file limit, and execve(2) of the worker, so that the
// worker takes over the shim's PID and the shim does not stay resident.
package launch

import (
	"fmt"
	"os"
	"syscall"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/lookpath"
	"github.com/infera/infera-exec/internal/sigstart"
)

// Nofile is the RLIMIT_NOFILE the worker gets.
type Nofile struct {
	Soft    uint64 `json:"soft"`
	Hard    uint64 `json:"hard"`
	Changed bool   `json:"changed"`
	Err     string `json:"error,omitempty"` // why the soft limit stayed below the hard one
}

// RaiseNofile sets the soft open-file limit to the hard limit. It calls
// syscall.Setrlimit itself even when Go already raised the limit at start:
// Go lowers it again in every execve unless the program set it explicitly,
// and the worker is what needs it. With dryRun it only reports.
func RaiseNofile(dryRun bool) (Nofile, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return Nofile{}, fmt.Errorf("getrlimit(RLIMIT_NOFILE): %w", err)
	}
	n := Nofile{Soft: lim.Max, Hard: lim.Max, Changed: lim.Cur != lim.Max}
	if dryRun {
		return n, nil
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return Nofile{Soft: lim.Cur, Hard: lim.Max}, fmt.Errorf("setrlimit(RLIMIT_NOFILE, %d): %w", lim.Max, err)
	}
	return n, nil
}

// CheckDir verifies that dir can become the working directory.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("working directory %s (INFERA_EXEC_CHDIR): %w", dir, boundedread.BareErr(err))
	}
	if !fi.IsDir() {
		return fmt.Errorf("working directory %s (INFERA_EXEC_CHDIR) is not a directory", dir)
	}
	return nil
}

// Exec replaces the process with path. It returns only on failure, with
// the shell's exit code for it: lookpath.CodeNotExecutable for a file the kernel
// will not run, lookpath.CodeNotFound when it or its #! interpreter is gone.
//
// The worker gets the signal dispositions infera-exec was given
// (sigstart): ignored ones ignored, blocked ones blocked.
func Exec(path string, argv, env []string) (int, error) {
	if err := sigstart.Restore(sigstart.Start()); err != nil {
		fmt.Fprintf(os.Stderr, "infera-exec: warning: the worker may not keep the signal dispositions it was given: %v\n", err)
	}
	err := syscall.Exec(path, argv, env)
	code := lookpath.CodeNotExecutable
	if err == syscall.ENOENT {
		// The file vanished, or its #! interpreter does not exist.
		return lookpath.CodeNotFound, fmt.Errorf("exec %s: %w (if it is a script, check the interpreter on its #! line)", path, err)
	}
	if err == syscall.ENOEXEC {
		return code, fmt.Errorf("exec %s: %w (not a binary for this machine, or a script without a #! line)", path, err)
	}
	return code, fmt.Errorf("exec %s: %w", path, err)
}
