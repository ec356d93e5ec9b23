package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/infera/infera-exec/internal/sigstart"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/internal/testsupport/sandbox"
	"github.com/infera/infera-exec/internal/testsupport/textbound"
	"github.com/infera/infera-exec/overlay"
)

// The test binary doubles as two programs the stories run: the sandbox
// (a container built from namespaces) and show-worker (a worker that
// prints what it received).
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"sandbox":     func() { os.Exit(sandbox.Main()) },
		"show-worker": showWorker,
		// Signals sent to the init and where they arrive (sigtour_test.go).
		"sigtour": sigtour,
		// A FUSE filesystem that stops answering, and the story run
		// against it (deadmount_test.go).
		"dead-fuse-server": deadFuseServer,
		"dead-mount":       deadMount,
		// infera-exec-index DIR: write DIR's payload index, as make payload does.
		"infera-exec-index": func() {
			if _, err := overlay.WriteIndex(os.Args[1]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		},
	})
}

// showWorker prints, one key=value per line, what a worker started by
// infera-exec sees.
func showWorker() {
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	cwd, _ := os.Getwd()
	argv, _ := json.Marshal(os.Args[1:])
	fmt.Printf("argv=%s\n", argv)
	fmt.Printf("pid=%d\n", os.Getpid())
	fmt.Printf("ppid=%d\n", os.Getppid())
	fmt.Printf("uid=%d\n", os.Getuid())
	fmt.Printf("cwd=%s\n", cwd)
	fmt.Printf("nofile.soft=%d\nnofile.hard=%d\nnofile.raised=%t\n", lim.Cur, lim.Max, lim.Cur == lim.Max)
	for _, k := range []string{"PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "INFERA_ENGINE_READY_TIMEOUT", "RDMAV_DRIVERS", "INFERA_ADVERTISE_IP"} {
		v, ok := os.LookupEnv(k)
		if !ok {
			v = "(unset)"
		}
		fmt.Printf("env.%s=%s\n", k, v)
	}
	// Every process in the PID namespace of a sandbox: the shim must not be
	// among them.
	if entries, err := os.ReadDir("/proc"); err == nil && os.Getpid() == 1 {
		var pids []string
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
				pids = append(pids, e.Name()+":"+strings.TrimSpace(string(comm)))
			}
		}
		fmt.Printf("procs=%s\n", strings.Join(pids, ","))
	}
	os.Exit(0)
}

var (
	buildOnce sync.Once
	shimPath  string
	buildErr  error
)

