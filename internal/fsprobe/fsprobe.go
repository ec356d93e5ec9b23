// Package fsprobe answers "can this filesystem access finish, and what did
// it see?" without letting the access block infera-exec. On a local
// filesystem the access runs in this process, at no cost. On a remote or
// unknown one (NFS, CIFS, FUSE, ...; see package mountinfo) it runs in a
// short-lived child process, a re-exec of this binary in a helper mode,
// which the parent abandons at a deadline.
//
// A goroutine would not do: a thread blocked in a request to a dead NFS
// server or a FUSE daemon that stopped answering cannot be interrupted
// (in FUSE not even by SIGKILL once the daemon has read the request), and
// execve waits for every thread of the process to exit, so one stuck
// thread would keep infera-exec from ever becoming the worker.
//
// An abandoned child keeps running until its call returns; then it dies of
// the SIGKILL it was sent at the deadline. It holds nothing the worker
// needs: its standard input is /dev/null, its output is a pipe whose read
// end infera-exec closes (and execve would close anyway), it has no other
// descriptors, no locks, its working directory is /, and it is in its own
// process group. After the exec it is a child of the worker.
package fsprobe

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/infera/infera-exec/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// EnvVar marks a helper child; its value names the operation. It is set
// only in the child's environment, which holds nothing else, so it never
// reaches the worker.
const EnvVar = "INFERA_EXEC_HELPER"

// helperArgv0 is the child's argv[0]: what ps shows for a stuck helper.
const helperArgv0 = "infera-exec-helper"

// maxReply bounds what a helper may answer.
const maxReply = 4 << 20

// Op is a filesystem access that may block: a function of a JSON-encodable
// argument to a JSON-encodable result, known to the child by its name.
type Op[A, R any] struct {
	name string
	fn   func(A) (R, error)
}

// Name is the operation's name.
func (o Op[A, R]) Name() string { return o.name }

var registry = map[string]func(arg []byte) (any, error){}

// Define registers an operation under name. Call it from a package-level
// variable, so the operation is known in the child before main runs.
func Define[A, R any](name string, fn func(A) (R, error)) Op[A, R] {
	if _, dup := registry[name]; dup {
		panic("fsprobe: operation " + name + " defined twice")
	}
	registry[name] = func(raw []byte) (any, error) {
		var a A
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, fmt.Errorf("helper %s: argument: %w", name, err)
		}
		return fn(a)
	}
	return Op[A, R]{name: name, fn: fn}
}

// reply is the child's answer on its standard output.
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Errno  int             `json:"errno,omitempty"`
}

// HelperOp is the operation this process was started to run, if it is a
// helper child: EnvVar names a defined operation and the arguments are
// exactly the one JSON argument. Anything else is a normal start, so an
// EnvVar left in a pod's environment cannot turn infera-exec into a
// helper.
func HelperOp(args []string, getenv func(string) string) (string, bool) {
	op := getenv(EnvVar)
	if op == "" || len(args) != 2 || args[0] != helperArgv0 {
		return "", false
	}
	_, ok := registry[op]
	return op, ok
}

// Serve runs operation op on the JSON argument arg, writes the reply to w
// and returns the exit code.
func Serve(op, arg string, w io.Writer) int {
	var rep reply
	res, err := registry[op]([]byte(arg))
	if err != nil {
		rep.Error = err.Error()
		var errno syscall.Errno
		if errors.As(err, &errno) {
			rep.Errno = int(errno)
		}
	} else if rep.Result, err = json.Marshal(res); err != nil {
		rep.Error = err.Error()
	}
	b, _ := json.Marshal(rep)
	if _, err := w.Write(append(b, '\n')); err != nil {
		return 1
	}
	return 0
}

