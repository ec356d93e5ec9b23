package pyimport

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
)

// The names every generated layout asks for: a regular package copied
// into several entries, a module, a namespace package, and the three
// editable installs (setuptools' finder form, its path form from a src
// layout, and the compat path form of a flat layout).
var diffNames = []string{"eng", "modx", "nsp", "edf", "eds", "edc"}

// realPython is the machine's CPython, links resolved, or a skip.
func realPython(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import os, sys; print(os.path.realpath(sys.executable))").Output()
	if err != nil {
		needFixture(t, "python3 on PATH (apt-get install python3): %v", err)
	}
	return strings.TrimSpace(string(out))
}

func needFixture(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("INFERA_REQUIRE_FIXTURES") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// editables are the files pip leaves for three local projects installed
// in editable mode (fixture.Editables), copied into each layout's site
// directories: they name the projects by absolute path.
func editables(t *testing.T) string {
	t.Helper()
	e, err := fixture.Editables()
	if err != nil {
		needFixture(t, "%v", err)
	}
	return e.Files
}

func mustWrite(p, content string) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		panic(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		panic(err)
	}
}

// probeProgram prints sys.path and find_spec's answer for each name.
const probeProgram = `import importlib.util as u, json, sys
out = {"path": sys.path[:], "specs": {}}
for n in NAMES:
    s = u.find_spec(n)
    out["specs"][n] = None if s is None else {"origin": s.origin, "locations": list(s.submodule_search_locations or [])}
print(json.dumps(out))
`

type realAnswer struct {
	Path  []string `json:"path"`
	Specs map[string]*struct {
		Origin    *string  `json:"origin"`
		Locations []string `json:"locations"`
	} `json:"specs"`
}

// layout is one generated worker: its command, environment and directory.
type genLayout struct {
	argv []string
	env  map[string]string
	cwd  string
	desc []string
}

// TestResolverAgreesWithTheInterpreter generates layouts with the real
// python3 (venvs with and without system site packages, bare prefixes,
// user sites, PYTHONUSERBASE, PYTHONPATH, the editable installs pip makes,
// .pth chains, shadowing copies, namespace portions, sitecustomize,
// interpreter options and -m, -c and scripts) and fails on any layout
// where the resolver claims certainty and the interpreter's own sys.path
// or find_spec answer differs. 30 layouts in make test, 400 in
// make test-long (go test without -short).
func TestResolverAgreesWithTheInterpreter(t *testing.T) {
	files := editables(t)
	certain, total := 0, 0
	forEachCPython(t, func(t *testing.T, base string) {
		n := testsupport.Rounds(80, 6)
		certain += differential(t, base, files, n)
		total += n
	})
	t.Logf("%d of %d layouts certain over every CPython", certain, total)
	if total > 0 {
		require.Greater(t, certain, total/5, "the resolver was certain about too few layouts")
	}
}

// differential generates n layouts for the interpreter base and holds the
// resolver's certain answers, and the probe's question on every layout,
// to the interpreter's own; it returns how many answers were certain.
func differential(t *testing.T, base, files string, n int) int {
	certain := 0
	for i := range n {
		l := generate(t, base, files, i)
		q := Query{Argv: l.argv, Path: l.argv[0], Env: func(k string) (string, bool) { v, ok := l.env[k]; return v, ok }, Cwd: l.cwd}
		real, ok := runReal(t, l)
		if !ok {
			// -m with neither the working directory nor a site
			// directory on sys.path: the same layout with -c.
			l.argv[len(l.argv)-1] = "-c"
			l.desc = append(l.desc, "-c instead")
			real, _ = runReal(t, l)
		}
		ctx := fmt.Sprintf("layout %d (%s), argv %q, env %v", i, strings.Join(l.desc, ", "), l.argv, l.env)
		// The probe's question, asked as the patch step asks it, must
		// find what the worker imports: else a patch it calls applied is
		// on a copy the worker does not import.
		qn := Ask(q)
		require.Empty(t, qn.Unfollowed, "the generated workers are all ones the probe follows: %s", ctx)
		asked, stderr, err := runQuestion(qn, l)
		require.NoError(t, err, "the probe's question: %s; %s", stderr, ctx)
		require.Equal(t, real.Path, asked.Path, "sys.path as the probe asks it: %s", ctx)
		require.Equal(t, real.Specs, asked.Specs, "find_spec as the probe asks it: %s", ctx)
		a := Resolve(q, diffNames)
		if !a.Certain {
			t.Logf("layout %d uncertain (%s): %s", i, strings.Join(l.desc, ", "), a.Reason)
			continue
		}
		certain++
		agrees(t, real, a, ctx)
	}
	t.Logf("%d of %d layouts certain, all agreeing with the interpreter; the probe's question agreeing on all", certain, n)
	return certain
}

