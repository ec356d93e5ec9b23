package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/userdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dropChildEnv makes the test binary a start that drops to the user it
// names (USER[:GROUP]) and then runs a shell that prints its own
// /proc/self/status and HOME: exec mode, or init mode when
// DROPPROC_TEST_INIT=1. DROPPROC_TEST_ROOT is the root whose etc/passwd
// and etc/group name the user.
const dropChildEnv = "DROPPROC_TEST_SPEC"

func dropChild(spec string) int {
	s, err := userdb.ParseSpec(spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 125
	}
	d, err := planDrop(config.Config{User: &s, UserFrom: "--user"}, os.Getenv("DROPPROC_TEST_ROOT"), os.Geteuid())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 125
	}
	o := &Outcome{Path: "/bin/sh", Argv: []string{"sh", "-c", `grep -E '^(Uid|Gid|Groups|CapEff|CapPrm):' /proc/self/status; echo "HOME=$HOME"`}, Cwd: "/", User: d}
	if os.Getenv("DROPPROC_TEST_INIT") == "1" {
		o.Init = config.InitChild
	}
	env := append(os.Environ(), "HOME="+d.Home)
	code, err := o.Start(env, logging.New(os.Stderr, false, false, nil))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return code
}

// runDrop starts the test binary as root with supplementary groups 4 and
// 27 (so that a drop that left them would show), dropping to spec.
func runDrop(t *testing.T, spec string, init bool, root string) (Creds, string, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the drop to another user needs root: run the tests as root (make test does)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), dropChildEnv+"="+spec, "DROPPROC_TEST_ROOT="+root)
	if init {
		cmd.Env = append(cmd.Env, "DROPPROC_TEST_INIT=1")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{4, 27}}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "stderr: %s", stderr.String())
	c, err := ParseStatus(out)
	require.NoError(t, err, "worker said: %s", out)
	home := ""
	for _, l := range strings.Split(string(out), "\n") {
		if h, ok := strings.CutPrefix(l, "HOME="); ok {
			home = h
		}
	}
	return c, home, stderr.String()
}

func imageRoot(t *testing.T) string {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc", "group"), []byte("root:x:0:\nvideo:x:44:app\nrender:x:993:app\napp:x:1000:\n"), 0o644))
	return root
}

func TestDropRunsTheWorkerAsTheUserOnly(t *testing.T) {
	root := imageRoot(t)
	for _, tc := range []struct {
		name, spec string
		init       bool
		uid, gid   int
		groups     []int
		home       string
	}{
		{"exec 1000:1000", "1000:1000", false, 1000, 1000, []int{}, "/home/app"},
		{"init 1000:1000", "1000:1000", true, 1000, 1000, []int{}, "/home/app"},
		{"exec app: its groups from /etc/group", "app", false, 1000, 1000, []int{44, 993}, "/home/app"},
		{"init app: its groups from /etc/group", "app", true, 1000, 1000, []int{44, 993}, "/home/app"},
		{"exec an unknown uid", "4321", false, 4321, 0, []int{}, "/"},
		{"init an unknown uid and gid", "4321:4321", true, 4321, 4321, []int{}, "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, home, stderr := runDrop(t, tc.spec, tc.init, root)
			assert.Equal(t, [4]int{tc.uid, tc.uid, tc.uid, tc.uid}, c.UID)
			assert.Equal(t, [4]int{tc.gid, tc.gid, tc.gid, tc.gid}, c.GID)
			assert.Equal(t, tc.groups, c.Groups, "the root's groups 4 and 27 are gone")
			assert.Zero(t, c.CapEff)
			assert.Zero(t, c.CapPrm)
			assert.Equal(t, tc.home, home)
			if !tc.init {
				assert.Contains(t, stderr, "verified")
			}
		})
	}
}