// Error is an operation's failure as the child reported it; it unwraps to
// the errno, so errors.Is(err, fs.ErrNotExist) works across the process
// boundary.
type Error struct {
	Msg   string
	Errno syscall.Errno
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// DeadlineError is an access that did not finish within the deadline.
type DeadlineError struct {
	Path    string
	Mount   mountinfo.Mount
	After   time.Duration
	Earlier bool // not tried: an earlier access to the same mount passed its deadline
}

func (e *DeadlineError) Error() string {
	s := fmt.Sprintf("%s (%s) did not answer within %s", e.Path, e.Mount.Describe(), e.After)
	if e.Earlier {
		s += " (an earlier access to " + e.Mount.Point + " did not either; not tried again)"
	}
	return s
}

// Fix is what to do about a filesystem that does not answer.
func (e *DeadlineError) Fix() string {
	return fmt.Sprintf("Check the mount %s (%s): is its server or daemon up and reachable from this node? "+
		"A mount whose server stopped answering blocks every access; if other pods on the node see the same, the node's mount is stuck.",
		e.Mount.Point, e.Mount.Describe())
}

// Access says how an operation ran.
type Access struct {
	Path   string          `json:"path"`
	Mount  mountinfo.Mount `json:"mount"`
	Helper bool            `json:"helper,omitempty"` // in a child process
	Took   time.Duration   `json:"took_ns"`
}

// Prober runs operations with a deadline where they may block. The zero
// value is not usable; a nil *Prober runs every operation in this process
// (for tests that know their paths are local).
type Prober struct {
	Timeout time.Duration
	// Table is the mount table; nil: /proc/self/mountinfo, read once.
	Table func() (*mountinfo.Table, error)
	// Exe is the binary the helper runs; empty: /proc/self/exe.
	Exe string
	// Log, when set, gets a debug line for each mount a helper first runs
	// for, saying why (--verbose).
	Log *slog.Logger
	// Statfs is statfs(2)'s f_type of a path; nil: the real one. A seam
	// for tests.
	Statfs func(path string) (uint32, error)

	once     sync.Once
	table    *mountinfo.Table
	tableErr error
	canBlock bool // the table has a mount that is not local
	// rootLocal: no mount entry covers / (a chroot, some sandboxes), and
	// the filesystem this process runs from is one known to be local; a
	// path no entry covers is on it.
	rootLocal bool
	rootWhy   string
	told      map[string]bool // mounts a helper was explained for

	mu     sync.Mutex
	dead   map[string]*DeadlineError // by mount point
	passed int
}

// New is a Prober with the given deadline.
func New(timeout time.Duration) *Prober { return &Prober{Timeout: timeout} }

// Passed counts the deadlines passed so far, including accesses refused
// because their mount had passed one before.
func (p *Prober) Passed() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.passed
}

// Where is the mount that answers for path, from the mount table alone
// (links followed on local filesystems only), and whether touching path
// needs the helper.
func (p *Prober) Where(path string) (mountinfo.Mount, bool) {
	if p == nil {
		return mountinfo.Mount{}, false
	}
	p.once.Do(func() {
		if p.Table != nil {
			p.table, p.tableErr = p.Table()
		} else {
			p.table, p.tableErr = mountinfo.Read(mountinfo.SelfPath)
		}
		p.canBlock = p.tableErr == nil && p.table.CanBlock()
		p.rootLocal, p.rootWhy = p.judgeRoot()
	})
	if p.tableErr != nil {
		return mountinfo.Mount{Kind: mountinfo.Unknown}, true
	}
	if _, covered := p.table.Lookup(path); !covered && p.rootLocal {
		return mountinfo.Mount{Point: "/", Kind: mountinfo.Local}, false
	}
	if !p.canBlock {
		// Every mount is local: wherever links lead, the path answers.
		m, kind := p.table.KindOf(path)
		m.Kind = kind
		return m, kind != mountinfo.Local
	}
	_, m, kind := p.table.Where(path)
	m.Kind = kind
	return m, kind != mountinfo.Local
}

// judgeRoot decides, once per start, whether paths no mount entry covers
// can be touched directly: with no entry for / (a chroot without a mount
// of its own), they lie on the filesystem this process was started from,
// which answered to load it; statfs(2) of / tells its type. Only a type
// known to be local counts: NFS or an unknown magic keeps the helper.
func (p *Prober) judgeRoot() (bool, string) {
	if p.tableErr != nil {
		return false, ""
	}
	if _, ok := p.table.Lookup("/"); ok {
		return false, ""
	}
	statfs := p.Statfs
	if statfs == nil {
		statfs = func(path string) (uint32, error) {
			var st unix.Statfs_t
			err := unix.Statfs(path, &st)
			return uint32(st.Type), err
		}
	}
	magic, err := statfs("/")
	if err != nil {
		return false, fmt.Sprintf("no mount entry covers / and statfs(/) failed (%v)", err)
	}
	name, _ := mountinfo.Magic(magic)
	if !mountinfo.KnownLocal(magic) {
		return false, fmt.Sprintf("no mount entry covers / and its filesystem (%s) is not one known to be local", name)
	}
	return true, ""
}

// explain logs, once per mount, why touching a path there needs a helper.
func (p *Prober) explain(path string, m mountinfo.Mount) {
	if p.Log == nil {
		return
	}
	key := m.Point + "\x00" + m.Source
	p.mu.Lock()
	if p.told == nil {
		p.told = map[string]bool{}
	}
	first := !p.told[key]
	p.told[key] = true
	p.mu.Unlock()
	if !first {
		return
	}
	why := fmt.Sprintf("its filesystem (%s at %s, %s) may stop answering", m.FSType, m.Point, m.Kind)
	switch {
	case p.tableErr != nil:
		why = fmt.Sprintf("the mount table cannot be read (%v)", p.tableErr)
	case m.Point == "" && p.rootWhy != "":
		why = p.rootWhy
	case m.Point == "":
		why = "no mount entry covers it"
	}
	p.Log.Debug(fmt.Sprintf("deadline helper for %s: %s; touched with a %s deadline from a child process", path, why, p.Timeout))
}