// shim is the real static binary under test: the one `make build` made
// (INFERA_EXEC_BIN), or one built here the same way.
func shim(tb testing.TB) string {
	buildOnce.Do(func() {
		if p := os.Getenv("INFERA_EXEC_BIN"); p != "" {
			shimPath = p
			return
		}
		dir, err := os.MkdirTemp("", "infera-exec-bin-")
		if err != nil {
			buildErr = err
			return
		}
		shimPath = filepath.Join(dir, "infera-exec")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", entryFlag(), "-o", shimPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return shimPath
}

// entryFlag is the linker flag of `make build` that puts the entry point
// reading the start's signal dispositions in place (internal/sigstart),
// on amd64.
func entryFlag() string {
	if runtime.GOARCH != "amd64" {
		return ""
	}
	return "-E=" + sigstart.EntrySymbol
}

var (
	sandboxOnce sync.Once
	sandboxOK   bool
	sandboxWhy  string
)

// canSandbox reports whether namespaces can be made here. CI runs as root,
// where they always can; INFERA_REQUIRE_SANDBOX=1 turns "cannot" into a
// failure there instead of a skip.
func canSandbox() (bool, error) {
	sandboxOnce.Do(func() {
		out, err := exec.Command("unshare", "--mount", "--pid", "--fork", "--map-root-user", "true").CombinedOutput()
		if os.Geteuid() == 0 {
			out, err = exec.Command("unshare", "--mount", "--pid", "--fork", "true").CombinedOutput()
		}
		sandboxOK = err == nil
		sandboxWhy = strings.TrimSpace(string(out))
	})
	if !sandboxOK && os.Getenv("INFERA_REQUIRE_SANDBOX") == "1" {
		return false, fmt.Errorf("INFERA_REQUIRE_SANDBOX=1 but namespaces are unavailable: %s", sandboxWhy)
	}
	return sandboxOK, nil
}

func TestScripts(t *testing.T) {
	bin := shim(t)
	// Work directories another user can traverse: stories run the shim as
	// uid 1000 inside a sandbox.
	root := t.TempDir()
	helpers, err := exec.LookPath("show-worker")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, filepath.Dir(helpers), filepath.Dir(bin)} {
		if !strings.HasPrefix(dir, os.TempDir()+"/") {
			continue // only the test's own temporary directories
		}
		for d := dir; d != os.TempDir(); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Stories that need the binary inside a payload get a hard link of
	// this copy (shimlink), made here before any story runs: a copy
	// written while other stories fork is held open for writing by their
	// children until they exec, and executing it then fails with ETXTBSY.
	staged := filepath.Join(root, ".shim", "infera-exec")
	if err := os.MkdirAll(filepath.Dir(staged), 0o755); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(bin); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(staged, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// The package trees, variants assembled over their base.
	trees := filepath.Join(t.TempDir(), "trees")
	if err := fixture.Trees("../../patches/testdata/trees", trees); err != nil {
		t.Fatal(err)
	}
	params := testscript.Params{
		Dir:                 "testdata/script",
		WorkdirRoot:         root,
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("INFERA_EXEC", bin)
			env.Setenv("INFERA_EXEC_STAGED", staged)
			env.Setenv("PATH", filepath.Dir(bin)+":"+env.Getenv("PATH"))
			// Stories state their own configuration; nothing leaks in
			// from the machine running the tests.
			for _, k := range []string{"PAYLOAD_ROOT", "INFERA_PYTHON", "INFERA_REQUIRE_NATIVE", "INFERA_ENGINE_READY_TIMEOUT",
				"INFERA_EXEC_CHDIR", "INFERA_ABI_FAMILY", "ROCM_PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "INFERA_EXEC_LOG"} {
				env.Setenv(k, "")
			}
			env.Setenv("INFERA_EXEC_REPORT", "off")
			env.Setenv("INFERA_EXEC_TERMINATION_LOG", "off") // the machine's /dev/termination-log, if any, is not the stories'
			env.Setenv("INFERA_EXEC_STATE_DIR", filepath.Join(env.WorkDir, ".state"))
			// Engine patches have their own stories; elsewhere the stand-in
			// interpreters could not answer the package probe.
			env.Setenv("INFERA_SKIP_ENGINE_PATCHES", "1")
			// Likewise the preflight checks, which look at this machine.
			env.Setenv("INFERA_PREFLIGHT", "off")
			env.Setenv("GOARCH", runtime.GOARCH)
			env.Setenv("TREES", trees) // engine package trees shaped like the real ones
			engines, err := filepath.Abs("../../preflight/testdata/engines")
			if err != nil {
				return err
			}
			env.Setenv("ENGINES", engines) // extracts of real engine trees (their README names the revisions)
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "sandbox":
				return canSandbox()
			case "fuse":
				// A FUSE mount needs root (a private mount namespace
				// keeps it from the machine) and the kernel's /dev/fuse.
				ok, err := canSandbox()
				if err != nil {
					return false, err
				}
				_, ferr := os.Stat("/dev/fuse")
				ok = ok && os.Geteuid() == 0 && ferr == nil
				if !ok && os.Getenv("INFERA_REQUIRE_SANDBOX") == "1" {
					return false, fmt.Errorf("INFERA_REQUIRE_SANDBOX=1 but a FUSE mount cannot be made here: needs root and /dev/fuse (euid %d, %v)", os.Geteuid(), ferr)
				}
				return ok, nil
			case "root":
				return os.Geteuid() == 0, nil
			case "rdma":
				// Debian's rdma-core 44: libibverbs1, ibverbs-providers.
				_, err := os.Stat("/usr/lib/x86_64-linux-gnu/libmlx5.so.1.24.44.0")
				if err != nil && os.Getenv("INFERA_REQUIRE_FIXTURES") == "1" {
					return false, fmt.Errorf("INFERA_REQUIRE_FIXTURES=1 but rdma-core is not installed: %v", err)
				}
				return err == nil, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"shimlink": cmdShimlink,
			"mkrocm":   cmdMkrocm,
			"mkelf":    cmdMkelf,
			"mkpython": cmdMkpython,
			"jsonpath": cmdJSONPath,
			"treehash": cmdTreehash,
			"envfile":  cmdEnvfile,
			"mkrdma":   cmdMkrdma,
		},
	}
	if d, ok := t.Deadline(); ok {
		params.Deadline = d
	}
	testscript.RunT(textbound.T{T: t}, params) // every text line within logging.TextBound
}

// mkrocm DIR MAJOR FULL: a ROCm lib directory with the real symlink chain
// and an ELF libamdhip64 whose SONAME is libamdhip64.so.MAJOR.
func cmdMkrocm(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: mkrocm DIR MAJOR FULL")
	}
	major, err := strconv.Atoi(args[1])
	ts.Check(err)
	ts.Check(fixture.ROCm(ts.MkAbs(args[0]), major, args[2]))
}

// mkelf PATH SONAME [NEEDED...]: an ELF shared object that needs the
// given libraries (DT_NEEDED), which need not exist.
func cmdMkelf(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: mkelf PATH SONAME [NEEDED...]")
	}
	ts.Check(fixture.SharedObject(ts.MkAbs(args[0]), args[1], args[2:]...))
}

