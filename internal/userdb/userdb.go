// Package userdb answers who a user spec (--user, INFERA_EXEC_USER) names:
// the uid, the primary gid, the supplementary groups and the home
// directory, read from the image's /etc/passwd and /etc/group as gosu and
// runc read them (first matching entry wins; a name or a number matches).
//
// The rules, one per case of USER[:GROUP]:
//   - USER known in /etc/passwd (by name, or by uid when it is a number):
//     its uid, its primary gid and its home directory.
//   - USER a number not in /etc/passwd: that uid, gid 0 (the gid a
//     process started as root has, as gosu and `docker run --user` give),
//     home "/".
//   - USER a name not in /etc/passwd: an error.
//   - GROUP given: that gid (a name must be in /etc/group; a number need
//     not be), and no supplementary groups.
//   - GROUP not given: the supplementary groups are the groups of
//     /etc/group that list the user's passwd name as a member; none when
//     the user is not in /etc/passwd.
package userdb

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/infera/infera-exec/internal/boundedread"
)

// Spec is a user spec as given: USER[:GROUP], each a name or a number.
type Spec struct {
	User  string
	Group string // "" when no group was given
}

func (s Spec) String() string {
	if s.Group == "" {
		return s.User
	}
	return s.User + ":" + s.Group
}

// maxID is the largest id a process can take: (uid_t)-1 means "unchanged"
// to the kernel, so it is no id.
const maxID = 1<<32 - 2

// ParseSpec reads USER[:GROUP]. Each part is a name or a decimal id;
// neither may be empty, and a number must be an id the kernel can set.
func ParseSpec(s string) (Spec, error) {
	u, g, hasGroup := strings.Cut(s, ":")
	if u == "" {
		return Spec{}, fmt.Errorf("%q: no user before the colon; give UID[:GID] or NAME[:GROUP], e.g. 1000:1000", s)
	}
	if hasGroup && g == "" {
		return Spec{}, fmt.Errorf("%q: nothing after the colon; give UID:GID, or the UID alone", s)
	}
	for _, part := range []string{u, g} {
		if part == "" {
			continue
		}
		if strings.ContainsAny(part, ": \t\n") {
			return Spec{}, fmt.Errorf("%q: %q is neither a name nor a number", s, part)
		}
		if isNumber(part) {
			if _, err := id(part); err != nil {
				return Spec{}, fmt.Errorf("%q: %v", s, err)
			}
		} else if part[0] == '-' || part[0] == '+' {
			return Spec{}, fmt.Errorf("%q: %q is not an id (ids are 0 to %d)", s, part, maxID)
		}
	}
	return Spec{User: u, Group: g}, nil
}

func isNumber(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

func id(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > maxID {
		return 0, fmt.Errorf("%s is not an id (ids are 0 to %d)", s, maxID)
	}
	return int(n), nil
}

// Identity is what a spec resolves to: the credentials the worker gets.
type Identity struct {
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Groups []int  `json:"groups"` // supplementary groups; empty: none (setgroups with an empty list)
	Home   string `json:"home"`
	Name   string `json:"name,omitempty"`  // the passwd entry's name; "" when the user is not in /etc/passwd
	Group  string `json:"group,omitempty"` // the group entry's name for GID, when /etc/group has one
}

// passwdEntry is one line of /etc/passwd, groupEntry one of /etc/group.
type passwdEntry struct {
	name     string
	uid, gid int
	home     string
}

type groupEntry struct {
	name    string
	gid     int
	members []string
}

// parsePasswd reads passwd(5) lines: name:password:uid:gid:gecos:home:shell.
// Blank lines, comments and lines that are not seven fields with numeric
// ids (NIS "+" lines, a torn line) are skipped, as runc skips them.
func parsePasswd(b []byte) []passwdEntry {
	var out []passwdEntry
	for _, line := range lines(b) {
		f := strings.Split(line, ":")
		if len(f) != 7 || f[0] == "" {
			continue
		}
		uid, err1 := id(f[2])
		gid, err2 := id(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, passwdEntry{name: f[0], uid: uid, gid: gid, home: f[5]})
	}
	return out
}

// parseGroup reads group(5) lines: name:password:gid:member,member.
func parseGroup(b []byte) []groupEntry {
	var out []groupEntry
	for _, line := range lines(b) {
		f := strings.Split(line, ":")
		if len(f) != 4 || f[0] == "" {
			continue
		}
		gid, err := id(f[2])
		if err != nil {
			continue
		}
		var members []string
		for _, m := range strings.Split(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				members = append(members, m)
			}
		}
		out = append(out, groupEntry{name: f[0], gid: gid, members: members})
	}
	return out
}

func lines(b []byte) []string {
	var out []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		s := strings.TrimRight(string(l), "\r")
		if strings.TrimSpace(s) == "" || strings.HasPrefix(strings.TrimSpace(s), "#") {
			continue
		}
		out = append(out, s)
	}
	return out
}

// ErrUnknown is wrapped when a spec names a user or group by a name the
// files do not have.
var ErrUnknown = errors.New("not found")

// Resolve is what spec names, by the rules of the package comment, given
// the contents of /etc/passwd and /etc/group (nil: the file is absent).
func Resolve(spec Spec, passwd, group []byte) (Identity, error) {
	users, groups := parsePasswd(passwd), parseGroup(group)
	who := Identity{Home: "/", Groups: []int{}}
	found := false
	for _, u := range users {
		if u.name == spec.User || (isNumber(spec.User) && sameID(u.uid, spec.User)) {
			who.UID, who.GID, who.Home, who.Name, found = u.uid, u.gid, u.home, u.name, true
			break
		}
	}
	if !found {
		if !isNumber(spec.User) {
			return Identity{}, fmt.Errorf("user %q: %w in /etc/passwd; give a uid, or a name the image's /etc/passwd has", spec.User, ErrUnknown)
		}
		who.UID, _ = id(spec.User)
	}
	if who.Home == "" {
		who.Home = "/"
	}
	if spec.Group != "" {
		gfound := false
		for _, g := range groups {
			if g.name == spec.Group || (isNumber(spec.Group) && sameID(g.gid, spec.Group)) {
				who.GID, who.Group, gfound = g.gid, g.name, true
				break
			}
		}
		if !gfound {
			if !isNumber(spec.Group) {
				return Identity{}, fmt.Errorf("group %q: %w in /etc/group; give a gid, or a name the image's /etc/group has", spec.Group, ErrUnknown)
			}
			who.GID, _ = id(spec.Group)
		}
		return who, nil
	}
	for _, g := range groups {
		if g.gid == who.GID && who.Group == "" {
			who.Group = g.name
		}
		if who.Name == "" {
			continue
		}
		for _, m := range g.members {
			if m == who.Name && !contains(who.Groups, g.gid) {
				who.Groups = append(who.Groups, g.gid)
			}
		}
	}
	return who, nil
}

func sameID(n int, s string) bool {
	v, err := id(s)
	return err == nil && v == n
}

func contains(l []int, n int) bool {
	for _, v := range l {
		if v == n {
			return true
		}
	}
	return false
}

// Files reads root's etc/passwd and etc/group, each within
// boundedread.SmallText; a file that is absent is nil, not an error.
func Files(root string) (passwd, group []byte, err error) {
	read := func(name string) ([]byte, error) {
		b, err := boundedread.File(filepath.Join(root, "etc", name), boundedread.SmallText)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return b, err
	}
	if passwd, err = read("passwd"); err != nil {
		return nil, nil, err
	}
	if group, err = read("group"); err != nil {
		return nil, nil, err
	}
	return passwd, group, nil
}
