// Package memcg reads this process's memory cgroup: its limit and how
// many times the kernel's OOM killer ended a process in it. It is the one
// reader of the cgroup's memory files (the preflight's memory rule, the
// init's word on a worker killed by SIGKILL).
//
// The cgroup filesystem is a kernel filesystem: reading it never waits on
// a server, so it is read directly, each file bounded.
package memcg

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/infera/infera-exec/internal/boundedread"
)

// SelfCgroup is where the kernel says which cgroups this process is in.
const SelfCgroup = "/proc/self/cgroup"

// Group is a memory cgroup directory and the cgroup version whose files
// it holds.
type Group struct {
	Dir string
	V1  bool // cgroup v1's memory controller; else the v2 unified tree
}

// maxFile bounds the control files read (memory.events, memory.oom_control
// hold a few lines).
const maxFile = 4096

// Find is this process's memory cgroup under root (the cgroup
// filesystem's mount point, SYSFS_PATH/fs/cgroup), from /proc/self/cgroup.
func Find(root string) Group {
	var self []byte
	if f, err := os.Open(SelfCgroup); err == nil {
		// A proc file says size 0: bounded by reading, not by stat.
		self, _ = io.ReadAll(io.LimitReader(f, 64<<10))
		f.Close()
	}
	return FindFrom(root, string(self))
}

// FindFrom is Find with /proc/self/cgroup's content given. Its v1 line
// whose controllers include memory places the group under root/memory,
// its v2 line ("0::/path") under root itself. When the path's directory
// is not visible (a container sees its own cgroup at the root, through a
// cgroup namespace or a bind mount), the root stands for it. The first
// candidate holding the version's memory files wins; with none, the
// first candidate, whose files then say they are missing.
func FindFrom(root, self string) Group {
	var v1Path, v2Path string
	var v1Seen, v2Seen bool
	for _, line := range strings.Split(self, "\n") {
		hier, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if slices.Contains(strings.Split(path, "/"), "..") {
			// Outside this cgroup namespace ("/../.."): not under root;
			// the root stands for it.
			path = "/"
		}
		switch {
		case hier == "0" && ctrls == "":
			v2Path, v2Seen = path, true
		case hasController(ctrls, "memory"):
			v1Path, v1Seen = path, true
		}
	}
	var cands []Group
	add := func(g Group) {
		for _, c := range cands {
			if c == g {
				return
			}
		}
		cands = append(cands, g)
	}
	// A v1 memory controller takes precedence: on a hybrid host the
	// unified tree holds no memory controller.
	if v1Seen {
		add(Group{Dir: filepath.Join(root, "memory", v1Path), V1: true})
		add(Group{Dir: filepath.Join(root, "memory"), V1: true})
	}
	if v2Seen {
		add(Group{Dir: filepath.Join(root, v2Path)})
		add(Group{Dir: root})
	}
	add(Group{Dir: root})
	add(Group{Dir: filepath.Join(root, "memory"), V1: true})
	for _, c := range cands {
		if c.holdsMemoryFiles() {
			return c
		}
	}
	return cands[0]
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

func (g Group) holdsMemoryFiles() bool {
	for _, f := range g.files() {
		if _, err := os.Stat(filepath.Join(g.Dir, f)); err == nil {
			return true
		}
	}
	return false
}

// files are the limit's file and the OOM counter's file, by version.
func (g Group) files() [2]string {
	if g.V1 {
		return [2]string{"memory.limit_in_bytes", "memory.oom_control"}
	}
	return [2]string{"memory.max", "memory.events"}
}

// v1Unlimited: v1 shows "no limit" as the largest page-aligned int64
// (9223372036854771712 with 4 KiB pages); anything this large is none.
const v1Unlimited = 1 << 62

// Limit is the group's memory limit in bytes (0: none), and the file it
// was read from; ok is false when the file is missing or unreadable, and
// from then says why (naming the file, not the group's directory, which
// can be long: Dir is that).
func (g Group) Limit() (limit uint64, from string, ok bool) {
	p := filepath.Join(g.Dir, g.files()[0])
	data, err := boundedread.File(p, maxFile)
	if err != nil {
		return 0, g.missing(p, err), false
	}
	s := strings.TrimSpace(string(data))
	if s == "max" && !g.V1 {
		return 0, p, true
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Sprintf("%s holds %q", filepath.Base(p), s), false
	}
	if n >= v1Unlimited {
		return 0, p, true
	}
	return n, p, true
}

// OOMKills is how many processes of the group (and of the groups below
// it, in v2) the OOM killer has ended: the oom_kill line of v2's
// memory.events or v1's memory.oom_control (kernels from 4.13). ok is
// false when there is no such count, and from then says why.
func (g Group) OOMKills() (n uint64, from string, ok bool) {
	p := filepath.Join(g.Dir, g.files()[1])
	data, err := boundedread.File(p, maxFile)
	if err != nil {
		return 0, g.missing(p, err), false
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		if k != "oom_kill" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Sprintf("%s: oom_kill %q is not a count", filepath.Base(p), v), false
		}
		return n, p, true
	}
	return 0, filepath.Base(p) + " has no oom_kill line", false
}

func (g Group) missing(p string, err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		v := "v2"
		if g.V1 {
			v = "v1"
		}
		return fmt.Sprintf("no %s (cgroup %s)", filepath.Base(p), v)
	}
	return err.Error()
}
