package patches

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/fileid"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/patches/patchdef"
)

// forEachCPython runs f for Debian's python3 and pyenv's 3.10 to 3.13,
// each as a subtest; an absent one is skipped with what installs it (a
// failure under INFERA_REQUIRE_FIXTURES=1).
func forEachCPython(t *testing.T, f func(t *testing.T, exe string)) {
	for _, c := range fixture.CPythons() {
		t.Run(c.Name, func(t *testing.T) {
			if c.Absent != "" {
				if os.Getenv("INFERA_REQUIRE_FIXTURES") == "1" {
					t.Fatal(c.Absent)
				}
				t.Skip(c.Absent)
			}
			f(t, c.Exe)
		})
	}
}

// prefixLayout is a package demo whose module a.f returns "old", in a
// PYTHONPATH directory, with a payload patch that makes it return "new",
// and a bytecode cache prefix beside them.
func prefixLayout(t *testing.T) (site, prefix, payload string) {
	base := t.TempDir()
	site, prefix, payload = filepath.Join(base, "site"), filepath.Join(base, "pyc"), filepath.Join(base, "payload")
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	write(t, filepath.Join(site, "demo/a.py"), "def f():\n    return 'old'\n")
	write(t, filepath.Join(payload, "patches/demo/fix.toml"), "id = \"demo-fix\"\nsummary = \"s\"\npackage = \"demo\"\ndistribution = \"demo\"\n[[edit]]\nfile = \"a.py\"\nanchor = \"    return 'old'\\n\"\nreplacement = \"    return 'new'\\n\"\n")
	return site, prefix, payload
}

// pyRun runs exe with args, env (NAME=VALUE) and PYTHONDONTWRITEBYTECODE
// unset, and returns its stdout.
func pyRun(t *testing.T, env []string, exe string, args ...string) string {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Dir = "/"
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}, env...)
	out, err := cmd.Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "%s %v: %s", exe, args, stderr)
	return strings.TrimSpace(string(out))
}

// compileUnchecked has the interpreter itself, with the prefix set,
// import demo.a and then write its bytecode as unchecked-hash (PEP 552)
// where it reads it: never revalidated against the source. It returns
// that path.
func compileUnchecked(t *testing.T, exe, site string, env []string, opts ...string) string {
	t.Helper()
	prog := "import py_compile, importlib.util, demo.a as m\n" +
		"c = importlib.util.cache_from_source(m.__file__)\n" +
		"py_compile.compile(m.__file__, cfile=c, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)\n" +
		"print(c)\n"
	return pyRun(t, append(env, "PYTHONPATH="+site), exe, append(opts, "-c", prog)...)
}

