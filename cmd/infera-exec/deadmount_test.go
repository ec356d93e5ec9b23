package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/infera/infera-exec/internal/procgroup"
)

// A model volume whose server stops answering while the mount stays: a
// FUSE filesystem that mounts, answers the root's attributes, and never
// answers a lookup. Every path below its root blocks, as on a dead NFS
// server; a process blocked there survives SIGKILL until the server dies.

// deadRoot is the filesystem: a directory whose lookups never return.
type deadRoot struct{ fs.Inode }

var never = make(chan struct{})

func (*deadRoot) Lookup(context.Context, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	// Not even an interrupt ends the wait: the kernel's FUSE_INTERRUPT
	// cancels the request's context, which a dead server never sees.
	<-never
	return nil, syscall.ENOENT
}

func (*deadRoot) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	return 0
}

// deadFuseServer is the program `dead-fuse-server DIR`: mount the
// filesystem at DIR, say "ready", serve until killed.
func deadFuseServer() {
	dir := os.Args[1]
	_, err := fs.Mount(dir, &deadRoot{}, &fs.Options{MountOptions: fuse.MountOptions{
		Name:              "deadfs",
		FsName:            "deadserver:/export",
		DirectMountStrict: true, // root mounts itself; no fusermount
	}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dead-fuse-server: mount %s: %v\n", dir, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

// deadMount is the program `dead-mount -shim BIN -timeout D DIR`, run as
// PID 1 of a sandbox: it mounts the dead filesystem at DIR in a server
// process of its own, runs the start, --doctor and --check against it,
// then kills the server and checks that every process left behind exits.
// It prints one line per step for the story to check and exits 1 when a
// step went wrong.
func deadMount() {
	fl := flag.NewFlagSet("dead-mount", flag.ExitOnError)
	shim := fl.String("shim", "", "infera-exec binary")
	timeout := fl.Duration("timeout", time.Second, "INFERA_PREFLIGHT_TIMEOUT")
	fl.Parse(os.Args[1:])
	dir := fl.Arg(0)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail("mkdir %s: %v", dir, err)
	}
	server := exec.Command("dead-fuse-server", dir)
	server.Stderr = os.Stderr
	out, err := server.StdoutPipe()
	if err != nil {
		fail("%v", err)
	}
	if err := server.Start(); err != nil {
		fail("start the server: %v", err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		server.Wait()
		fail("the server did not mount %s", dir)
	}

	// Each run may take the deadline once (later accesses to the same
	// mount are refused at once) plus a margin for starting processes on
	// a loaded machine; a run that hangs is killed at its bound, and the
	// step fails.
	bound := *timeout + 10*time.Second
	env := append(os.Environ(), "INFERA_PREFLIGHT_TIMEOUT="+timeout.String())
	ok := true
	var extraEnv []string // for the next step only
	step := func(name string, want int, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		cmd := procgroup.Command(ctx, *shim, args...)
		cmd.Env = append(env, extraEnv...)
		extraEnv = nil
		var buf procgroup.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		start := time.Now()
		err := procgroup.Run(ctx, cmd)
		took := time.Since(start)
		code := -1 // killed at the bound, or abandoned there
		if ctx.Err() == nil {
			code = cmd.ProcessState.ExitCode()
		}
		within := took < bound
		fmt.Printf("%s: exit %d, within the deadline plus margin: %t\n", name, code, within)
		if code != want || !within {
			ok = false
			fmt.Printf("%s: wanted exit %d; took %s; output:\n%s", name, want, took, buf.String())
		}
		_ = err // the exit code says it
		return buf.String()
	}
	model := dir + "/models/llama"
	for _, l := range strings.Split(step("start", 0, "show-worker", "--model", model), "\n") {
		// The log line naming the path and its filesystem, and the
		// worker's own proof that it ran.
		if strings.Contains(l, "model-dir") || strings.HasPrefix(l, "argv=") {
			fmt.Println("start:", l)
		}
	}
	for _, l := range strings.Split(step("doctor", 1, "--doctor", "show-worker", "--model", model), "\n") {
		fmt.Println("doctor:", l)
	}
	for _, l := range strings.Split(step("check", 78, "--check", dir+"/image"), "\n") {
		if strings.Contains(l, "error") {
			fmt.Println("check:", l)
		}
	}
	// A PATH directory on the dead mount: command resolution would stat
	// it, so the start refuses, naming it, instead of hanging.
	extraEnv = []string{"PATH=" + dir + "/bin:" + os.Getenv("PATH")}
	for _, l := range strings.Split(step("path", 78, "show-worker"), "\n") {
		if strings.Contains(l, "error") {
			fmt.Println("path:", l)
		}
	}

	// A PYTHONPATH directory on the dead mount: the interpreter started to
	// locate the engine would hang in its first import until the probe's
	// deadline (3 x INFERA_PYTHON_TIMEOUT); the directory is asked first,
	// with the deadline of one access, and the patches are skipped. The
	// interpreter's version is asked as a start asks it (isolated from
	// PYTHONPATH): the payload has a tree for each Debian python3.
	extraEnv = []string{"PYTHONPATH=" + dir + "/site", "INFERA_SKIP_ENGINE_PATCHES=", "INFERA_PYTHON=/usr/bin/python3"}
	for _, l := range strings.Split(step("pythonpath", 0, "show-worker"), "\n") {
		if strings.Contains(l, "PYTHONPATH directory") {
			fmt.Println("pythonpath:", l)
		}
	}

	// Kill the server: the kernel aborts the connection, every blocked
	// request fails, and the abandoned helpers (ours now: we are PID 1)
	// die of the SIGKILL they were sent at their deadline.
	server.Process.Kill()
	server.Wait()
	left, err := reapAll(bound)
	if err != nil {
		ok = false
		fmt.Printf("after the server died: %v; still running: %s\n", err, left)
	} else {
		fmt.Println("after the server died: no process left")
	}
	if !ok {
		os.Exit(1)
	}
	os.Exit(0)
}

// reapAll waits for every child of this process (PID 1 inherits the
// orphans) until none is left or bound passes.
func reapAll(bound time.Duration) (string, error) {
	done := make(chan error, 1)
	go func() {
		for {
			var ws syscall.WaitStatus
			_, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.ECHILD) {
				done <- nil
				return
			}
			if err != nil && !errors.Is(err, syscall.EINTR) {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		return "", err
	case <-time.After(bound):
	}
	var procs []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != os.Getpid() {
			stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
			procs = append(procs, strings.TrimSpace(string(stat)))
		}
	}
	return strings.Join(procs, "; "), errors.New("children still running")
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "dead-mount: "+format+"\n", a...)
	os.Exit(1)
}