// mkpython PATH VERSION: an interpreter stand-in that answers VERSION
// (e.g. 3.12.4) to infera-exec's version question and runs nothing else.
func cmdMkpython(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: mkpython PATH VERSION")
	}
	p := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(filepath.Dir(p), 0o755))
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s' %q\n", args[1])
	ts.Check(os.WriteFile(p, []byte(script), 0o755))
}

// jsonpath FILE KEY.KEY... WANT: the JSON value at the path, compared as
// its compact JSON text (strings without quotes). A key of an array is an
// index, or id=X: the element whose "id" is X (a patch's result, wherever
// the set of definitions puts it).
func cmdJSONPath(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: jsonpath FILE PATH WANT")
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	var v any
	ts.Check(json.Unmarshal(data, &v))
	for _, k := range strings.Split(args[1], ".") {
		switch node := v.(type) {
		case map[string]any:
			v = node[k]
		case []any:
			if id, ok := strings.CutPrefix(k, "id="); ok {
				i := slices.IndexFunc(node, func(e any) bool {
					m, ok := e.(map[string]any)
					return ok && m["id"] == id
				})
				if i < 0 {
					ts.Fatalf("%s: no element with id %s", args[1], id)
				}
				v = node[i]
				continue
			}
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(node) {
				ts.Fatalf("%s: no element %s", args[1], k)
			}
			v = node[i]
		default:
			ts.Fatalf("%s: %s is not an object or array", args[1], k)
		}
	}
	got := ""
	if s, ok := v.(string); ok {
		got = s
	} else {
		b, _ := json.Marshal(v)
		got = string(b)
	}
	if (got == args[2]) == neg {
		ts.Fatalf("%s %s: got %s, want %s%s", args[0], args[1], got, map[bool]string{true: "not ", false: ""}[neg], args[2])
	}
}

// treehash DIR FILE: a listing of DIR (path, mode, size, mtime, content
// hash of each entry below it) written to FILE, to show that a run changed
// nothing. Listings themselves (*.treehash) are left out.
func cmdTreehash(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: treehash DIR FILE")
	}
	var b strings.Builder
	root := ts.MkAbs(args[0])
	ts.Check(filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." || strings.HasSuffix(p, ".treehash") {
			return nil
		}
		fmt.Fprintf(&b, "%s %s %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", hash(data))
		}
		b.WriteByte('\n')
		return nil
	}))
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(b.String()), 0o644))
}

// envfile NAME FILE: set NAME to the trimmed content of FILE (what a shell
// would do with NAME=$(cat FILE)).
func cmdEnvfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: envfile NAME FILE")
	}
	data, err := os.ReadFile(ts.MkAbs(args[1]))
	ts.Check(err)
	ts.Setenv(args[0], strings.TrimSpace(string(data)))
}

// mkrdma DIR: what a real-loader test needs, in DIR: ibvprobe and the
// nonetlink.so shim (built by cc), a fake sysfs in DIR/sys with one
// ConnectX device mlx5_0 (PCI 15b3:1017, which the mlx5 provider claims by
// its modalias) whose kernel ABI is RDMA_ABI (default 1), and
// DIR/devib/uverbs0 to bind at /dev/infiniband.
func cmdMkrdma(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: mkrdma DIR")
	}
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(filepath.Join(dir, "devib"), 0o755))
	ts.Check(os.WriteFile(filepath.Join(dir, "devib", "uverbs0"), nil, 0o644))
	ts.Check(fixture.RDMAProbes("../../internal/testsupport/fixture/rdma", dir))
	abi := 1
	if v := ts.Getenv("RDMA_ABI"); v != "" {
		var err error
		abi, err = strconv.Atoi(v)
		ts.Check(err)
	}
	ts.Check(fixture.FakeSysfs(filepath.Join(dir, "sys"), "mlx5_0", abi, "0x15b3", "0x1017"))
}

// shimlink DEST: DEST becomes a hard link of the binary under test (see
// TestScripts for why not a copy). Stories must not write to it.
func cmdShimlink(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: shimlink DEST")
	}
	dest := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(filepath.Dir(dest), 0o755))
	ts.Check(os.Link(ts.Getenv("INFERA_EXEC_STAGED"), dest))
}