// Call runs op on arg, which accesses path: directly when path is on a
// local filesystem, else in a helper child with the deadline.
func Call[A, R any](p *Prober, op Op[A, R], path string, arg A) (R, Access, error) {
	start := time.Now()
	m, remote := p.Where(path)
	acc := Access{Path: path, Mount: m}
	if !remote {
		r, err := op.fn(arg)
		acc.Took = time.Since(start)
		return r, acc, err
	}
	acc.Helper = true
	var r R
	raw, err := p.run(op.name, path, m, arg)
	acc.Took = time.Since(start)
	if err != nil {
		return r, acc, err
	}
	var rep reply
	if err := json.Unmarshal(raw, &rep); err != nil {
		return r, acc, fmt.Errorf("helper %s for %s answered %q: %w", op.name, path, excerpt(raw), err)
	}
	if rep.Error != "" {
		return r, acc, &Error{Msg: rep.Error, Errno: syscall.Errno(rep.Errno)}
	}
	if err := json.Unmarshal(rep.Result, &r); err != nil {
		return r, acc, fmt.Errorf("helper %s for %s: result: %w", op.name, path, err)
	}
	return r, acc, nil
}

func (p *Prober) run(name, path string, m mountinfo.Mount, arg any) ([]byte, error) {
	key := m.Point + "\x00" + m.Source
	p.mu.Lock()
	if d := p.dead[key]; d != nil {
		p.passed++
		p.mu.Unlock()
		return nil, &DeadlineError{Path: path, Mount: m, After: d.After, Earlier: true}
	}
	p.mu.Unlock()

	argJSON, err := json.Marshal(arg)
	if err != nil {
		return nil, err
	}
	p.explain(path, m)
	deadline := time.Now().Add(p.Timeout)
	out, err := p.spawn(name, argJSON, deadline)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		d := &DeadlineError{Path: path, Mount: m, After: p.Timeout}
		p.mu.Lock()
		if p.dead == nil {
			p.dead = map[string]*DeadlineError{}
		}
		p.dead[key] = d
		p.passed++
		p.mu.Unlock()
		return nil, d
	}
	return out, err
}

// spawn starts the helper and reads its reply until deadline. It never
// waits for the child beyond the deadline: at the deadline the child's
// group is sent SIGKILL and a goroutine reaps it whenever it dies (a
// goroutine blocked in wait4 does not hold up execve; a thread in a
// filesystem call would).
func (p *Prober) spawn(name string, arg []byte, deadline time.Time) ([]byte, error) {
	exe := p.Exe
	if exe == "" {
		exe = "/proc/self/exe"
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("helper %s: %w", name, err)
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        []string{helperArgv0, string(arg)},
		Env:         []string{EnvVar + "=" + name},
		Dir:         "/",
		Stdout:      w, // an *os.File: passed as is, no copying goroutine
		Stderr:      w, // a crash's trace comes back with the reply
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("helper %s: start %s: %w", name, exe, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	kill := func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

	if err := r.SetReadDeadline(deadline); err != nil {
		kill()
		return nil, fmt.Errorf("helper %s: %w", name, err)
	}
	out, err := io.ReadAll(io.LimitReader(r, maxReply))
	if err != nil {
		kill()
		return nil, err // os.ErrDeadlineExceeded at the deadline
	}
	// The child closed its output: it is exiting. Its status matters only
	// when it said nothing.
	select {
	case werr := <-exited:
		if len(out) == 0 && werr != nil {
			return nil, fmt.Errorf("helper %s: %w", name, werr)
		}
	case <-time.After(time.Until(deadline)):
		kill()
	}
	return out, nil
}

func excerpt(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// Stat is os.Stat of a path as a helper can answer it.
type Stat struct {
	Mode os.FileMode `json:"mode"`
	Size int64       `json:"size"`
}

// StatOp stats a path: the cheapest question whose answer needs the
// filesystem's server.
var StatOp = Define("stat", func(path string) (Stat, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Stat{}, err
	}
	return Stat{Mode: fi.Mode(), Size: fi.Size()}, nil
})

// Answers reports whether path's filesystem answers a stat within the
// deadline. Only a passed deadline is an error: a path that does not exist
// answered. On a local filesystem it costs nothing and does no syscall.
func (p *Prober) Answers(path string) (Access, error) {
	if _, remote := p.Where(path); !remote {
		return Access{Path: path}, nil
	}
	_, acc, err := Call(p, StatOp, path, path)
	var d *DeadlineError
	if errors.As(err, &d) {
		return acc, err
	}
	if err != nil && !errors.As(err, new(*Error)) && !errors.Is(err, os.ErrNotExist) {
		return acc, err // the helper itself failed
	}
	return acc, nil
}

// AllAnswer checks that the filesystem of each path answers (see
// Answers); a deadline that passed comes back with what to do about it.
// Empty paths are skipped.
func (p *Prober) AllAnswer(paths ...string) error {
	for _, path := range paths {
		if path == "" {
			continue
		}
		if _, err := p.Answers(path); err != nil {
			var d *DeadlineError
			if errors.As(err, &d) {
				return fmt.Errorf("%w. %s", err, d.Fix())
			}
			return err
		}
	}
	return nil
}