// runQuestion runs the probe's question qn for the layout's worker: its
// interpreter and options, -c with Path0Program and the probe program,
// the worker's environment with env(1)'s edits, in its directory.
func runQuestion(qn Question, l genLayout) (realAnswer, string, error) {
	names, _ := json.Marshal(diffNames)
	prog := Path0Program + strings.ReplaceAll(probeProgram, "NAMES", string(names))
	cmd := exec.Command(qn.Interpreter, append(append(slices.Clone(qn.Options), "-c", prog), qn.Path0)...)
	cmd.Dir = l.cwd
	env := editedEnv(func(k string) (string, bool) { v, ok := l.env[k]; return v, ok }, qn.Edits)
	keys := map[string]bool{}
	for k := range l.env {
		keys[k] = true
	}
	for _, e := range qn.Edits {
		keys[e.Key] = true
	}
	for k := range keys {
		if v, ok := env(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	out, err := cmd.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	if err != nil {
		return realAnswer{}, stderr, err
	}
	var a realAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		return realAnswer{}, stderr, fmt.Errorf("%q answered %q: %w", qn.Interpreter, out, err)
	}
	return a, stderr, nil
}

// agrees fails unless the resolver's certain answer a is the
// interpreter's, real: sys.path, and find_spec of every name.
func agrees(t *testing.T, real realAnswer, a *Answer, ctx string) {
	t.Helper()
	require.Equal(t, real.Path, a.SysPath, "sys.path: %s", ctx)
	for _, name := range diffNames {
		got, want := a.Specs[name], real.Specs[name]
		if want == nil {
			require.False(t, got.Found, "%s: real: not found; resolver: %+v; %s", name, got, ctx)
			continue
		}
		require.True(t, got.Found, "%s: real: %+v; resolver: not found; %s", name, want, ctx)
		origin := ""
		if want.Origin != nil {
			origin = *want.Origin
		}
		require.Equal(t, origin, got.Origin, "%s origin: %s", name, ctx)
		require.Equal(t, want.Locations, append([]string{}, got.Locations...), "%s locations: %s", name, ctx)
	}
}

// forEachCPython runs f for every interpreter of cpythons, as a subtest
// named for it; an absent one is skipped with its reason (a failure
// under INFERA_REQUIRE_FIXTURES=1).
func forEachCPython(t *testing.T, f func(t *testing.T, exe string)) {
	for _, c := range fixture.CPythons() {
		t.Run(c.Name, func(t *testing.T) {
			if c.Absent != "" {
				needFixture(t, "%s", c.Absent)
			}
			f(t, c.Exe)
		})
	}
}

func runReal(t *testing.T, l genLayout) (realAnswer, bool) {
	t.Helper()
	a, stderr, err := runWorker(l)
	if strings.Contains(stderr, "No module named zzprobe_main") {
		return realAnswer{}, false
	}
	require.NoError(t, err, "%q: %s", l.argv, stderr)
	return a, true
}

// runWorker runs the layout's worker with the probe program as what it
// runs (-c, -m zzprobe_main, or the script it names, which holds it).
func runWorker(l genLayout) (realAnswer, string, error) {
	names, _ := json.Marshal(diffNames)
	prog := strings.ReplaceAll(probeProgram, "NAMES", string(names))
	argv := slices.Clone(l.argv)
	switch argv[len(argv)-1] {
	case "-c":
		argv = append(argv, prog)
	case "-m":
		argv = append(argv, "zzprobe_main")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = l.cwd
	for k, v := range l.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	if err != nil {
		return realAnswer{}, stderr, err
	}
	var a realAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		return realAnswer{}, stderr, fmt.Errorf("%q answered %q: %w", argv, out, err)
	}
	return a, stderr, nil
}

// generate builds layout i (the same for the same i).
func generate(t *testing.T, base, files string, i int) genLayout {
	r := rand.New(rand.NewPCG(uint64(i), 25))
	T := t.TempDir()
	l := genLayout{env: map[string]string{"PATH": "/usr/bin:/bin", "HOME": filepath.Join(T, "home")}, cwd: filepath.Join(T, "cwd")}
	mkdir := func(p string) string { require.NoError(t, os.MkdirAll(p, 0o755)); return p }
	if r.IntN(4) == 0 {
		// The working directory reached through a link: getcwd() names
		// the real one, which relative PYTHONPATH entries are joined to.
		real := mkdir(filepath.Join(T, "real/deep/cwd"))
		require.NoError(t, os.Symlink(real, l.cwd))
		l.desc = append(l.desc, "cwd through a link")
	}
	mkdir(l.cwd)
	mkdir(l.env["HOME"])
	version := strings.TrimPrefix(filepath.Base(base), "python")
	desc := func(s string) { l.desc = append(l.desc, s) }

	// The interpreter: a venv (made by the venv module, or by hand as it
	// makes one), with or without system site packages, or a link to the
	// base interpreter.
	var exe, site string
	switch k := r.IntN(5); {
	case k < 4:
		venv := filepath.Join(T, "venv")
		system := r.IntN(3) == 0
		if k == 0 {
			args := []string{"-m", "venv", "--without-pip"}
			if system {
				args = append(args, "--system-site-packages")
			}
			out, err := exec.Command(base, append(args, venv)...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			desc("venv module")
		} else {
			mkdir(filepath.Join(venv, "bin"))
			require.NoError(t, os.Symlink(base, filepath.Join(venv, "bin", "python"+version)))
			require.NoError(t, os.Symlink("python"+version, filepath.Join(venv, "bin/python3")))
			cfg := fmt.Sprintf("home = %s\ninclude-system-site-packages = %t\nversion = %s.0\n", filepath.Dir(base), system, version)
			if k == 2 && r.IntN(2) == 0 {
				cfg = fmt.Sprintf("home = %s\ninclude-system-site-packages = \n", filepath.Dir(base)) // empty: false
				system = false
				desc("include-system-site-packages empty")
			}
			if k == 3 {
				cfg = fmt.Sprintf("home = %s\n", filepath.Dir(base)) // no key: site.py's default is true
				system = true
			}
			mustWrite(filepath.Join(venv, "pyvenv.cfg"), cfg)
			desc("venv by hand")
		}
		if system {
			desc("system site")
		}
		exe = filepath.Join(venv, "bin/python3")
		site = mkdir(filepath.Join(venv, "lib", "python"+version, "site-packages"))
	default:
		exe = filepath.Join(mkdir(filepath.Join(T, "bin")), "python3")
		require.NoError(t, os.Symlink(base, exe))
		desc("bare interpreter")
	}

	pkg := func(dir, name string) {
		mustWrite(filepath.Join(dir, name, "__init__.py"), "")
		desc("eng in " + strings.TrimPrefix(dir, T))
	}
	entries := []string{}
	// PYTHONPATH, relative or absolute, with copies.
	if r.IntN(2) == 0 {
		var pp []string
		for j := range 1 + r.IntN(2) {
			d := mkdir(filepath.Join(T, fmt.Sprintf("pp%d", j)))
			entries = append(entries, d)
			if r.IntN(2) == 0 {
				pp = append(pp, "../"+filepath.Base(d))
			} else {
				pp = append(pp, d)
			}
		}
		l.env["PYTHONPATH"] = strings.Join(pp, ":")
		desc("PYTHONPATH=" + l.env["PYTHONPATH"])
	}
	// The user site, under HOME or PYTHONUSERBASE.
	if r.IntN(2) == 0 {
		ub := filepath.Join(l.env["HOME"], ".local")
		if r.IntN(3) == 0 {
			ub = filepath.Join(T, "userbase")
			l.env["PYTHONUSERBASE"] = ub
		}
		us := mkdir(filepath.Join(ub, "lib", "python"+version, "site-packages"))
		entries = append(entries, us)
		desc("user site")
		if site == "" {
			site = us
		}
	}
	if site != "" {
		entries = append(entries, site)
		// .pth files: a path (relative or absolute), a chain (a .pth in
		// the added directory, which site does not read), a missing one.
		if r.IntN(2) == 0 {
			extra := mkdir(filepath.Join(T, "extra"))
			extra2 := mkdir(filepath.Join(T, "extra2"))
			mustWrite(filepath.Join(site, "a.pth"), "# comment\n\n../../../../extra\n"+filepath.Join(T, "missing")+"\n")
			if r.IntN(2) == 0 {
				mustWrite(filepath.Join(site, "a.pth"), "# comment\n"+extra+"  \n")
			}
			mustWrite(filepath.Join(extra, "chain.pth"), extra2+"\n")
			entries = append(entries, extra, extra2)
			desc(".pth chain")
		}
		// Every .pth form: line endings, a BOM, trailing white space
		// str.rstrip strips (ASCII and not), names in Python's order.
		if r.IntN(3) == 0 {
			end := []string{"\n", "\r\n", "\r", "\f"}[r.IntN(4)]
			ws := []string{"", " \t", "\x1c", "\u00a0", "\u3000"}[r.IntN(5)]
			bom := []string{"", "\ufeff"}[r.IntN(2)]
			f3, f4 := mkdir(filepath.Join(T, "extra3")), mkdir(filepath.Join(T, "extra4"))
			mustWrite(filepath.Join(site, "forms.pth"), bom+"# c"+end+f3+ws+end+end+f4+ws)
			entries = append(entries, f3, f4)
			desc(fmt.Sprintf(".pth forms %q %q %q", bom, ws, end))
		}
		if r.IntN(5) == 0 {
			f5, f6 := mkdir(filepath.Join(T, "extra5")), mkdir(filepath.Join(T, "extra6"))
			mustWrite(filepath.Join(site, "\xff.pth"), f5+"\n")
			mustWrite(filepath.Join(site, "\U0001F600.pth"), f6+"\n"+f5+"\n")
			entries = append(entries, f5, f6)
			desc(".pth names out of byte order")
		}
		// The editable installs pip made.
		if r.IntN(3) > 0 {
			des, _ := os.ReadDir(files)
			for _, de := range des {
				data, _ := os.ReadFile(filepath.Join(files, de.Name()))
				mustWrite(filepath.Join(site, de.Name()), string(data))
			}
			desc("editables")
		}
		if r.IntN(8) == 0 {
			mustWrite(filepath.Join(site, "zz.pth"), "import sys; sys.path.append('/nowhere')\n")
			desc("code .pth")
		}
		if r.IntN(8) == 0 {
			mustWrite(filepath.Join(site, "sitecustomize.py"), "import sys\n")
			desc("sitecustomize")
		}
	}
	entries = append(entries, l.cwd)
	// Copies of eng in a random subset; a module; namespace portions, and
	// sometimes a regular package of the same name after them.
	for _, e := range entries {
		switch r.IntN(4) {
		case 0:
			pkg(e, "eng")
		case 1:
			mustWrite(filepath.Join(e, "nsp", "part.py"), "")
		case 2:
			mustWrite(filepath.Join(e, "modx.py"), "")
		}
		if r.IntN(6) == 0 {
			mustWrite(filepath.Join(e, "edf", "__init__.py"), "")
			desc("edf shadowed in " + strings.TrimPrefix(e, T))
		}
	}
	if r.IntN(4) == 0 {
		l.env["PYTHONNOUSERSITE"] = "1"
		desc("PYTHONNOUSERSITE")
	}
	if r.IntN(6) == 0 {
		l.env["PYTHONSAFEPATH"] = "1"
		desc("PYTHONSAFEPATH")
	}
	// Options, alone or combined.
	var letters []string
	for _, f := range []string{"I", "E", "s", "S", "P"} {
		if r.IntN(6) == 0 && (f != "P" || versionAtLeast(version, 11)) { // 3.10 has no -P
			letters = append(letters, f)
		}
	}
	var opts []string
	if len(letters) > 0 {
		if r.IntN(2) == 0 {
			opts = []string{"-" + strings.Join(letters, "")}
		} else {
			for _, f := range letters {
				opts = append(opts, "-"+f)
			}
		}
	}
	if r.IntN(8) == 0 {
		l.env["PYTHONPYCACHEPREFIX"] = filepath.Join(T, "pycache")
		desc("PYTHONPYCACHEPREFIX")
	}
	if r.IntN(8) == 0 {
		// A zip archive on PYTHONPATH, holding a copy of eng.
		z := filepath.Join(T, "eng.zip")
		f, err := os.Create(z)
		require.NoError(t, err)
		zw := zip.NewWriter(f)
		w, err := zw.Create("eng/__init__.py")
		require.NoError(t, err)
		_, err = w.Write([]byte("\n"))
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		require.NoError(t, f.Close())
		l.env["PYTHONPATH"] = strings.Trim(z+":"+l.env["PYTHONPATH"], ":")
		desc("zip on PYTHONPATH")
	}
	if r.IntN(10) == 0 {
		// An ELF wrapper named python3.N (makeBinaryWrapper's shape):
		// it sets PYTHONPATH and runs the real interpreter.
		w := filepath.Join(mkdir(filepath.Join(T, "wrap")), "python"+version)
		data, err := os.ReadFile(elfWrapper(t))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(w, data, 0o755))
		wp := mkdir(filepath.Join(T, "wrapped"))
		mustWrite(filepath.Join(wp, "eng", "__init__.py"), "")
		l.env["WRAP_EXE"], l.env["WRAP_PYTHONPATH"] = exe, wp
		exe = w
		desc("ELF wrapper")
	}
	l.argv = append([]string{exe}, opts...)
	if r.IntN(6) == 0 {
		l.argv = append([]string{"/usr/bin/env", "PYTHONNOUSERSITE=1"}, l.argv...)
		desc("env PYTHONNOUSERSITE=1")
	}
	// -c, -m (the probe module in the working directory and in every
	// site directory, so that it runs under -P too), or a script reached
	// through a link, whose real directory comes first.
	switch r.IntN(3) {
	case 0:
		l.argv = append(l.argv, "-c")
		desc("-c")
	case 1:
		names, _ := json.Marshal(diffNames)
		prog := strings.ReplaceAll(probeProgram, "NAMES", string(names))
		for _, d := range []string{l.cwd, site} {
			if d != "" {
				mustWrite(filepath.Join(d, "zzprobe_main.py"), prog)
			}
		}
		l.argv = append(l.argv, "-m")
		desc("-m")
	default:
		names, _ := json.Marshal(diffNames)
		scripts := mkdir(filepath.Join(T, "scripts"))
		mustWrite(filepath.Join(scripts, "run.py"), strings.ReplaceAll(probeProgram, "NAMES", string(names)))
		if r.IntN(3) == 0 {
			pkg(scripts, "eng")
		}
		link := filepath.Join(l.cwd, "run.py")
		require.NoError(t, os.Symlink(filepath.Join(scripts, "run.py"), link))
		l.argv = append(l.argv, "run.py")
		desc("script")
	}
	return l
}
