package pyimport

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A ._pth file beside the interpreter replaces sys.path, whatever the
// directory is called: one whose name holds pattern characters is read
// as it is, not as a glob pattern.
func TestPthFileBesideTheInterpreter(t *testing.T) {
	real := realPython(t)
	for _, dir := range []string{"plain", "py[3]", "a*b"} {
		bin := filepath.Join(t.TempDir(), dir, "bin")
		require.NoError(t, os.MkdirAll(bin, 0o755))
		exe := filepath.Join(bin, "python3")
		require.NoError(t, os.Symlink(real, exe))
		q := Query{Argv: []string{exe, "-c", "pass"}, Path: exe, Env: func(string) (string, bool) { return "", false }, Cwd: "/"}
		before := Resolve(q, []string{"json"})

		mustWrite(filepath.Join(bin, "python3._pth"), "/nowhere\n")
		a := Resolve(q, []string{"json"})
		require.False(t, a.Certain, "%s: certain with a ._pth file beside the interpreter (before it: %v, %s)", dir, before.Certain, before.Reason)
		require.Contains(t, a.Reason, filepath.Join(bin, "python3._pth"), dir)
	}
}