// A worker whose interpreter keeps its bytecode under a prefix
// (PYTHONPYCACHEPREFIX, -X pycache_prefix) finds there, for the edited
// module, unchecked-hash bytecode of the unpatched source, which it would
// run forever. The probe reports the prefix, the patch step removes that
// bytecode as it removes __pycache__'s, and the worker's interpreter,
// started as the worker starts, then runs the patched code: the
// "applied" is what runs. On every CPython of the machine, each way the
// prefix is given, relative too.
func TestPycachePrefixBytecodeOfThePatchedModuleGoes(t *testing.T) {
	forEachCPython(t, func(t *testing.T, exe string) {
		for _, how := range []string{"env", "-X", "env relative"} {
			t.Run(how, func(t *testing.T) {
				site, prefix, payload := prefixLayout(t)
				given := prefix
				cwd := "/"
				if how == "env relative" {
					cwd = filepath.Dir(prefix)
					given = filepath.Base(prefix)
				}
				var env, opts []string
				switch how {
				case "-X":
					opts = []string{"-X", "pycache_prefix=" + prefix}
				default:
					env = []string{"PYTHONPYCACHEPREFIX=" + prefix}
				}
				stale := compileUnchecked(t, exe, site, env, opts...)
				require.True(t, strings.HasPrefix(stale, prefix+"/"), "the interpreter keeps the bytecode under the prefix: %s", stale)
				require.FileExists(t, stale)

				cfg, _, err := config.Load(envWith("PAYLOAD_ROOT", payload), "/nonexistent/bin/infera-exec", cwd, config.Flags{})
				require.NoError(t, err)
				wenv := envWith("PYTHONPATH", site)
				if how != "-X" {
					wenv.Set("PYTHONPYCACHEPREFIX", given)
				}
				var logs strings.Builder
				argv := append(append([]string{exe}, opts...), "-c", "import demo.a")
				out, err := Run(t.Context(), Input{Config: cfg, Python: exe, Env: wenv,
					Worker: &launch.Outcome{Cwd: cwd, Argv: argv, Path: exe},
					Log:    slog.New(slog.NewTextHandler(&logs, nil))})
				require.NoError(t, err, logs.String())
				assert.Equal(t, given, out.Location.PycachePrefix, "the probe reports sys.pycache_prefix")
				r := resultOf(t, out, "demo-fix")
				require.Equal(t, patchdef.Applied, r.State, r.Why)
				assert.Contains(t, r.Edits[0].PycsRemoved, stale)
				assert.NoFileExists(t, stale)

				// The worker's own interpreter, started as the worker is.
				got := pyRun(t, append(env, "PYTHONPATH="+site), exe, append(opts, "-c", "import demo.a; print(demo.a.f())")...)
				if how == "env relative" {
					cmd := exec.Command(exe, "-c", "import demo.a; print(demo.a.f())")
					cmd.Dir, cmd.Env = cwd, []string{"PATH=/usr/bin:/bin", "PYTHONPATH=" + site, "PYTHONPYCACHEPREFIX=" + given}
					b, err := cmd.Output()
					require.NoError(t, err)
					got = strings.TrimSpace(string(b))
				}
				assert.Equal(t, "new", got, "the patched code runs")
			})
		}
	})
}

// Bytecode in the prefix tree that the patch step must not remove (the
// tree reached through a link below the prefix, a directory another uid
// owns or can write) and that the worker would run instead of the
// patched source makes the patch shadowed, not applied; the real
// interpreter confirms it runs the unpatched code there.
func TestPycachePrefixBytecodeThatStaysIsNotCalledApplied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root (the tests run as root in CI)")
	}
	forEachCPython(t, func(t *testing.T, exe string) {
		for _, how := range []string{"link", "other owner", "group-writable"} {
			t.Run(how, func(t *testing.T) {
				site, prefix, payload := prefixLayout(t)
				env := []string{"PYTHONPYCACHEPREFIX=" + prefix}
				stale := compileUnchecked(t, exe, site, env)
				dir := filepath.Dir(stale)
				switch how {
				case "link": // prefix/<site>/demo is a link to a copy elsewhere
					elsewhere := filepath.Join(t.TempDir(), "demo")
					require.NoError(t, os.Rename(dir, elsewhere))
					require.NoError(t, os.Symlink(elsewhere, dir))
				case "other owner":
					require.NoError(t, os.Chown(dir, 12345, 12345))
				case "group-writable":
					require.NoError(t, os.Chmod(dir, 0o775))
				}
				cfg, _, err := config.Load(envWith("PAYLOAD_ROOT", payload), "/nonexistent/bin/infera-exec", "/", config.Flags{})
				require.NoError(t, err)
				var logs strings.Builder
				out, err := Run(t.Context(), Input{Config: cfg, Python: exe, Env: envWith("PYTHONPATH", site, "PYTHONPYCACHEPREFIX", prefix),
					Worker: &launch.Outcome{Cwd: "/", Argv: []string{exe, "-c", "import demo.a"}, Path: exe},
					Log:    slog.New(slog.NewTextHandler(&logs, nil))})
				require.NoError(t, err, logs.String())
				r := resultOf(t, out, "demo-fix")
				assert.Equal(t, patchdef.Shadowed, r.State, r.Why)
				assert.Contains(t, r.Why, "stale bytecode")
				assert.Contains(t, logs.String(), "not in force")
				assert.Equal(t, "old", pyRun(t, append(env, "PYTHONPATH="+site), exe, "-c", "import demo.a; print(demo.a.f())"),
					"the interpreter runs the stale bytecode the result names")
			})
		}
	})
}

