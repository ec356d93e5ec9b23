package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sigtour is what the init stories run beside a shell worker (tour.sh)
// to send signals to the init and see where they arrive, waiting on
// events only: a line the worker's traps write to a FIFO, a stop or a
// continue that waitid reports, the end of a process (pidfd). guard is not
// a budget: it is how long a tour that can no longer succeed waits before
// it says what did not arrive.
//
//	sigtour drive -to PID -got FIFO -idle FIFO -roles worker[,member] [-first SIG] SIG...
//	sigtour jobctl -to PID -got FIFO -idle FIFO SIG
//	sigtour orphan
//
// drive and jobctl leave the worker's process group first, so that what
// the init sends to the group does not reach them.
func sigtour() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sigtour drive|jobctl|orphan ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "drive":
		err = tourDrive(os.Args[2:])
	case "jobctl":
		err = tourJobctl(os.Args[2:])
	case "orphan":
		err = tourOrphan()
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Printf("sigtour: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

const tourGuard = 2 * time.Minute

// tourPeer is the pair of FIFOs shared with the worker: got carries the
// lines its traps write, idle the lines that end its idling.
type tourPeer struct {
	lines chan string
	idle  string
}

func openPeer(got, idle string) (*tourPeer, error) {
	f, err := os.Open(got) // blocks until the worker opens it for writing
	if err != nil {
		return nil, err
	}
	p := &tourPeer{lines: make(chan string, 256), idle: idle}
	go func() {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p, nil
}

// await returns once every wanted line has come, passing over others.
func (p *tourPeer) await(what string, want ...string) error {
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	for len(missing) > 0 {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return fmt.Errorf("%s: the worker closed the FIFO", what)
			}
			delete(missing, l)
		case <-time.After(tourGuard):
			var m []string
			for w := range missing {
				m = append(m, strconv.Quote(w))
			}
			return fmt.Errorf("%s: no %s within %v", what, strings.Join(m, ", "), tourGuard)
		}
	}
	return nil
}

// release ends the idling of n shell processes ($IDLE.done, and a line
// for each one's reader to end on), then waits for the end of
// the FIFO: every writer (the worker's traps) gone, so none of them writes
// into a FIFO nobody reads.
func (p *tourPeer) release(n int) error {
	if err := os.WriteFile(p.idle+".done", nil, 0o600); err != nil {
		return err
	}
	// A shell that saw idle.done between two readers ends without
	// reading: the line may find no reader (ENXIO, EPIPE), as good.
	f, err := os.OpenFile(p.idle, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err == nil {
		_, err = f.WriteString(strings.Repeat("go\n", n))
		f.Close()
	}
	if errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.EPIPE) {
		err = nil
	}
	for range p.lines {
	}
	return err
}

func leaveGroup() error {
	return syscall.Setpgid(0, 0)
}

func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return syscall.Signal(n), nil
	}
	n := unix.SignalNum("SIG" + strings.TrimPrefix(s, "SIG"))
	if n == 0 {
		return 0, fmt.Errorf("unknown signal %q", s)
	}
	return n, nil
}

// tourDrive sends each signal to the init and waits until every role has
// reported it (the member, a background job of a non-interactive shell,
// ignores SIGINT and SIGQUIT, as POSIX has it), then prints one line.
func tourDrive(args []string) error {
	fs := flag.NewFlagSet("drive", flag.ContinueOnError)
	to := fs.Int("to", 0, "")
	got := fs.String("got", "", "")
	idle := fs.String("idle", "", "")
	roles := fs.String("roles", "worker", "")
	quiet := fs.String("first", "", "a signal sent before the tour that reaches nobody (and must not end the init)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := leaveGroup(); err != nil {
		return err
	}
	p, err := openPeer(*got, *idle)
	if err != nil {
		return err
	}
	rs := strings.Split(*roles, ",")
	var ready []string
	for _, r := range rs {
		ready = append(ready, r+" ready")
	}
	if err := p.await("start", ready...); err != nil {
		return err
	}
	if *quiet != "" {
		sig, err := parseSignal(*quiet)
		if err != nil {
			return err
		}
		if err := syscall.Kill(*to, sig); err != nil {
			return fmt.Errorf("kill -%d %d: %v", sig, *to, err)
		}
	}
	var sent []string
	for _, a := range fs.Args() {
		sig, err := parseSignal(a)
		if err != nil {
			return err
		}
		if err := syscall.Kill(*to, sig); err != nil {
			return fmt.Errorf("kill -%d %d: %v", sig, *to, err)
		}
		var want []string
		for _, r := range rs {
			if r == "member" && (sig == syscall.SIGINT || sig == syscall.SIGQUIT) {
				continue
			}
			want = append(want, fmt.Sprintf("%s %d", r, sig))
		}
		if err := p.await(fmt.Sprintf("signal %d (%v) sent to the init", sig, sig), want...); err != nil {
			p.release(len(rs))
			return err
		}
		sent = append(sent, strconv.Itoa(int(sig)))
	}
	fmt.Printf("tour: %d signals sent to the init, each reached %s: %s\n", len(sent), strings.Join(rs, " and "), strings.Join(sent, " "))
	return p.release(len(rs))
}

