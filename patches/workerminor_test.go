package patches

import (
	"log/slog"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/patches/patchdef"
)

// The rules that depend on the version follow the worker's interpreter,
// not the one the ABI step asked: a worker run by another CPython than
// INFERA_PYTHON (here each CPython of the machine, with Debian's python3
// as INFERA_PYTHON) imports an extension module built for its own minor
// beside the patched .py, which is then shadowed, not applied; and the log
// names both interpreters and versions where they differ. The worker's
// interpreter itself confirms which file it loads.
func TestVersionRulesFollowTheWorkersInterpreter(t *testing.T) {
	abiPy := debianPython(t)
	out, err := exec.Command(abiPy, "-c", "import sys; print(sys.version_info[1])").Output()
	require.NoError(t, err)
	abiMinor, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	forEachCPython(t, func(t *testing.T, base string) {
		site, _, payload := prefixLayout(t)
		// The worker runs a venv of it without the system's site
		// directories: a layout the resolver reads whole.
		venv := filepath.Join(t.TempDir(), "venv")
		pyRun(t, nil, base, "-m", "venv", "--without-pip", venv)
		exe := filepath.Join(venv, "bin", "python")
		suffix := pyRun(t, nil, exe, "-c", "import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])")
		write(t, filepath.Join(site, "demo/a"+suffix), "")
		origin := pyRun(t, []string{"PYTHONPATH=" + site}, exe, "-c", "import importlib.util as u; print(u.find_spec('demo.a').origin)")
		require.Equal(t, filepath.Join(site, "demo/a"+suffix), origin, "the worker's interpreter loads the extension module")
		minor, err := strconv.Atoi(pyRun(t, nil, exe, "-c", "import sys; print(sys.version_info[1])"))
		require.NoError(t, err)

		cfg, _, err := config.Load(envWith("PAYLOAD_ROOT", payload), "/nonexistent/bin/infera-exec", "/", config.Flags{})
		require.NoError(t, err)
		var logs strings.Builder
		o, err := Run(t.Context(), Input{Config: cfg, Python: abiPy, PyMinor: abiMinor, Env: envWith("PYTHONPATH", site),
			Worker: &launch.Outcome{Cwd: "/", Argv: []string{exe, "-c", "import demo.a"}, Path: exe},
			Log:    slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err, logs.String())
		assert.Equal(t, minor, o.Location.PyMinor, "the location names the worker's version")
		assert.Contains(t, o.Location.Located, "without starting Python", "the worker's interpreter read by its own layout, not held to the ABI step's version")
		r := resultOf(t, o, "demo-fix")
		assert.Equal(t, patchdef.Shadowed, r.State, r.Why)
		assert.Contains(t, r.Why, "a"+suffix)
		assert.Equal(t, "def f():\n    return 'old'\n", read(t, filepath.Join(site, "demo/a.py")), "nothing written")
		warned := "the worker's interpreter " + exe + " runs CPython 3." + strconv.Itoa(minor) + ", the interpreter the ABI step asked (" + abiPy + ", INFERA_PYTHON) CPython 3." + strconv.Itoa(abiMinor)
		if minor != abiMinor {
			assert.Contains(t, logs.String(), warned)
		} else {
			assert.NotContains(t, logs.String(), "the interpreter the ABI step asked")
		}
	})
}