func TestDropIsRefusedWhenNotRoot(t *testing.T) {
	s := userdb.Spec{User: "1000", Group: "1000"}
	_, err := planDrop(config.Config{User: &s, UserFrom: "INFERA_EXEC_USER"}, imageRoot(t), 1000)
	var nr *NotRootError
	require.True(t, errors.As(err, &nr), "got %v", err)
	assert.Equal(t, 77, nr.ExitCode())
	assert.Contains(t, err.Error(), "INFERA_EXEC_USER 1000:1000: infera-exec runs as uid 1000, not root")
	// The text line is the brief, within the bound; the whole of it is
	// the record's detail.
	msg, attrs := logging.ErrorRecord(err)
	assert.Equal(t, "INFERA_EXEC_USER 1000:1000: infera-exec runs as uid 1000, not root, so it cannot change user; run the container as root, or drop INFERA_EXEC_USER", msg)
	assert.LessOrEqual(t, len(logging.Prefix+"error: "+msg), logging.TextBound)
	assert.Equal(t, []any{"detail", err.Error()}, attrs)

	d, err := planDrop(config.Config{}, imageRoot(t), 1000)
	assert.NoError(t, err, "no user asked: nothing to refuse")
	assert.Nil(t, d)
}

func TestDropOfAnUnknownNameIsAConfigError(t *testing.T) {
	s := userdb.Spec{User: "nobody-here"}
	_, err := planDrop(config.Config{User: &s, UserFrom: "--user"}, imageRoot(t), 0)
	var ce *config.Error
	require.True(t, errors.As(err, &ce), "got %v", err)
	assert.Contains(t, err.Error(), `--user nobody-here: user "nobody-here": not found in /etc/passwd`)
}

func TestVerifyRefusesEveryPartialDrop(t *testing.T) {
	d := &Drop{Spec: "1000:1000", From: "--user", Identity: userdb.Identity{UID: 1000, GID: 1000, Groups: []int{44}, Home: "/"}}
	good := Creds{UID: [4]int{1000, 1000, 1000, 1000}, GID: [4]int{1000, 1000, 1000, 1000}, Groups: []int{44}}
	require.NoError(t, d.Verify(good, "test"))
	for _, tc := range []struct {
		name   string
		break_ func(c *Creds)
		want   string
	}{
		{"real uid", func(c *Creds) { c.UID[0] = 0 }, "real uid 0"},
		{"effective uid", func(c *Creds) { c.UID[1] = 0 }, "effective uid 0"},
		{"saved uid", func(c *Creds) { c.UID[2] = 0 }, "saved uid 0"},
		{"fs uid", func(c *Creds) { c.UID[3] = 0 }, "filesystem uid 0"},
		{"real gid", func(c *Creds) { c.GID[0] = 0 }, "real gid 0"},
		{"effective gid", func(c *Creds) { c.GID[1] = 0 }, "effective gid 0"},
		{"saved gid", func(c *Creds) { c.GID[2] = 0 }, "saved gid 0"},
		{"fs gid", func(c *Creds) { c.GID[3] = 0 }, "filesystem gid 0"},
		{"a group left", func(c *Creds) { c.Groups = []int{0, 44} }, "supplementary groups [0 44]"},
		{"a group missing", func(c *Creds) { c.Groups = []int{} }, "supplementary groups []"},
		{"an effective capability", func(c *Creds) { c.CapEff = 1 << 21 }, "capabilities left"},
		{"a permitted capability", func(c *Creds) { c.CapPrm = 1 }, "capabilities left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			c.Groups = append([]int{}, good.Groups...)
			tc.break_(&c)
			err := d.Verify(c, "the worker")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 77, err.(*DropError).ExitCode())
		})
	}
}

func TestParseStatus(t *testing.T) {
	const status = "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t44 993 \nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t00000000a80425fb\n"
	c, err := ParseStatus([]byte(status))
	require.NoError(t, err)
	assert.Equal(t, Creds{UID: [4]int{1000, 1000, 1000, 1000}, GID: [4]int{1000, 1000, 1000, 1000}, Groups: []int{44, 993}, CapEff: 0xa80425fb}, c)

	c, err = ParseStatus([]byte(strings.Replace(status, "Groups:\t44 993 \n", "Groups:\t\n", 1)))
	require.NoError(t, err)
	assert.Equal(t, []int{}, c.Groups)

	for _, bad := range []string{
		strings.Replace(status, "Uid:\t1000\t1000\t1000\t1000\n", "", 1),
		strings.Replace(status, "Uid:\t1000\t1000\t1000\t1000", "Uid:\t1000\t1000", 1),
		strings.Replace(status, "Gid:\t1000", "Gid:\tx", 1),
		strings.Replace(status, "Groups:\t44", "Groups:\tx", 1),
		strings.Replace(status, "CapEff:\t00000000a80425fb", "CapEff:\tzz", 1),
		strings.Replace(status, "CapPrm:\t0000000000000000\n", "", 1),
	} {
		_, err := ParseStatus([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
}
