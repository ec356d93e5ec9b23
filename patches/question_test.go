package patches

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/launch"
)

// questionLayout is a package demo in a PYTHONPATH directory and another
// copy beside a script, both pending, with a sitecustomize.py that makes
// the offline answer uncertain, so that the probe is asked.
func questionLayout(t *testing.T) (site, scripts, payload string) {
	base := t.TempDir()
	site, scripts, payload = filepath.Join(base, "site"), filepath.Join(base, "scripts"), filepath.Join(base, "payload")
	for _, d := range []string{site, scripts} {
		write(t, filepath.Join(d, "demo/__init__.py"), "")
		write(t, filepath.Join(d, "demo/a.py"), "    a, _ = x\n")
	}
	write(t, filepath.Join(site, "sitecustomize.py"), "import sys\n")
	write(t, filepath.Join(scripts, "run.py"), "import demo\n")
	write(t, filepath.Join(scripts, "run.sh"), "#!/bin/sh\nexec python3 \"$(dirname \"$0\")/run.py\"\n")
	require.NoError(t, os.Chmod(filepath.Join(scripts, "run.sh"), 0o755))
	write(t, filepath.Join(payload, "patches/demo/fix.toml"), "id = \"demo-fix\"\nsummary = \"s\"\npackage = \"demo\"\ndistribution = \"demo\"\n[[guard]]\nfile = \"a.py\"\n[[edit]]\nfile = \"a.py\"\nanchor = \"    a, _ = x\\n\"\nreplacement = \"    a = x[0]\\n\"\n")
	return site, scripts, payload
}

// The probe asks the worker's question: for `python3 scripts/run.py`,
// the script's directory is first on sys.path, so the copy patched is
// the one beside the script, not the PYTHONPATH one that `python3 -c`
// in the working directory would find.
func TestProbeAsksTheWorkersQuestion(t *testing.T) {
	py := debianPython(t)
	site, scripts, payload := questionLayout(t)
	cfg, _, err := config.Load(envWith("PAYLOAD_ROOT", payload), "/nonexistent/bin/infera-exec", "/", config.Flags{})
	require.NoError(t, err)
	var logs strings.Builder
	out, err := Run(t.Context(), Input{Config: cfg, Python: py, Env: envWith("PYTHONPATH", site),
		Worker: &launch.Outcome{Cwd: "/", Argv: []string{py, filepath.Join(scripts, "run.py")}, Path: py},
		Log:    slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err, logs.String())
	r := resultOf(t, out, "demo-fix")
	assert.Equal(t, "applied", r.Action, r.Why)
	assert.Empty(t, r.Unvouched)
	assert.Contains(t, out.Location.Located, "by the interpreter: not certain without it")
	assert.Equal(t, "    a = x[0]\n", read(t, filepath.Join(scripts, "demo/a.py")), "the copy the worker imports")
	assert.Equal(t, "    a, _ = x\n", read(t, filepath.Join(site, "demo/a.py")), "a copy the worker does not import")
}

// A shell-script worker: which interpreter it runs is not known. What the
// probe finds (INFERA_PYTHON's -c answer) is not called in force: the
// result says so, the log warns with the fix, and a required patch is
// refused (65). With INFERA_PYTHON naming the interpreter the script
// runs, the operator vouches for it, and the patch is in force.
func TestShellScriptWorkerIsNotVouchedFor(t *testing.T) {
	py := debianPython(t)
	for _, named := range []bool{false, true} {
		for _, required := range []bool{false, true} {
			site, scripts, payload := questionLayout(t)
			env := envWith("PAYLOAD_ROOT", payload)
			if required {
				env.Set("INFERA_REQUIRE_PATCHES", "demo-fix")
			}
			if named {
				env.Set("INFERA_PYTHON", py)
			}
			cfg, _, err := config.Load(env, "/nonexistent/bin/infera-exec", "/", config.Flags{})
			require.NoError(t, err)
			var logs strings.Builder
			sh := filepath.Join(scripts, "run.sh")
			out, err := Run(t.Context(), Input{Config: cfg, Python: py, Env: envWith("PYTHONPATH", site),
				Worker: &launch.Outcome{Cwd: "/", Argv: []string{sh}, Path: sh},
				Log:    slog.New(slog.NewTextHandler(&logs, nil))})
			require.NotNil(t, out)
			r := resultOf(t, out, "demo-fix")
			if named {
				require.NoError(t, err)
				assert.Empty(t, r.Unvouched)
				assert.True(t, r.Ok())
				continue
			}
			assert.Contains(t, r.Unvouched, "the worker's own interpreter was not asked")
			assert.Contains(t, r.Unvouched, "set INFERA_PYTHON to the interpreter the worker runs")
			assert.False(t, r.Ok(), "not in force")
			assert.Contains(t, logs.String(), "level=WARN")
			assert.Contains(t, logs.String(), "not vouched for the worker")
			assert.NotContains(t, logs.String(), "patch demo-fix applied")
			assert.Contains(t, out.Summary, "not vouched for the worker")
			if !required {
				require.NoError(t, err)
				continue
			}
			var req *RequiredError
			require.True(t, errors.As(err, &req), "%v", err)
			assert.Equal(t, 65, req.ExitCode())
			assert.Contains(t, err.Error(), "not vouched for the worker")
			assert.Contains(t, err.Error(), "INFERA_PYTHON")
		}
	}
}

func resultOf(t *testing.T, o *Outcome, id string) Result {
	t.Helper()
	for _, r := range o.Results {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no result for %s", id)
	return Result{}
}
