package harvest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The import check runs the base's interpreter with the base root as "/"
// and the tree bound read-only inside it, in a user and mount namespace of
// its own: this program re-executes itself with sandboxEnv set, mounts,
// chroots and execs the interpreter. No container runtime, no root.
const (
	sandboxEnv = "INFERA_PAYLOAD_SANDBOX" // JSON: [BASE, MOUNTPOINT, TREE, PYTHON]
	importTime = 2 * time.Minute
)

// mountPoints are directories of a base that can carry the tree while the
// interpreter runs (a fresh tmpfs goes over the first that exists, so the
// base is not written).
var mountPoints = []string{"/tmp", "/mnt", "/var/tmp", "/opt"}

// treeAt is where the tree appears inside the base.
const treeSub = "infera-tree"

// importScript imports each name on argv, "mod:NAME" (an extension
// module) or "pkg:NAME" (a package the tree claims), and prints one line
// per name: "ok NAME", "fail NAME: ERROR", or for a package
// "pkg NAME<TAB>FILE<TAB>PATH<US>PATH..." with its __file__ ("-" for
// none: a namespace package) and __path__, so that the caller can tell
// where it came from.
const importScript = `import importlib, sys
for arg in sys.argv[1:]:
    kind, _, name = arg.partition(":")
    try:
        m = importlib.import_module(name)
        if kind == "pkg":
            f = getattr(m, "__file__", None) or "-"
            paths = [str(p) for p in (getattr(m, "__path__", None) or [])]
            print("pkg %s\t%s\t%s" % (name, f, "\x1f".join(paths)))
        else:
            print("ok", name)
    except BaseException as e:
        print("fail %s: %s: %s" % (name, type(e).__name__, str(e).replace("\n", " ")))
`

// imported is where the base's interpreter took a package from.
type imported struct {
	File  string   // __file__; "" for a namespace package
	Paths []string // __path__
	Tree  string   // where the tree was, inside the sandbox
}

// ImportResult is the base interpreter's answer for each module and
// package.
type ImportResult struct {
	Python  string              // the interpreter, a path inside the base
	WithOut map[string]string   // module -> error without the tree ("" = it imported)
	Failed  map[string]string   // module or package -> error with the tree
	Modules map[string][]string // package -> its extension modules
}

func (r *ImportResult) failures(pkg string) []string {
	if r == nil {
		return nil
	}
	var out []string
	if e, ok := r.Failed[pkg]; ok {
		out = append(out, fmt.Sprintf("import %s with the base's %s: %s", pkg, r.Python, e))
	}
	for _, m := range r.Modules[pkg] {
		if e, ok := r.Failed[m]; ok && m != pkg {
			out = append(out, fmt.Sprintf("import %s with the base's %s: %s", m, r.Python, e))
		}
	}
	return out
}

// WriteText reports the imports.
func (r *ImportResult) WriteText(w io.Writer) {
	n := 0
	for _, ms := range r.Modules {
		n += len(ms)
	}
	fmt.Fprintf(w, "import check (%s, base as /, tree on PYTHONPATH and LD_LIBRARY_PATH): %d modules, %d fail\n", r.Python, n, len(r.Failed))
	names := make([]string, 0, len(r.Failed))
	for m := range r.Failed {
		names = append(names, m)
	}
	sort.Strings(names)
	for _, m := range names {
		fmt.Fprintf(w, "  import %s: %s\n", m, r.Failed[m])
	}
}

// Import imports, with the base's interpreter, every extension module
// once without the tree (to show what the tree adds) and once with it,
// and with the tree each package itself: it must come from the tree, and
// a package the builder has as a regular one must not import as a
// namespace package (directories without __init__: a tree that holds a
// fraction of the package imports "successfully" and has no attributes).
// pkgs maps each package to whether the builder's copy is a namespace
// package. An error means the check could not run: it is not a pass.
func Import(base, python, tree string, mods map[string][]string, pkgs map[string]bool) (*ImportResult, error) {
	py, err := interpreter(base, python)
	if err != nil {
		return nil, err
	}
	var all []string
	for _, ms := range mods {
		all = append(all, ms...)
	}
	sort.Strings(all)
	r := &ImportResult{Python: py, Modules: mods}
	if r.WithOut, _, err = runImports(base, "", py, all, nil); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	var got map[string]imported
	if r.Failed, got, err = runImports(base, tree, py, all, names); err != nil {
		return nil, err
	}
	for _, p := range names {
		if _, bad := r.Failed[p]; bad {
			continue
		}
		if why := fromTree(got[p], pkgs[p]); why != "" {
			r.Failed[p] = why
		}
	}
	return r, nil
}

