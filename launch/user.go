package launch

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/userdb"
	"golang.org/x/sys/unix"
)

// Drop is the user the worker runs as (--user, INFERA_EXEC_USER), as gosu
// drops to it: the supplementary groups first (setgroups, an empty list
// when there are none), then the gid, then the uid. It is decided by Run,
// before anything is written, and done by Start, after every step that
// needs root (the libionic swap, the patches, the open-file limit).
//
// In exec mode infera-exec drops its own credentials and then execs the
// worker: Go's syscall.Setgroups, Setgid and Setuid change every thread
// of the process (since Go 1.16 they go through syscall.AllThreadsSyscall
// in a binary without cgo, which this one is), so no thread keeps root.
// In init mode the init stays root and the worker is started with the
// credentials (SysProcAttr.Credential): the child sets them, in the same
// order, before its exec, and a failure of any of them ends the child
// before the worker runs (docs/init.md says why the init keeps root).
// Either way the result is read back and compared with what was asked
// (Verify); a start with anything else is refused, never run.
type Drop struct {
	Spec string `json:"spec"` // as given
	From string `json:"from"` // --user or INFERA_EXEC_USER
	userdb.Identity
}

// NotRootError is a --user given to an infera-exec that does not run as
// root: it cannot change its credentials, so the start is refused before
// anything is done.
type NotRootError struct {
	Spec, From string
	EUID       int
}

func (e *NotRootError) Error() string {
	return fmt.Sprintf("%s %s: infera-exec runs as uid %d, not root, so it cannot run the worker as another user; run the container as root (the worker then runs as %s), or drop %s and let the container's user be the worker's",
		e.From, e.Spec, e.EUID, e.Spec, e.From)
}

// Brief is the refusal's text line (logging.Briefer): what, and the fix
// in a few words; Error has the whole of it.
func (e *NotRootError) Brief() string {
	return fmt.Sprintf("%s %s: infera-exec runs as uid %d, not root, so it cannot change user; run the container as root, or drop %s",
		e.From, e.Spec, e.EUID, e.From)
}

// ExitCode is EX_NOPERM.
func (e *NotRootError) ExitCode() int { return CodeNoPerm }

// CodeNoPerm (EX_NOPERM) is the exit code of a start refused because the
// worker's user cannot be taken: infera-exec is not root, or the drop did
// not give exactly the credentials asked for.
const CodeNoPerm = 77

// DropError is a drop that did not give what was asked: nothing was started.
type DropError struct{ Msg string }

func (e *DropError) Error() string { return e.Msg }

// ExitCode is EX_NOPERM.
func (e *DropError) ExitCode() int { return CodeNoPerm }

// planDrop resolves the configured user against root's /etc/passwd and
// /etc/group; nil when no user was asked for. euid is infera-exec's.
func planDrop(cfg config.Config, root string, euid int) (*Drop, error) {
	if cfg.User == nil {
		return nil, nil
	}
	spec := cfg.User.String()
	if euid != 0 {
		return nil, &NotRootError{Spec: spec, From: cfg.UserFrom, EUID: euid}
	}
	passwd, group, err := userdb.Files(root)
	if err != nil {
		return nil, &config.Error{Msg: fmt.Sprintf("%s %s: %v", cfg.UserFrom, spec, err)}
	}
	id, err := userdb.Resolve(*cfg.User, passwd, group)
	if err != nil {
		return nil, &config.Error{Msg: fmt.Sprintf("%s %s: %v", cfg.UserFrom, spec, err)}
	}
	return &Drop{Spec: spec, From: cfg.UserFrom, Identity: id}, nil
}

// homeEdit is what the worker's environment gains: HOME of the user, as
// gosu sets it (the passwd entry's home, "/" when there is none).
func (d *Drop) homeEdit() environ.Edit { return environ.Set("HOME", d.Home) }

// String is the drop as the log and --explain say it.
func (d *Drop) String() string {
	groups := "no supplementary groups"
	if len(d.Groups) > 0 {
		var l []string
		for _, g := range d.Groups {
			l = append(l, strconv.Itoa(g))
		}
		groups = "supplementary groups " + strings.Join(l, ",")
	}
	who := fmt.Sprintf("uid %d", d.UID)
	if d.Name != "" {
		who += " (" + d.Name + ")"
	}
	return fmt.Sprintf("%s, gid %d, %s, HOME=%s", who, d.GID, groups, d.Home)
}

// credential is the drop for a child started by the init.
func (d *Drop) credential() *syscall.Credential {
	groups := make([]uint32, len(d.Groups))
	for i, g := range d.Groups {
		groups[i] = uint32(g)
	}
	return &syscall.Credential{Uid: uint32(d.UID), Gid: uint32(d.GID), Groups: groups}
}

// dropSelf changes this process's credentials to d's: setgroups, setgid,
// setuid, each on every thread, then reads them back (Verify).
func (d *Drop) dropSelf() error {
	if err := syscall.Setgroups(d.Groups); err != nil {
		return &DropError{fmt.Sprintf("%s %s: setgroups(%v): %v; nothing was started", d.From, d.Spec, d.Groups, err)}
	}
	if err := syscall.Setgid(d.GID); err != nil {
		return &DropError{fmt.Sprintf("%s %s: setgid(%d): %v; nothing was started", d.From, d.Spec, d.GID, err)}
	}
	if err := syscall.Setuid(d.UID); err != nil {
		return &DropError{fmt.Sprintf("%s %s: setuid(%d): %v; nothing was started", d.From, d.Spec, d.UID, err)}
	}
	c, err := selfCreds()
	if err != nil {
		return &DropError{fmt.Sprintf("%s %s: reading the credentials back: %v; nothing was started", d.From, d.Spec, err)}
	}
	return d.Verify(c, "infera-exec")
}