// The probe reports sys.pycache_prefix as the worker's interpreter holds
// it: from PYTHONPYCACHEPREFIX (not under -E or -I) or -X pycache_prefix
// (which wins), none otherwise.
func TestProbeReportsThePycachePrefix(t *testing.T) {
	forEachCPython(t, func(t *testing.T, exe string) {
		for _, c := range []struct {
			env     string
			options []string
			want    string
		}{
			{"", nil, ""},
			{"/e", nil, "/e"},
			{"/e", []string{"-E"}, ""},
			{"/e", []string{"-I"}, ""},
			{"/e", []string{"-X", "pycache_prefix=/x"}, "/x"},
			{"", []string{"-X", "pycache_prefix=rel"}, "rel"},
		} {
			env := envWith()
			if c.env != "" {
				env.Set("PYTHONPYCACHEPREFIX", c.env)
			}
			loc, err := (&engineLocator{Python: exe, Env: env, Dir: "/", Options: c.options}).run(t.Context(), []string{"json"})
			require.NoError(t, err)
			assert.Equal(t, c.want, loc.PycachePrefix, "PYTHONPYCACHEPREFIX=%q %v", c.env, c.options)
		}
	})
}

// The prefix tree's trust rules, over owners and mode bits of the
// directory holding the bytecode and of the bytecode file: a .pyc is
// believed only when a trusted owner (root, infera-exec's uid, the
// worker's) has it and nobody else can write it, in a directory nobody
// else can write; an unchecked-hash one is removed when the directory is
// infera-exec's to change, and otherwise stays and is named (stuck).
func TestPycachePrefixTrustRules(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root (the tests run as root in CI)")
	}
	hdr := func(flags byte) string {
		return "\x00\x00\r\n" + string([]byte{flags, 0, 0, 0}) + strings.Repeat("\x00", 8)
	}
	const worker = 4242
	for _, c := range []struct {
		name           string
		dirUID         int
		dirMode        os.FileMode
		sticky         bool
		pycUID         int
		pycMode        os.FileMode
		flags          byte
		all            bool
		removed, stuck bool
		stuckSays      string
		matching       bool // a timestamp header with the source's mtime and size
		dry, link      bool // a dry run; the .pyc a link to a file elsewhere
	}{
		{name: "matching timestamp pyc, not written", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o644, flags: 0, matching: true},
		{name: "matching timestamp pyc, written", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o644, flags: 0, matching: true, all: true, removed: true},
		{name: "unchecked pyc, dry run", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o644, flags: 0b01, dry: true, stuck: true, stuckSays: "unchecked-hash"},
		{name: "checked pyc, dry run", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o644, flags: 0b11, dry: true},
		{name: "a link named like the pyc", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o644, flags: 0b11, link: true, removed: true},
		{name: "root's dir, unchecked pyc", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o644, flags: 0b01, removed: true},
		{name: "worker's dir, unchecked pyc", dirUID: worker, dirMode: 0o755, pycUID: worker, pycMode: 0o644, flags: 0b01, removed: true},
		{name: "root's dir, timestamp pyc, not written", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o644, flags: 0},
		{name: "root's dir, timestamp pyc, written", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o644, flags: 0, all: true, removed: true},
		{name: "root's dir, checked pyc", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o644, flags: 0b11},
		{name: "another uid's pyc", dirUID: 0, dirMode: 0o755, pycUID: 12345, pycMode: 0o644, flags: 0b11, removed: true},
		{name: "group-writable pyc", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o664, flags: 0b11, removed: true},
		{name: "others-writable pyc", dirUID: 0, dirMode: 0o755, pycUID: 0, pycMode: 0o646, flags: 0, removed: true},
		{name: "another uid's dir", dirUID: 12345, dirMode: 0o755, pycUID: 0, pycMode: 0o644, flags: 0b11, stuck: true, stuckSays: "owned by uid 12345"},
		{name: "group-writable dir", dirUID: 0, dirMode: 0o775, pycUID: 0, pycMode: 0o644, flags: 0b11, stuck: true, stuckSays: "mode 0775"},
		{name: "others-writable dir", dirUID: 0, dirMode: 0o757, pycUID: 0, pycMode: 0o644, flags: 0b11, stuck: true, stuckSays: "mode 0757"},
		{name: "sticky others-writable dir", dirUID: 0, dirMode: 0o777, sticky: true, pycUID: 0, pycMode: 0o644, flags: 0b11, stuck: true, stuckSays: "mode 1777"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "pyc")
			src := filepath.Join(t.TempDir(), "demo", "a.py")
			write(t, src, "x = 1\n")
			dir := filepath.Join(root, filepath.Dir(src))
			pyc := filepath.Join(dir, "a.cpython-312.pyc")
			var srcT onDisk
			content := hdr(c.flags)
			if c.matching {
				id, ok := fileid.Stat(src)
				require.True(t, ok)
				srcT = onDisk{verified: true, id: id}
				var stamp [8]byte
				binary.LittleEndian.PutUint32(stamp[:4], uint32(id.Mtime/1e9))
				binary.LittleEndian.PutUint32(stamp[4:], uint32(id.Size))
				content = content[:8] + string(stamp[:])
			}
			file := pyc
			if c.link {
				file = filepath.Join(t.TempDir(), "elsewhere.pyc")
			}
			write(t, file, content)
			require.NoError(t, os.Chmod(file, c.pycMode))
			require.NoError(t, os.Chown(file, c.pycUID, c.pycUID))
			if c.link {
				require.NoError(t, os.MkdirAll(dir, 0o755))
				require.NoError(t, os.Symlink(file, pyc))
			}
			mode := c.dirMode
			if c.sticky {
				mode |= os.ModeSticky
			}
			require.NoError(t, os.Chmod(dir, mode))
			require.NoError(t, os.Chown(dir, c.dirUID, c.dirUID))
			pp := pycachePrefix{Root: root, Owner: worker}
			removed, stuck := pp.check(src, "a.py", c.all, c.dry, srcT)
			if c.removed {
				assert.Equal(t, []string{pyc}, removed)
				assert.NoFileExists(t, pyc)
			} else {
				assert.Empty(t, removed)
				assert.FileExists(t, pyc)
			}
			if c.link {
				assert.FileExists(t, file, "removal never follows the link")
			}
			if c.stuck {
				require.Len(t, stuck, 1)
				assert.Contains(t, stuck[0], c.stuckSays)
			} else {
				assert.Empty(t, stuck)
			}
		})
	}
}