// fromTree says what is wrong with where a package was imported from,
// inside the sandbox: "" when it is the tree's copy, of the builder's
// kind.
func fromTree(im imported, namespace bool) string {
	inTree := func(p string) bool { return im.Tree != "" && (strings.HasPrefix(p, im.Tree+"/") || p == im.Tree) }
	switch {
	case im.File == "" && !namespace:
		return fmt.Sprintf("imports as an empty namespace package (no __init__; __path__ %s): the tree holds only part of the builder's package", strings.Join(im.Paths, ", "))
	case im.File != "" && !inTree(im.File):
		return fmt.Sprintf("imports from %s, not from the tree", im.File)
	case im.File == "" && !slices.ContainsFunc(im.Paths, inTree):
		return fmt.Sprintf("imports as a namespace package from %s, not from the tree", strings.Join(im.Paths, ", "))
	}
	return ""
}

// Importable runs the import of mods with base's interpreter, with tree
// ("" = without), and returns module -> error for those that failed.
func Importable(base, tree, python string, mods []string) (map[string]string, error) {
	py, err := interpreter(base, python)
	if err != nil {
		return nil, err
	}
	failed, _, err := runImports(base, tree, py, mods, nil)
	return failed, err
}

func interpreter(base, python string) (string, error) {
	cands := Interpreters
	if python != "" {
		cands = []string{python}
	}
	for _, c := range cands {
		matches, _ := filepath.Glob(filepath.Join(base, c))
		sort.Strings(matches)
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				rel, _ := filepath.Rel(base, m)
				return "/" + filepath.ToSlash(rel), nil
			}
			if _, err := os.Lstat(m); err == nil {
				// A symlink inside the base (python3 -> python3.11):
				// it resolves in the sandbox.
				rel, _ := filepath.Rel(base, m)
				return "/" + filepath.ToSlash(rel), nil
			}
		}
	}
	return "", fmt.Errorf("no Python interpreter in the base %s (tried %s); name it with -python", base, strings.Join(cands, ", "))
}

// runPython runs the interpreter py of base, with base as "/" and the
// tree ("" = none) on its paths, in the sandbox, with args; it returns
// where the tree was mounted inside, the output, the interpreter's exit
// error (nil, or an *exec.ExitError), or an error when the sandbox could
// not run.
func runPython(base, tree, py string, args []string) (mp string, out, errb *bytes.Buffer, exitErr error, err error) {
	for _, m := range mountPoints {
		if fi, err := os.Stat(filepath.Join(base, m)); err == nil && fi.IsDir() {
			mp = m
			break
		}
	}
	if mp == "" && tree != "" {
		return "", nil, nil, nil, fmt.Errorf("the base %s has none of %s to mount the tree on", base, strings.Join(mountPoints, ", "))
	}
	self, err := os.Executable()
	if err != nil {
		return "", nil, nil, nil, fmt.Errorf("cannot re-execute this program for the sandbox: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), importTime)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	spec, _ := json.Marshal([]string{base, mp, tree, py})
	cmd.Env = []string{sandboxEnv + "=" + string(spec)}
	out, errb = &bytes.Buffer{}, &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, errb
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return "", nil, nil, nil, fmt.Errorf("cannot start the import sandbox (a user and mount namespace): %w; the import check did not run", err)
	}
	if exit != nil && exit.ExitCode() == sandboxFailed {
		return "", nil, nil, nil, fmt.Errorf("the import sandbox failed: %s; the import check did not run", strings.TrimSpace(errb.String()))
	}
	return mp, out, errb, err, nil
}

// SysPath is sys.path of the interpreter python of root ("" = the first
// of Interpreters), run with root as "/" in the sandbox, without
// PYTHONPATH and the user site: what sitepath computes offline.
func SysPath(root, python string) ([]string, error) {
	py, err := interpreter(root, python)
	if err != nil {
		return nil, err
	}
	_, out, errb, exit, err := runPython(root, "", py, []string{"-c", "import sys\nfor p in sys.path[1:]: print(p)"})
	if err != nil {
		return nil, err
	}
	if exit != nil {
		return nil, fmt.Errorf("%s in %s: %v: %s", py, root, exit, lastLine(errb.String()))
	}
	return strings.Fields(out.String()), nil
}

// specScript prints, for each top-level name on argv, where the import
// system would take it from, without importing it: "spec NAME<TAB>ORIGIN
// <TAB>LOCATION<US>LOCATION..." (ORIGIN "-" for a namespace package),
// "none NAME", or "fail NAME: ERROR".
const specScript = `import importlib.util, sys
for name in sys.argv[1:]:
    try:
        s = importlib.util.find_spec(name)
    except BaseException as e:
        print("fail %s: %s: %s" % (name, type(e).__name__, str(e).replace("\n", " ")))
        continue
    if s is None:
        print("none", name)
        continue
    origin = s.origin if s.has_location else None
    print("spec %s\t%s\t%s" % (name, origin or "-", "\x1f".join(s.submodule_search_locations or [])))
`

// Spec is where an interpreter takes a top-level name from.
type Spec struct {
	Found     bool
	Origin    string   // the module or __init__ file; "" for a namespace package
	Locations []string // a package's directories
	Err       string   // find_spec failed
}

// Specs asks the interpreter python of root ("" = the first of
// Interpreters), run with root as "/" in the sandbox, where it would
// import each name from; paths are inside root.
func Specs(root, python string, names []string) (py string, specs map[string]Spec, err error) {
	if py, err = interpreter(root, python); err != nil {
		return "", nil, err
	}
	_, out, errb, exit, err := runPython(root, "", py, append([]string{"-c", specScript}, names...))
	if err != nil {
		return py, nil, err
	}
	specs = map[string]Spec{}
	for _, line := range strings.Split(out.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "spec "):
			f := strings.Split(strings.TrimPrefix(line, "spec "), "\t")
			if len(f) != 3 {
				continue
			}
			sp := Spec{Found: true, Origin: f[1]}
			if sp.Origin == "-" {
				sp.Origin = ""
			}
			if f[2] != "" {
				sp.Locations = strings.Split(f[2], "\x1f")
			}
			specs[f[0]] = sp
		case strings.HasPrefix(line, "none "):
			specs[strings.TrimPrefix(line, "none ")] = Spec{}
		case strings.HasPrefix(line, "fail "):
			name, msg, _ := strings.Cut(strings.TrimPrefix(line, "fail "), ": ")
			specs[name] = Spec{Err: msg}
		}
	}
	for _, n := range names {
		if _, ok := specs[n]; !ok {
			return py, nil, fmt.Errorf("%s in %s gave no answer for %s (exit %v): %s", py, root, n, exit, lastLine(errb.String()))
		}
	}
	return py, specs, nil
}

