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

// importScript imports each module named on argv and prints one line per
// module: "ok NAME" or "fail NAME: ERROR".
const importScript = `import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        print("ok", name)
    except BaseException as e:
        print("fail %s: %s: %s" % (name, type(e).__name__, str(e).replace("\n", " ")))
`

// ImportResult is the base interpreter's answer for each module.
type ImportResult struct {
	Python  string              // the interpreter, a path inside the base
	WithOut map[string]string   // module -> error without the tree ("" = it imported)
	Failed  map[string]string   // module -> error with the tree
	Modules map[string][]string // package -> its extension modules
}

func (r *ImportResult) failures(pkg string) []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, m := range r.Modules[pkg] {
		if e, ok := r.Failed[m]; ok {
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

// Import imports every module with the base's interpreter, once without
// the tree (to show what the tree adds) and once with it. An error means
// the check could not run: it is not a pass.
func Import(base, python, tree string, mods map[string][]string) (*ImportResult, error) {
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
	if r.WithOut, err = runImports(base, "", py, all); err != nil {
		return nil, err
	}
	if r.Failed, err = runImports(base, tree, py, all); err != nil {
		return nil, err
	}
	return r, nil
}

// Importable runs the import of mods with base's interpreter, with tree
// ("" = without), and returns module -> error for those that failed.
func Importable(base, tree, python string, mods []string) (map[string]string, error) {
	py, err := interpreter(base, python)
	if err != nil {
		return nil, err
	}
	return runImports(base, tree, py, mods)
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

func runImports(base, tree, py string, mods []string) (map[string]string, error) {
	mp := ""
	for _, m := range mountPoints {
		if fi, err := os.Stat(filepath.Join(base, m)); err == nil && fi.IsDir() {
			mp = m
			break
		}
	}
	if mp == "" {
		return nil, fmt.Errorf("the base %s has none of %s to mount the tree on", base, strings.Join(mountPoints, ", "))
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot re-execute this program for the sandbox: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), importTime)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, append([]string{"-c", importScript}, mods...)...)
	spec, _ := json.Marshal([]string{base, mp, tree, py})
	cmd.Env = []string{sandboxEnv + "=" + string(spec)}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
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
		return nil, fmt.Errorf("cannot start the import sandbox (a user and mount namespace): %w; the import check did not run", err)
	}
	if exit != nil && exit.ExitCode() == sandboxFailed {
		return nil, fmt.Errorf("the import sandbox failed: %s; the import check did not run", strings.TrimSpace(errb.String()))
	}
	failed := map[string]string{}
	seen := map[string]bool{}
	for _, line := range strings.Split(out.String(), "\n") {
		if name, ok := strings.CutPrefix(line, "ok "); ok {
			seen[name] = true
		} else if rest, ok := strings.CutPrefix(line, "fail "); ok {
			name, msg, _ := strings.Cut(rest, ": ")
			seen[name] = true
			failed[name] = msg
		}
	}
	for _, m := range mods {
		if !seen[m] {
			failed[m] = fmt.Sprintf("the interpreter gave no answer (exit %v): %s", err, lastLine(errb.String()))
		}
	}
	return failed, nil
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
