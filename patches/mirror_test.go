package patches

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The opt-in tests on real revisions read engine and seed files from git
// directories (INFERA_SEED_GIT, INFERA_SGLANG_GIT, INFERA_VLLM_GIT,
// INFERA_ATOM_GIT) through these.

// gitShow is path as revision rev of the git directory dir has it, and
// whether it has it.
func gitShow(dir, rev, path string) (string, bool) {
	out, err := exec.Command("git", "--git-dir", dir, "show", rev+":"+path).Output()
	return string(out), err == nil
}

// revisionSite lays down a new site-packages holding pkg/__init__.py and
// each of files (relative to the package) that rev of the git directory
// dir has at from+file, and returns it; t fails when rev has none of them.
func revisionSite(t *testing.T, dir, rev, from, pkg string, files []string) string {
	t.Helper()
	site := filepath.Join(t.TempDir(), "site-packages")
	require.NoError(t, mkfile(filepath.Join(site, pkg, "__init__.py"), ""))
	found := 0
	for _, f := range files {
		if c, ok := gitShow(dir, rev, from+f); ok {
			require.NoError(t, mkfile(filepath.Join(site, pkg, f), c))
			found++
		}
	}
	require.NotZero(t, found, "none of %v at %s in %s", files, rev, dir)
	return site
}

// compiles fails t unless python compiles each of files (under dir);
// compile() writes no bytecode beside them.
func compiles(t *testing.T, python, dir string, files []string) {
	t.Helper()
	if len(files) == 0 {
		return
	}
	args := []string{"-c", "import sys\nfor f in sys.argv[1:]:\n    compile(open(f).read(), f, 'exec')\n"}
	for _, f := range files {
		args = append(args, filepath.Join(dir, f))
	}
	out, err := exec.Command(python, args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
}