func runImports(base, tree, py string, mods, pkgs []string) (map[string]string, map[string]imported, error) {
	args := []string{"-c", importScript}
	for _, m := range mods {
		args = append(args, "mod:"+m)
	}
	for _, p := range pkgs {
		args = append(args, "pkg:"+p)
	}
	mp, out, errb, err, serr := runPython(base, tree, py, args)
	if serr != nil {
		return nil, nil, serr
	}
	failed := map[string]string{}
	got := map[string]imported{}
	seen := map[string]bool{}
	for _, line := range strings.Split(out.String(), "\n") {
		if name, ok := strings.CutPrefix(line, "ok "); ok {
			seen[name] = true
		} else if rest, ok := strings.CutPrefix(line, "pkg "); ok {
			f := strings.Split(rest, "\t")
			if len(f) != 3 {
				continue
			}
			im := imported{File: f[1], Tree: filepath.Join(mp, treeSub)}
			if im.File == "-" {
				im.File = ""
			}
			if f[2] != "" {
				im.Paths = strings.Split(f[2], "\x1f")
			}
			seen[f[0]], got[f[0]] = true, im
		} else if rest, ok := strings.CutPrefix(line, "fail "); ok {
			name, msg, _ := strings.Cut(rest, ": ")
			seen[name] = true
			failed[name] = msg
		}
	}
	for _, m := range append(slices.Clone(mods), pkgs...) {
		if !seen[m] {
			failed[m] = fmt.Sprintf("the interpreter gave no answer (exit %v): %s", err, lastLine(errb.String()))
		}
	}
	return failed, got, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// sandboxFailed is the child's exit code when it could not set up.
const sandboxFailed = 125

// SandboxChild runs the sandbox's inside when this process is one (the
// program's main and test mains call it first); it does not return then.
func SandboxChild() {
	spec, ok := os.LookupEnv(sandboxEnv)
	if !ok {
		return
	}
	var f []string
	if json.Unmarshal([]byte(spec), &f) != nil || len(f) != 4 {
		fmt.Fprintf(os.Stderr, "bad %s\n", sandboxEnv)
		os.Exit(sandboxFailed)
	}
	if err := enter(f[0], f[1], f[2], f[3], os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(sandboxFailed)
	}
}

func enter(base, mp, tree, py string, args []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// The base bound onto itself, so it is a mount of this namespace.
	if err := unix.Mount(base, base, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", base, err)
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1", "PYTHONNOUSERSITE=1", "LC_ALL=C.UTF-8"}
	if tree != "" {
		dir := filepath.Join(base, mp)
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755,size=1m"); err != nil {
			return fmt.Errorf("tmpfs on %s: %w", dir, err)
		}
		at := filepath.Join(dir, treeSub)
		if err := os.Mkdir(at, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(tree, at, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", tree, err)
		}
		unix.Mount("", at, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
		inside := filepath.Join(mp, treeSub)
		env = append(env, "PYTHONPATH="+inside, "LD_LIBRARY_PATH="+filepath.Join(inside, "lib"))
	}
	if err := unix.Chroot(base); err != nil {
		return fmt.Errorf("chroot %s: %w", base, err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	err := unix.Exec(py, append([]string{py}, args...), env)
	return fmt.Errorf("exec %s in %s: %w", py, base, err)
}
