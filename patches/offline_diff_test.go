package patches

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
)

// offlineNames are what the differential layouts ask for: a regular
// package with copies, a module, a namespace package and the three
// editable installs pip makes.
var offlineNames = append([]string{"eng", "modx", "nsp"}, fixture.EditableNames...)

// findSpecs prints sys.path and, per name, find_spec's locations (null:
// not found; [] a module).
const findSpecs = `import importlib.util as u, json, sys
out = {"path": sys.path[1:], "specs": {}}
for n in sys.argv[1:]:
    s = u.find_spec(n)
    out["specs"][n] = None if s is None else list(s.submodule_search_locations or [])
print(json.dumps(out))
`

// realSpecs runs py as an offline lookup reads it (python3 -c as root,
// HOME=/root, no PYTHON* variables, in /).
func realSpecs(t *testing.T, py string, names []string) (path []string, specs map[string]*[]string) {
	t.Helper()
	cmd := exec.Command(py, append([]string{"-c", findSpecs}, names...)...)
	cmd.Env, cmd.Dir = []string{"HOME=/root", "PATH=/usr/bin:/bin"}, "/"
	out, err := cmd.Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "%s: %s", py, stderr)
	var a struct {
		Path  []string             `json:"path"`
		Specs map[string]*[]string `json:"specs"`
	}
	require.NoError(t, json.Unmarshal(out, &a), "%s", out)
	return a.Path, a.Specs
}

// agrees fails unless loc names, for every name, the directories the
// real interpreter imports it from, and lists its sys.path's existing
// directories in its order.
func agrees(t *testing.T, what string, loc *Location, path []string, specs map[string]*[]string) {
	t.Helper()
	var dirs []string
	for _, p := range path {
		if isDir(p) && !slices.Contains(dirs, p) {
			dirs = append(dirs, p)
		}
	}
	require.Equal(t, dirs, loc.SysPath, "%s: sys.path", what)
	for _, n := range offlineNames {
		got, want := loc.Packages[n], specs[n]
		switch {
		case want == nil:
			require.False(t, got.Found, "%s: %s: real: not found; offline: %+v", what, n, got)
			require.Contains(t, got.Why, "not found in", "%s: %s", what, n)
		case len(*want) == 0:
			require.False(t, got.Found, "%s: %s: real: a module; offline: %+v", what, n, got)
			require.Contains(t, got.Why, "is the module", "%s: %s", what, n)
		default:
			require.True(t, got.Found, "%s: %s: real: %v; offline: %s", what, n, *want, got.Why)
			require.Equal(t, *want, got.Dirs, "%s: %s", what, n)
		}
	}
}

// The offline lookup of --check and harvest, on venvs of this machine
// made by Debian's python3 and holding the editable installs the real pip
// makes (the builder venv pip installed them into, and venvs with pip's
// files copied in), names for every name what the venv's own interpreter
// imports: the same sys.path, the same package directory or namespace
// portions, a module as a module, not found as not found. Layouts vary
// system site packages, copies of a package that shadow each other and an
// editable install, .pth path lines, a .pth that runs code (noted, and
// passed over), a module and namespace portions.
func TestOfflineAgreesWithTheInterpreter(t *testing.T) {
	base := debianPython(t)
	ed, err := fixture.Editables()
	if err != nil {
		if os.Getenv("INFERA_REQUIRE_FIXTURES") == "1" {
			t.Fatal(err)
		}
		t.Skipf("%v (INFERA_REQUIRE_FIXTURES=1 makes this fail)", err)
	}

	// pip's own venv, as it left it.
	builder := filepath.Join(ed.Dir, "builder")
	loc, err := LocateOffline(builder, offlineNames)
	require.NoError(t, err)
	path, specs := realSpecs(t, filepath.Join(builder, "bin/python3"), offlineNames)
	agrees(t, "pip's venv", loc, path, specs)
	require.True(t, loc.Packages["edf"].Found && loc.Packages["eds"].Found && loc.Packages["edc"].Found, "every editable install is found: %+v", loc.Packages)

	for i, l := range []struct {
		system, shadow, pthDir, code, module, nsp bool
	}{
		{},
		{system: true},
		{shadow: true, pthDir: true, module: true},
		{system: true, shadow: true, nsp: true, code: true},
		{pthDir: true, nsp: true, module: true, code: true},
	} {
		what := fmt.Sprintf("layout %d %+v", i, l)
		dir := filepath.Join(t.TempDir(), "venv")
		args := []string{"-m", "venv", "--without-pip", dir}
		if l.system {
			args = append(args, "--system-site-packages")
		}
		out, err := exec.Command(base, args...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		sites, _ := filepath.Glob(filepath.Join(dir, "lib/python3.*/site-packages"))
		require.Len(t, sites, 1)
		site := sites[0]
		files, _ := os.ReadDir(ed.Files)
		for _, f := range files {
			require.NoError(t, fixture.CopyFile(filepath.Join(ed.Files, f.Name()), filepath.Join(site, f.Name()), 0o644))
		}
		extra := filepath.Join(filepath.Dir(dir), "extra")
		if l.pthDir {
			write(t, filepath.Join(site, "a.pth"), "# comment\n../../../../extra\n"+filepath.Join(filepath.Dir(dir), "missing")+"\n")
			write(t, filepath.Join(extra, "eng/__init__.py"), "")
		}
		write(t, filepath.Join(site, "eng/__init__.py"), "")
		if l.shadow {
			// A regular package in site-packages shadows the editable
			// finder's (consulted after sys.path).
			write(t, filepath.Join(site, "edf/__init__.py"), "")
		}
		if l.code {
			write(t, filepath.Join(site, "zz.pth"), "import sys; sys.path.append('/nowhere')\n")
		}
		if l.module {
			write(t, filepath.Join(site, "modx.py"), "")
		}
		if l.nsp {
			write(t, filepath.Join(site, "nsp/part.py"), "")
			write(t, filepath.Join(extra, "nsp/other.py"), "")
		}
		loc, err := LocateOffline(dir, offlineNames)
		require.NoError(t, err)
		path, specs := realSpecs(t, filepath.Join(dir, "bin/python3"), offlineNames)
		agrees(t, what, loc, path, specs)
		if l.code {
			require.True(t, slices.ContainsFunc(loc.Notes, func(n string) bool { return strings.Contains(n, filepath.Join(site, "zz.pth")) }), "%s: the code .pth is noted: %q", what, loc.Notes)
		}
		if l.pthDir {
			require.Equal(t, []string{filepath.Join(extra, "eng")}, loc.Packages["eng"].Others, what)
		}
		if l.shadow {
			require.Equal(t, filepath.Join(site, "edf"), loc.Packages["edf"].Dir, what)
		}
	}
}
