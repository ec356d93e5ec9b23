package patches

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/testsupport"
	"github.com/infera/infera-exec/patches/commit"
	"github.com/infera/infera-exec/patches/patchdef"
)

// The test binary doubles as a patching process for the crash and
// concurrency tests: INFERA_PATCHES_CHILD names a package directory;
// INFERA_PATCHES_DIE_AFTER_RENAMES=N makes it die right after its Nth
// rename, as a start killed between two files of a group;
// INFERA_PATCHES_STATE names a state directory, for the record;
// INFERA_PATCHES_HOLD_AFTER=N makes it say "held" on stderr after its Nth
// write step (a file staged, or a staged file renamed) and wait there to
// be killed. It says "go" on stderr as it starts patching.
func TestMain(m *testing.M) {
	if dir := os.Getenv("INFERA_PATCHES_CHILD"); dir != "" {
		if n, err := strconv.Atoi(os.Getenv("INFERA_PATCHES_HOLD_AFTER")); err == nil {
			var steps atomic.Int32
			hold := func() {
				if steps.Add(1) == int32(n) {
					os.Stderr.WriteString("held\n")
					time.Sleep(time.Hour) // not select{}: the runtime would end a process whose goroutines all block
				}
			}
			stage, rename := commit.Stage, commit.Rename
			commit.Stage = func(path, content string, was identity) (*atomicfile.Staged, error) {
				s, err := stage(path, content, was)
				hold()
				return s, err
			}
			commit.Rename = func(s *atomicfile.Staged) error {
				err := rename(s)
				hold()
				return err
			}
		}
		if n, err := strconv.Atoi(os.Getenv("INFERA_PATCHES_DIE_AFTER_RENAMES")); err == nil {
			renamed := 0
			commit.Rename = func(s *atomicfile.Staged) error {
				err := s.Commit()
				if renamed++; renamed == n {
					os.Exit(3) // no cleanup: the other staged files stay behind
				}
				return err
			}
		}
		loc := &Location{Packages: map[string]Package{"demo": {Name: "demo", Found: true, Dir: dir, Dirs: []string{dir}}}}
		opt := options{LockTimeout: 30 * time.Second}
		if state := os.Getenv("INFERA_PATCHES_STATE"); state != "" {
			set := crashSet()
			set.Digest = "crash-defs"
			loc.Fingerprint, opt.StateDir, opt.PyMinor = "crash-probe", state, 12
			os.Stderr.WriteString("go\n")
			json.NewEncoder(os.Stdout).Encode(applySet(set, loc, opt))
			os.Exit(0)
		}
		os.Stderr.WriteString("go\n")
		res := applySet(crashSet(), loc, opt)
		json.NewEncoder(os.Stdout).Encode(res)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashSet is three patches over four files, two of them multi-file, with
// enough content that a write takes measurable time.
func crashSet() *patchdef.Set {
	mk := func(id string, edits ...patchdef.Edit) *patchdef.Definition {
		d := &patchdef.Definition{ID: id, Summary: id, Package: "demo", Distribution: "demo", Edits: edits}
		if err := d.Validate(); err != nil {
			panic(err)
		}
		return d
	}
	return &patchdef.Set{Defs: []*patchdef.Definition{
		mk("p1", patchdef.Edit{File: "a.py", Anchor: "    conv, _ = caches\n", Replacement: "    conv = caches[0]\n"}),
		mk("p2",
			patchdef.Edit{File: "b.py", Anchor: "def register():\n", Replacement: "def register():\n    return  # deferred\n"},
			patchdef.Edit{File: "sub/c.py", Anchor: "    warm_up()\n", Replacement: "    warm_up()\n    register()\n"}),
		mk("p3",
			patchdef.Edit{File: "a.py", Anchor: "class Conn:\n", Replacement: "class Conn:\n    metrics = None\n"},
			patchdef.Edit{File: "sub/d.py", Anchor: "EVENT = None\n", Replacement: "EVENT = object()\n"}),
	}}
}

var crashOriginals = map[string]string{
	"a.py":     "class Conn:\n    pass\n\ndef f(caches):\n    conv, _ = caches\n    return conv\n",
	"b.py":     "def register():\n    pass\n",
	"sub/c.py": "def compile():\n    warm_up()\n",
	"sub/d.py": "EVENT = None\n",
}

// crashTree writes the original files and returns, per file, every
// content a run may leave it in: the original and the result of each
// prefix of the patch list (a superset: patches that share a file commit
// as one transaction, so some prefixes never show); the last one is the
// fully patched file.
func crashTree(t *testing.T) (string, map[string][]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "demo")
	pad := strings.Repeat("# padding so that a write takes a while\n", 20000)
	for name, content := range crashOriginals {
		write(t, filepath.Join(dir, name), content+pad)
	}
	valid := map[string][]string{}
	for name, content := range crashOriginals {
		valid[name] = []string{content + pad}
	}
	set := crashSet()
	for n := 1; n <= len(set.Defs); n++ {
		ref := filepath.Join(t.TempDir(), "demo")
		for name, content := range crashOriginals {
			write(t, filepath.Join(ref, name), content+pad)
		}
		loc := &Location{Packages: map[string]Package{"demo": {Name: "demo", Found: true, Dir: ref, Dirs: []string{ref}}}}
		for _, r := range applySet(&patchdef.Set{Defs: set.Defs[:n]}, loc, options{}) {
			require.Equal(t, patchdef.Applied, r.State, r.Why)
		}
		for name := range crashOriginals {
			got := read(t, filepath.Join(ref, name))
			if !slices.Contains(valid[name], got) {
				valid[name] = append(valid[name], got)
			}
		}
	}
	return dir, valid
}

func final(valid map[string][]string, name string) string {
	return valid[name][len(valid[name])-1]
}

func child(dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "INFERA_PATCHES_CHILD="+dir)
	return cmd
}