// Creds are a process's credentials as the kernel holds them.
type Creds struct {
	UID, GID       [4]int // real, effective, saved, filesystem
	Groups         []int
	CapEff, CapPrm uint64
}

// Verify is nil when c is exactly the drop: every uid and gid (real,
// effective, saved, filesystem) as asked, the supplementary groups as
// asked, and for a uid other than 0 no capability left (the kernel clears
// them on setuid from root unless a securebit keeps them). whose names
// the process in the error.
func (d *Drop) Verify(c Creds, whose string) error {
	var bad []string
	for i, n := range []string{"real", "effective", "saved", "filesystem"} {
		if c.UID[i] != d.UID {
			bad = append(bad, fmt.Sprintf("%s uid %d", n, c.UID[i]))
		}
		if c.GID[i] != d.GID {
			bad = append(bad, fmt.Sprintf("%s gid %d", n, c.GID[i]))
		}
	}
	got, want := slices.Clone(c.Groups), slices.Clone(d.Groups)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(slices.Compact(got), slices.Compact(want)) {
		bad = append(bad, fmt.Sprintf("supplementary groups %v", c.Groups))
	}
	if d.UID != 0 && (c.CapEff != 0 || c.CapPrm != 0) {
		bad = append(bad, fmt.Sprintf("capabilities left (effective %#x, permitted %#x; a securebit such as SECBIT_NO_SETUID_FIXUP keeps them)", c.CapEff, c.CapPrm))
	}
	if len(bad) > 0 {
		return &DropError{fmt.Sprintf("%s %s: %s has %s instead of %s; nothing was started", d.From, d.Spec, whose, strings.Join(bad, ", "), d)}
	}
	return nil
}

// selfCreds reads this process's credentials with system calls (no /proc needed).
func selfCreds() (Creds, error) {
	var c Creds
	var r, e, s int
	r, e, s = unix.Getresuid()
	fs, _ := unix.SetfsuidRetUid(-1) // -1 changes nothing and returns the current one
	c.UID = [4]int{r, e, s, fs}
	r, e, s = unix.Getresgid()
	fs, _ = unix.SetfsgidRetGid(-1)
	c.GID = [4]int{r, e, s, fs}
	groups, err := syscall.Getgroups()
	if err != nil {
		return c, fmt.Errorf("getgroups: %w", err)
	}
	c.Groups = groups
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return c, fmt.Errorf("capget: %w", err)
	}
	c.CapEff = uint64(data[0].Effective) | uint64(data[1].Effective)<<32
	c.CapPrm = uint64(data[0].Permitted) | uint64(data[1].Permitted)<<32
	return c, nil
}

// ParseStatus reads the credentials of a process from its
// /proc/PID/status: the Uid, Gid, Groups, CapEff and CapPrm lines.
func ParseStatus(b []byte) (Creds, error) {
	var c Creds
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		var err error
		switch key {
		case "Uid", "Gid":
			dst := &c.UID
			if key == "Gid" {
				dst = &c.GID
			}
			if len(f) != 4 {
				return c, fmt.Errorf("the %s line %q: not four ids", key, val)
			}
			for i := range f {
				if dst[i], err = strconv.Atoi(f[i]); err != nil {
					return c, fmt.Errorf("the %s line %q: %w", key, val, err)
				}
			}
			seen++
		case "Groups":
			c.Groups = []int{}
			for _, g := range f {
				n, err := strconv.Atoi(g)
				if err != nil {
					return c, fmt.Errorf("the Groups line %q: %w", val, err)
				}
				c.Groups = append(c.Groups, n)
			}
			seen++
		case "CapEff", "CapPrm":
			if len(f) != 1 {
				return c, fmt.Errorf("the %s line %q: not one number", key, val)
			}
			n, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				return c, fmt.Errorf("the %s line %q: %w", key, val, err)
			}
			if key == "CapEff" {
				c.CapEff = n
			} else {
				c.CapPrm = n
			}
			seen++
		}
	}
	if seen != 5 {
		return c, fmt.Errorf("not every one of the Uid, Gid, Groups, CapEff and CapPrm lines is there")
	}
	return c, nil
}

// verifyChild reads the started worker's credentials from /proc and
// compares them with the drop; without /proc it says so (the child's own
// setgroups, setgid and setuid, each of which ends it on failure, are
// then what holds).
func (d *Drop) verifyChild(pid int) (unverified string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return fmt.Sprintf("the worker's credentials not read back (%v): they are what its start set, or it did not start", err), nil
	}
	c, err := ParseStatus(b)
	if err != nil {
		return "", &DropError{fmt.Sprintf("%s %s: /proc/%d/status: %v", d.From, d.Spec, pid, err)}
	}
	return "", d.Verify(c, fmt.Sprintf("the worker (pid %d)", pid))
}
