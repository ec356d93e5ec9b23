// Package procgroup runs helper processes (the interpreter asked for its
// version or for where a package lives, a v0.2.2 patch script) so that a
// timeout kills all of it: wrapper scripts such as pyenv shims start
// children of their own, and those must not outlive the start.
package procgroup

import (
	"context"
	"os/exec"
	"syscall"
	"time"
)

// Command is exec.CommandContext with the process in its own process
// group, the whole group killed when ctx ends, and Wait bounded even if a
// grandchild holds the output pipes open.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	return cmd
}