// tourJobctl starts a helper into the worker's process group, as its own
// child so that it can wait for the helper's stop and continue, sends SIG
// (a job-control stop) to the init and then SIGCONT, and waits for the
// worker's trap to report the SIGCONT.
func tourJobctl(args []string) error {
	fs := flag.NewFlagSet("jobctl", flag.ContinueOnError)
	to := fs.Int("to", 0, "")
	got := fs.String("got", "", "")
	idle := fs.String("idle", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("jobctl: one signal")
	}
	sig, err := parseSignal(fs.Arg(0))
	if err != nil {
		return err
	}
	pgid := syscall.Getpgrp() // the worker's group, before leaving it
	if err := leaveGroup(); err != nil {
		return err
	}
	p, err := openPeer(*got, *idle)
	if err != nil {
		return err
	}
	if err := p.await("start", "worker ready"); err != nil {
		return err
	}
	released := false
	defer func() {
		if !released {
			p.release(1) // the story ends on the error, not on a worker left idling
		}
	}()
	member := exec.Command("sleep", "1000")
	member.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	if err := member.Start(); err != nil {
		return err
	}
	defer func() { member.Process.Kill(); member.Wait() }()

	if err := syscall.Kill(*to, sig); err != nil {
		return err
	}
	stopped, err := waitChildState(member.Process.Pid, unix.WSTOPPED)
	if err != nil {
		return err
	}
	fmt.Printf("member stopped by %v\n", unix.SignalName(stopped))
	if err := syscall.Kill(*to, syscall.SIGCONT); err != nil {
		return err
	}
	if _, err := waitChildState(member.Process.Pid, unix.WCONTINUED); err != nil {
		return err
	}
	fmt.Println("member continued")
	if err := p.await("SIGCONT", "worker cont"); err != nil {
		return err
	}
	// The helper is this process's child, not the init's: it leaves the
	// group before the worker ends.
	member.Process.Kill()
	member.Wait()
	released = true
	return p.release(1)
}

// waitChildState waits (guarded) for a child's stop or continue report.
func waitChildState(pid, state int) (syscall.Signal, error) {
	type result struct {
		code, status int32
		err          error
	}
	done := make(chan result, 1)
	go func() {
		var info unix.Siginfo
		var err error
		for {
			if err = unix.Waitid(unix.P_PID, pid, &info, state, nil); err != unix.EINTR {
				break
			}
		}
		// si_status follows si_pid and si_uid in the SIGCHLD layout.
		done <- result{info.Code, *(*int32)(unsafe.Add(unsafe.Pointer(&info), 24)), err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return 0, r.err
		}
		if state == unix.WSTOPPED {
			return syscall.Signal(r.status), nil
		}
		return 0, nil
	case <-time.After(tourGuard):
		return 0, fmt.Errorf("pid %d reported no state change within %v", pid, tourGuard)
	}
}

// tourOrphan leaves an orphan behind: a sleep whose parent, a shell, has
// ended and been waited for, so that the sleep is the init's child now. It
// kills the sleep and returns once the sleep's end has been reported (a
// pidfd becomes readable when the process is a zombie, its parent told):
// the zombie is the init's to reap, before the worker ends.
func tourOrphan() error {
	out, err := exec.Command("sh", "-c", "sleep 1000 </dev/null >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return err
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		return err
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(tourGuard/time.Millisecond))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("the orphan %d did not end within %v", pid, tourGuard)
		}
		fmt.Println("orphan ended")
		return nil
	}
}