// The directories on the way to the prefix, over owners and bits: one
// that another uid owns, or can write without the sticky bit, could
// swap the tree; a sticky one (as /tmp) cannot swap the entries of
// trusted owners. A link on the way is followed only when a trusted
// owner has it.
func TestPycachePrefixAncestors(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root (the tests run as root in CI)")
	}
	for _, c := range []struct {
		name    string
		uid     int
		mode    os.FileMode
		link    int // -1: no link; else the link's owner
		problem string
	}{
		{"root 0755", 0, 0o755, -1, ""},
		{"root 1777", 0, 0o777 | os.ModeSticky, -1, ""},
		{"root 0777", 0, 0o777, -1, "mode 0777"},
		{"root 0775", 0, 0o775, -1, "mode 0775"},
		{"other uid 0755", 12345, 0o755, -1, "owned by uid 12345"},
		{"worker 0755", 4242, 0o755, -1, ""},
		{"root's link", 0, 0o755, 0, ""},
		{"another uid's link", 0, 0o755, 12345, "link owned by uid 12345"},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := filepath.Join(t.TempDir(), "up")
			root := filepath.Join(up, "pyc")
			src := filepath.Join(t.TempDir(), "a.py")
			write(t, src, "x = 1\n")
			pyc := filepath.Join(root, filepath.Dir(src), "a.cpython-312.pyc")
			write(t, pyc, "\x00\x00\r\n\x01\x00\x00\x00"+strings.Repeat("\x00", 8)) // unchecked-hash
			require.NoError(t, os.Chmod(up, c.mode))
			require.NoError(t, os.Chown(up, c.uid, c.uid))
			given := root
			if c.link >= 0 {
				given = filepath.Join(t.TempDir(), "link")
				require.NoError(t, os.Symlink(root, given))
				require.NoError(t, os.Lchown(given, c.link, c.link))
			}
			removed, stuck := pycachePrefix{Root: given, Owner: 4242}.check(src, "a.py", false, false, onDisk{})
			if c.problem == "" {
				assert.Empty(t, stuck)
				assert.Len(t, removed, 1)
				assert.NoFileExists(t, pyc)
				return
			}
			assert.Empty(t, removed)
			require.Len(t, stuck, 1)
			assert.Contains(t, stuck[0], c.problem)
			assert.FileExists(t, pyc)
		})
	}
}