// Kill -9 the patching process 200 times: every file is always either
// the original or fully patched, never torn, and the next start converges
// to all applied with no temporary files left. Half the kills land right
// after a chosen write step (each staged file, each rename, in turn), so
// that every point between two steps is covered whatever the machine's
// speed; the other half at a random moment of the patching itself.
func TestKillDuringWrites(t *testing.T) {
	dir, valid := crashTree(t)
	pad := strings.Repeat("# padding so that a write takes a while\n", 20000)
	reset := func() {
		for name, content := range crashOriginals {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content+pad), 0o644))
		}
	}
	// How long the patching takes once the process runs, to spread the
	// timed kills over it, and how many write steps it has.
	reset()
	first := startChild(t, dir, 0)
	_, full := waitLine(first.lines, "")
	require.NoError(t, first.cmd.Wait())
	steps := 0
	for n := 1; ; n++ {
		reset()
		c := startChild(t, dir, n)
		held, _ := waitLine(c.lines, "held")
		c.cmd.Process.Kill()
		c.cmd.Wait()
		if !held {
			steps = n - 1
			break
		}
	}
	require.Greater(t, steps, 1, "the run has write steps to stop between")
	rng := rand.New(rand.NewSource(1))
	states := map[string]int{}
	for i := 0; i < testsupport.Rounds(200, 25); i++ {
		reset()
		var c *crashChild
		if i%2 == 0 {
			c = startChild(t, dir, 1+(i/2)%steps)
			held, _ := waitLine(c.lines, "held")
			require.True(t, held, "iteration %d: the child did not stop after write step %d of %d", i, 1+(i/2)%steps, steps)
		} else {
			c = startChild(t, dir, 0)
			time.Sleep(time.Duration(rng.Int63n(int64(full) + 1)))
		}
		c.cmd.Process.Signal(syscall.SIGKILL)
		c.cmd.Wait()
		var key []string
		for name := range crashOriginals {
			got := read(t, filepath.Join(dir, name))
			k := slices.Index(valid[name], got)
			if k < 0 {
				t.Fatalf("iteration %d: %s is torn: neither original nor the result of whole patches (%d bytes)", i, name, len(got))
			}
			key = append(key, fmt.Sprintf("%s=%d", name, k))
		}
		sort.Strings(key)
		states[strings.Join(key, " ")]++

		// The next start finishes the job.
		out, err := child(dir).Output()
		require.NoError(t, err, "%s", out)
		for name := range crashOriginals {
			require.Equal(t, final(valid, name), read(t, filepath.Join(dir, name)), "iteration %d: %s after recovery", i, name)
		}
		leftovers, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp-*"))
		top, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
		require.Empty(t, append(leftovers, top...), "iteration %d: temporary files left after recovery", i)
	}
	t.Logf("%d write steps; file states seen at kill time: %v", steps, states)
	assert.Greater(t, len(states), 1, "the kills landed at different points of the run")
}

