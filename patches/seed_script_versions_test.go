package patches

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
			v := seedVersionFor(c.script, id)
			t.Run(c.tree+"/"+filepath.Base(c.script)+"@"+id[:7], func(t *testing.T) {
				after, refuses := c.after, c.refuses
				if v.after != "" {
					after, refuses = v.after, v.refuses
				}
				by := "the v0.2.2 script " + filepath.Base(c.script)
				if v.seed {
					by = "the seed's script " + filepath.Base(c.script)
				}
				h.bothWays(t, script, c.tree, c.id, after, refuses, by)
			})
		}
	}
}

// seedVersion is what a version of a seed script reads as where it
// differs from its seedScripts row.
type seedVersion struct {
	after   patchdef.State
	refuses bool
	seed    bool // its result is recognised as the seed's, not the v0.2.2 script's
}

var seedVersions = map[string]seedVersion{}

func seedVersionFor(script, blob string) seedVersion {
	return seedVersions[filepath.Base(script)+"@"+blob[:7]]
}