// pycShadows over PEP 552's flags and a timestamp header's fields.
func TestPycShadows(t *testing.T) {
	src := onDisk{verified: true, id: identity{Mtime: 1_700_000_000_500_000_000, Size: 77}}
	stamp := uint64(1_700_000_000) | uint64(77)<<32
	for _, c := range []struct {
		flags uint32
		stamp uint64
		ok    bool
		src   onDisk
		want  string
	}{
		{0b01, 0, true, onDisk{}, "unchecked-hash"},
		{0b11, 0, true, src, ""},
		{0, stamp, true, src, "mtime and size match"},
		{0, stamp + 1, true, src, ""},
		{0, stamp + 1<<32, true, src, ""},
		{0, stamp, true, onDisk{id: src.id}, ""}, // not verified: no claim about it
		{0, stamp, false, src, ""},
	} {
		got := pycShadows(c.flags, c.stamp, c.ok, c.src)
		if c.want == "" {
			assert.Empty(t, got, "%+v", c)
		} else {
			assert.Contains(t, got, c.want, fmt.Sprintf("%+v", c))
		}
	}
}

// A restart keeps nothing of the prefix tree: the record does not follow
// it, so a run with a prefix is not recorded, and the next start checks
// the tree again. Unchecked-hash bytecode of the unpatched source that
// comes back into the prefix between two starts (a layer or another
// process that keeps it) is removed by the second start too, and the
// worker's interpreter runs the patched code.
func TestPycachePrefixCheckedOnEveryStart(t *testing.T) {
	forEachCPython(t, func(t *testing.T, exe string) {
		site, prefix, payload := prefixLayout(t)
		env := []string{"PYTHONPYCACHEPREFIX=" + prefix}
		stale := compileUnchecked(t, exe, site, env)
		kept, err := os.ReadFile(stale)
		require.NoError(t, err)
		state := t.TempDir()
		start := func() Result {
			cfg, _, err := config.Load(envWith("PAYLOAD_ROOT", payload), "/nonexistent/bin/infera-exec", "/", config.Flags{})
			require.NoError(t, err)
			var logs strings.Builder
			out, err := Run(t.Context(), Input{Config: cfg, Python: exe, Env: envWith("PYTHONPATH", site, "PYTHONPYCACHEPREFIX", prefix), StateDir: state,
				Worker: &launch.Outcome{Cwd: "/", Argv: []string{exe, "-c", "import demo.a"}, Path: exe},
				Log:    slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err, logs.String())
			return resultOf(t, out, "demo-fix")
		}
		r := start()
		require.Equal(t, "applied", r.Action, r.Why)
		require.NoFileExists(t, stale)
		require.NoError(t, os.WriteFile(stale, kept, 0o644)) // it comes back
		r = start()
		assert.Equal(t, patchdef.Applied, r.State, r.Why)
		assert.False(t, r.Recorded, "not taken from the record")
		assert.Contains(t, r.Edits[0].PycsRemoved, stale)
		assert.Equal(t, "new", pyRun(t, append(env, "PYTHONPATH="+site), exe, "-c", "import demo.a; print(demo.a.f())"))
	})
}
