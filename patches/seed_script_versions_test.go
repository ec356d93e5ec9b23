package patches

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches/patchdef"
)

// TestSeedScriptVersions runs every version the seed repository ever had
// of each v0.2.2 patch script (the distinct blobs of its path over all
// the seed's branches) both ways on the test trees, as TestSeedScripts
// does for one copy of them: the seed baked each into the images of its
// time. INFERA_SEED_GIT names a git directory of AMD-AGI/Infera; the
// test is skipped without it, git or python3.
func TestSeedScriptVersions(t *testing.T) {
	seedGit := os.Getenv("INFERA_SEED_GIT")
	python, perr := exec.LookPath("python3")
	_, gerr := exec.LookPath("git")
	if seedGit == "" || perr != nil || gerr != nil {
		t.Skip("needs INFERA_SEED_GIT (a git directory of AMD-AGI/Infera), git and python3")
	}
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"--git-dir", seedGit}, args...)...).Output()
		require.NoError(t, err, "git %v", args)
		return strings.TrimSpace(string(out))
	}
	h := newSeedScriptHarness(t, python)
	scripts := t.TempDir()
	for _, c := range seedScripts {
		path := "deploy/docker/patches/" + c.script
		commits := strings.Fields(git("rev-list", "--all", "--", path))
		require.NotEmpty(t, commits, "no version of %s in %s", path, seedGit)
		seen := map[string]bool{}
		for _, commit := range commits {
			blob, err := exec.Command("git", "--git-dir", seedGit, "rev-parse", "--verify", "-q", commit+":"+path).Output()
			if err != nil {
				continue // the commit removed it
			}
			id := strings.TrimSpace(string(blob))
			if seen[id] {
				continue
			}
			seen[id] = true
			dir := filepath.Join(scripts, id)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			script := filepath.Join(dir, filepath.Base(c.script))
			require.NoError(t, os.WriteFile(script, []byte(git("cat-file", "blob", id)+"\n"), 0o644))
			by := "the v0.2.2 script " + filepath.Base(c.script)
			targets := 0
			for _, tree := range append([]string{c.tree}, seedScriptTrees[c.tree+" "+c.script]...) {
				// A version made for another release refuses this tree
				// and leaves it as it was.
				dir := filepath.Join(t.TempDir(), "probe")
				require.NoError(t, fixture.CopyTree(filepath.Join(h.trees, tree), dir))
				before := snapshot(t, dir)
				cmd := exec.Command(python, script)
				cmd.Env = append(os.Environ(), "PYTHONPATH="+treeRoot(dir), "PYTHONDONTWRITEBYTECODE=1")
				cmd.Dir = "/"
				if out, err := cmd.CombinedOutput(); err != nil {
					require.Equal(t, before, snapshot(t, dir), "%s@%s refused %s but wrote: %s", c.script, id[:7], tree, out)
					t.Logf("%s@%s refuses %s, writing nothing: %s", c.script, id[:7], tree, lastLine(out))
					continue
				}
				targets++
				t.Run(tree+"/"+filepath.Base(c.script)+"@"+id[:7], func(t *testing.T) {
					h.bothWays(t, script, tree, c.id, c.after, c.refuses, by)
				})
			}
			assert.NotZero(t, targets, "%s@%s changes none of its trees", c.script, id[:7])
		}
	}
}

// seedScriptTrees are more test trees, beyond its seedScripts row's, that
// versions of a script are run on ("<tree> <script>" of the row): the
// releases the seed's images sat on (SGLang v0.5.16 before its af8f8be,
// v0.5.17 after it) and the other layouts of the files the script edits.
var seedScriptTrees = map[string][]string{
	"sglang-editable sglang_disagg/patch_mooncake_early_send_wait_event.py": {"sglang-0.5.16", "sglang-0.5.17", "sglang-0.5.18"},
	"sglang-hicache sglang_rocm/patch_hicache_rocm_host_alloc.py":           {"sglang-hicache-split", "sglang-hicache-musa", "sglang-hicache-npu"},
}