// crashChild is a patching process whose stderr lines arrive on lines.
type crashChild struct {
	cmd   *exec.Cmd
	lines <-chan string
}

// startChild starts a patching process on dir, holding after write step
// hold (0: never), and waits until it says it starts patching.
func startChild(t *testing.T, dir string, hold int) *crashChild {
	t.Helper()
	cmd := child(dir)
	cmd.Env = append(cmd.Env, "INFERA_PATCHES_HOLD_AFTER="+strconv.Itoa(hold))
	errPipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	c := &crashChild{cmd: cmd, lines: lines}
	ok, _ := waitLine(lines, "go")
	require.True(t, ok, "the patching process did not start")
	return c
}

// waitLine reads lines until want ("" : until the end) and reports whether
// it came, and how long the wait took.
func waitLine(lines <-chan string, want string) (bool, time.Duration) {
	start := time.Now()
	for l := range lines {
		if want != "" && l == want {
			return true, time.Since(start)
		}
	}
	return false, time.Since(start)
}

// Two starts at once patch once: the second waits for the first's lock and
// then finds everything applied.
func TestTwoStartsAtOnce(t *testing.T) {
	for i := 0; i < testsupport.Rounds(20, 5); i++ {
		dir, valid := crashTree(t)
		a, b := child(dir), child(dir)
		var outA, outB strings.Builder
		a.Stdout, b.Stdout = &outA, &outB
		require.NoError(t, a.Start())
		require.NoError(t, b.Start())
		require.NoError(t, a.Wait())
		require.NoError(t, b.Wait())
		for name := range crashOriginals {
			require.Equal(t, final(valid, name), read(t, filepath.Join(dir, name)), "%s patched exactly once", name)
		}
		var ra, rb []Result
		require.NoError(t, json.Unmarshal([]byte(outA.String()), &ra))
		require.NoError(t, json.Unmarshal([]byte(outB.String()), &rb))
		for k := range ra {
			actions := []string{ra[k].Action, rb[k].Action}
			sort.Strings(actions)
			assert.Equal(t, []string{"applied", "none"}, actions, "%s: one start applies, the other finds it applied", ra[k].ID)
		}
	}
}

// A start that dies after renaming the first file of a group (p1 and p3
// share a.py; p3 also edits sub/d.py) leaves a.py new and sub/d.py old,
// each complete, and its staged temporaries behind; the next start finds
// p3 half-applied, which is pending, removes the temporaries and finishes.
func TestDeathBetweenTwoFilesOfAGroup(t *testing.T) {
	dir, valid := crashTree(t)
	cmd := child(dir)
	cmd.Env = append(cmd.Env, "INFERA_PATCHES_DIE_AFTER_RENAMES=1")
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 3, exit.ExitCode(), "died after the first rename")
	assert.Equal(t, final(valid, "a.py"), read(t, filepath.Join(dir, "a.py")), "the group's first file is in place, complete")
	assert.Equal(t, valid["sub/d.py"][0], read(t, filepath.Join(dir, "sub/d.py")), "its second file is the original")
	assert.Equal(t, valid["b.py"][0], read(t, filepath.Join(dir, "b.py")), "the next group was not renamed")
	left, _ := filepath.Glob(filepath.Join(dir, "sub", ".d.py.tmp-*"))
	assert.Len(t, left, 1, "the staged second file is left behind")

	out, err := child(dir).Output()
	require.NoError(t, err, "%s", out)
	var res []Result
	require.NoError(t, json.Unmarshal(out, &res))
	before := map[string]patchdef.State{}
	for _, r := range res {
		assert.Equal(t, patchdef.Applied, r.State, "%s: %s", r.ID, r.Why)
		before[r.ID] = r.Before
	}
	assert.Equal(t, map[string]patchdef.State{"p1": patchdef.Applied, "p2": patchdef.Pending, "p3": patchdef.Pending}, before)
	for name := range crashOriginals {
		assert.Equal(t, final(valid, name), read(t, filepath.Join(dir, name)), name)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp-*"))
	top, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	assert.Empty(t, append(leftovers, top...), "temporary files removed")
}
