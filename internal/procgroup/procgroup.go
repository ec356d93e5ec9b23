// Package procgroup runs helper processes (the interpreter asked for its
// version or for where a package lives, a v0.2.2 patch script) so that a
// timeout kills all of it: wrapper scripts such as pyenv shims start
// children of their own, and those must not outlive the start.
package procgroup

import (
	"bytes"
	"context"
	"os/exec"
	"sync"
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

// Run is cmd.Run for a command made by Command, except that it returns
// once ctx is done and the group has had WaitDelay (plus a second) to
// die, even if the process cannot: a process blocked in a request to a
// dead NFS server or a FUSE daemon that stopped answering (an interpreter
// stat'ing a sys.path entry there) survives SIGKILL until the request
// returns, and exec.Cmd.Wait would wait for it forever. The abandoned
// process is reaped by a goroutine whenever it dies; a goroutine waiting
// in wait4 does not hold up an execve. Output written to a Buffer stays
// safe to read.
func Run(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	grace := time.NewTimer(cmd.WaitDelay + time.Second)
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
		return ctx.Err()
	}
}

// Buffer collects a command's output; unlike bytes.Buffer it may be read
// while an abandoned command's output is still being copied into it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