func lastLine(out []byte) string {
	s := strings.TrimSpace(string(out))
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// seedSGLangReleases are the SGLang releases the seed's SGLang scripts are
// run on by TestSeedScriptVersionsOnReleases: from the first with the
// host pools in pool_host/ (v0.5.14) to the one after the seed's last
// image base (v0.5.17, its af8f8be).
var seedSGLangReleases = []string{"v0.5.14", "v0.5.15.post1", "v0.5.16", "v0.5.17", "v0.5.18"}

// TestSeedScriptVersionsOnReleases runs every version of the seed's SGLang
// scripts both ways, as TestSeedScriptVersions does, on the files of real
// SGLang releases that the scripts' definitions read, laid down as
// site-packages from git: where a version patches a release, its result
// reads as the fix applied (by the script), a start on top converges, and
// the version changes nothing on a release infera-exec patched. Every
// version must patch at least one release. INFERA_SEED_GIT and
// INFERA_SGLANG_GIT name git directories of the seed and of SGLang (the
// bytedance-iaas/sglang mirror has the tags); skipped without them, git or
// python3.
func TestSeedScriptVersionsOnReleases(t *testing.T) {
	seedGit, sglangGit := os.Getenv("INFERA_SEED_GIT"), os.Getenv("INFERA_SGLANG_GIT")
	python, perr := exec.LookPath("python3")
	_, gerr := exec.LookPath("git")
	if seedGit == "" || sglangGit == "" || perr != nil || gerr != nil {
		t.Skip("needs INFERA_SEED_GIT (a git directory of AMD-AGI/Infera), INFERA_SGLANG_GIT (one of SGLang), git and python3")
	}
	git := func(dir string, args ...string) (string, bool) {
		out, err := exec.Command("git", append([]string{"--git-dir", dir}, args...)...).Output()
		return string(out), err == nil
	}
	h := newSeedScriptHarness(t, python)
	// The releases' files that the scripts' definitions read, as trees
	// in place of the test trees.
	h.trees = t.TempDir()
	var files []string
	var rows []int
	for i, c := range seedScripts {
		if !strings.HasPrefix(c.script, "sglang") {
			continue
		}
		rows = append(rows, i)
		d := h.set.Lookup(c.id)
		require.NotNil(t, d, c.id)
		for _, g := range d.Guards {
			files = append(files, g.File)
		}
		for _, v := range d.EditSets() {
			for _, g := range v.Guards {
				files = append(files, g.File)
			}
			for _, e := range v.Edits {
				files = append(files, e.File)
			}
		}
	}
	for _, rev := range seedSGLangReleases {
		pkg := filepath.Join(h.trees, rev, "site-packages", "sglang")
		require.NoError(t, mkfile(filepath.Join(pkg, "__init__.py"), ""))
		for _, f := range files {
			if c, ok := git(sglangGit, "show", rev+":python/sglang/"+f); ok {
				require.NoError(t, mkfile(filepath.Join(pkg, f), c))
			}
		}
	}
	scripts := t.TempDir()
	for _, i := range rows {
		c := seedScripts[i]
		path := "deploy/docker/patches/" + c.script
		commits, _ := git(seedGit, "rev-list", "--all", "--", path)
		require.NotEmpty(t, strings.Fields(commits), "no version of %s in %s", path, seedGit)
		seen := map[string]bool{}
		for _, commit := range strings.Fields(commits) {
			blob, ok := git(seedGit, "rev-parse", "--verify", "-q", commit+":"+path)
			id := strings.TrimSpace(blob)
			if !ok || seen[id] {
				continue // the commit removed it, or a version already run
			}
			seen[id] = true
			text, ok := git(seedGit, "cat-file", "blob", id)
			require.True(t, ok, id)
			script := filepath.Join(scripts, id, filepath.Base(c.script))
			require.NoError(t, mkfile(script, text))
			patched := 0
			for _, rev := range seedSGLangReleases {
				dir := filepath.Join(t.TempDir(), "probe")
				require.NoError(t, fixture.CopyTree(filepath.Join(h.trees, rev), dir))
				before := snapshot(t, dir)
				cmd := exec.Command(python, script)
				cmd.Env = append(os.Environ(), "PYTHONPATH="+treeRoot(dir), "PYTHONDONTWRITEBYTECODE=1")
				cmd.Dir = "/"
				out, err := cmd.CombinedOutput()
				if after := snapshot(t, dir); err != nil || reflect.DeepEqual(before, after) {
					require.Equal(t, before, after, "%s@%s failed on %s but wrote: %s", c.script, id[:7], rev, out)
					t.Logf("%s@%s leaves %s as it is: %s", c.script, id[:7], rev, lastLine(out))
					continue
				}
				patched++
				t.Run(rev+"/"+filepath.Base(c.script)+"@"+id[:7], func(t *testing.T) {
					h.bothWays(t, script, rev, c.id, patchdef.Applied, c.refuses, "the v0.2.2 script "+filepath.Base(c.script))
				})
			}
			assert.NotZero(t, patched, "%s@%s patches none of %v", c.script, id[:7], seedSGLangReleases)
		}
	}
}
