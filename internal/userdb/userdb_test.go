package userdb

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Debian-like /etc/passwd and /etc/group with the cases that matter:
// a user in supplementary groups, one in none, a home left empty, and
// lines runc skips.
const passwd = `root:x:0:0:root:/root:/bin/bash
# a comment
+nisuser::::::
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
torn:x:12
badid:x:abc:1:bad:/nowhere:/bin/sh
app:x:1000:1000:App,,,:/home/app:/bin/bash
app:x:1001:1001:second entry, never used:/home/app2:/bin/bash
lonely:x:1002:1002::/home/lonely:/bin/sh
nohome:x:1003:100:::/bin/sh
1234:x:1500:1500:a numeric name:/home/n:/bin/sh
`

const group = `root:x:0:
daemon:x:1:
video:x:44:app,lonely-not
render:x:993: app , other
app:x:1000:
users:x:100:nohome
staff:x:50:app
video2:x:44:app
`

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		spec       string
		want       Identity
		err        string
		noPasswd   bool
		emptyGroup bool
	}{
		{spec: "app", want: Identity{UID: 1000, GID: 1000, Groups: []int{44, 993, 50}, Home: "/home/app", Name: "app", Group: "app"}},
		{spec: "1000", want: Identity{UID: 1000, GID: 1000, Groups: []int{44, 993, 50}, Home: "/home/app", Name: "app", Group: "app"}},
		{spec: "01000", want: Identity{UID: 1000, GID: 1000, Groups: []int{44, 993, 50}, Home: "/home/app", Name: "app", Group: "app"}},
		// An explicit group: that gid and no supplementary groups, as gosu.
		{spec: "1000:1000", want: Identity{UID: 1000, GID: 1000, Groups: []int{}, Home: "/home/app", Name: "app", Group: "app"}},
		{spec: "app:video", want: Identity{UID: 1000, GID: 44, Groups: []int{}, Home: "/home/app", Name: "app", Group: "video"}},
		{spec: "app:4242", want: Identity{UID: 1000, GID: 4242, Groups: []int{}, Home: "/home/app", Name: "app"}},
		{spec: "lonely", want: Identity{UID: 1002, GID: 1002, Groups: []int{}, Home: "/home/lonely", Name: "lonely"}},
		{spec: "nohome", want: Identity{UID: 1003, GID: 100, Groups: []int{100}, Home: "/", Name: "nohome", Group: "users"}},
		// A uid the image does not know: gid 0 unless given, no groups, home /.
		{spec: "4000", want: Identity{UID: 4000, GID: 0, Groups: []int{}, Home: "/", Group: "root"}},
		{spec: "4000:4000", want: Identity{UID: 4000, GID: 4000, Groups: []int{}, Home: "/"}},
		{spec: "4000:staff", want: Identity{UID: 4000, GID: 50, Groups: []int{}, Home: "/", Group: "staff"}},
		// A name matches before a uid: the entry named "1234" (uid 1500).
		{spec: "1234", want: Identity{UID: 1500, GID: 1500, Groups: []int{}, Home: "/home/n", Name: "1234"}},
		{spec: "0", want: Identity{UID: 0, GID: 0, Groups: []int{}, Home: "/root", Name: "root", Group: "root"}},
		{spec: "1000:1000", noPasswd: true, want: Identity{UID: 1000, GID: 1000, Groups: []int{}, Home: "/", Group: "app"}},
		{spec: "1000", noPasswd: true, emptyGroup: true, want: Identity{UID: 1000, GID: 0, Groups: []int{}, Home: "/"}},
		{spec: "nobody-here", err: `user "nobody-here": not found in /etc/passwd`},
		{spec: "app:nogroup", err: `group "nogroup": not found in /etc/group`},
		{spec: "app", noPasswd: true, err: `user "app": not found in /etc/passwd`},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			s, err := ParseSpec(tc.spec)
			require.NoError(t, err)
			p, g := []byte(passwd), []byte(group)
			if tc.noPasswd {
				p = nil
			}
			if tc.emptyGroup {
				g = nil
			}
			got, err := Resolve(s, p, g)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				assert.ErrorIs(t, err, ErrUnknown)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
		err  string
	}{
		{in: "1000", want: Spec{User: "1000"}},
		{in: "1000:1000", want: Spec{User: "1000", Group: "1000"}},
		{in: "app:video", want: Spec{User: "app", Group: "video"}},
		{in: "4294967294", want: Spec{User: "4294967294"}},
		{in: "", err: "no user before the colon"},
		{in: ":1000", err: "no user before the colon"},
		{in: "1000:", err: "nothing after the colon"},
		{in: "1000:1000:1", err: `"1000:1" is neither a name nor a number`},
		{in: "4294967295", err: "4294967295 is not an id"},
		{in: "99999999999999999999", err: "is not an id"},
		{in: "-1", err: `"-1" is not an id`},
		{in: "1000:+5", err: `"+5" is not an id`},
		{in: "a b", err: "neither a name nor a number"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSpec(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.in, got.String())
		})
	}
}

func TestFilesReadsWhatIsThereAndNothingElse(t *testing.T) {
	root := t.TempDir()
	p, g, err := Files(root)
	require.NoError(t, err, "absent files are not an error")
	assert.Nil(t, p)
	assert.Nil(t, g)

	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte(passwd), 0o644))
	p, g, err = Files(root)
	require.NoError(t, err)
	assert.Equal(t, passwd, string(p))
	assert.Nil(t, g)

	require.NoError(t, os.Mkdir(filepath.Join(root, "etc", "group"), 0o755))
	_, _, err = Files(root)
	require.ErrorContains(t, err, filepath.Join(root, "etc", "group"), "a directory where a file is expected is refused, by path")
}
