// Package containers_test runs the recipe of this directory (run.sh) in a
// real OCI runtime: podman with runc, rootful and daemonless, against the
// overlay image `make overlay-image` wrote and an engine image assembled
// here without a registry. `make test-runtime` runs it; `make test` skips
// it (it builds images and takes a minute).
package containers_test

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/internal/testsupport/textbound"
	"github.com/infera/infera-exec/patches/patchdef"
)

// Container, volume and image names the stories and this file choose all
// start with this, and live in a podman storage of the test's own.
const prefix = "ie-e2e-"

func TestRuntime(t *testing.T) {
	if os.Getenv("INFERA_RUNTIME_TESTS") != "1" {
		t.Skip("container runtime tests (podman, runc): run by make test-runtime")
	}
	requireOrSkip := func(format string, args ...any) {
		t.Helper()
		why := fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" || os.Getenv("INFERA_REQUIRE_RUNTIME") == "1" {
			t.Fatalf("%s; CI=true or INFERA_REQUIRE_RUNTIME=1: the container runtime tests must run, not skip", why)
		}
		t.Skip(why)
	}
	if runtime.GOOS != "linux" {
		requireOrSkip("needs Linux")
	}
	if os.Geteuid() != 0 {
		requireOrSkip("needs root: the tests run podman rootful (as CI does)")
	}
	podman, err1 := exec.LookPath("podman")
	runc, err2 := exec.LookPath("runc")
	if err1 != nil || err2 != nil {
		requireOrSkip("needs podman and runc (apt-get install podman runc)")
	}
	const python = "/usr/bin/python3"
	minor, err := pythonMinor(python)
	if err != nil {
		requireOrSkip("needs Debian python3 for the engine image (apt-get install python3): %v", err)
	}
	if _, err := exec.LookPath("cc"); err != nil {
		requireOrSkip("needs a C compiler for the fake ROCm (apt-get install gcc libc6-dev)")
	}
	archive := os.Getenv("INFERA_OVERLAY_ARCHIVE")
	if archive == "" {
		archive = filepath.Join("..", "..", "build", "overlay.tar")
	}
	archive, _ = filepath.Abs(archive)
	if _, err := os.Stat(archive); err != nil {
		t.Fatalf("no overlay image: %v (make test-runtime builds it first with make overlay-image)", err)
	}
	recipe, _ := filepath.Abs("run.sh")

	// A podman of the test's own: its storage, run and temporary
	// directories are here, so nothing of the machine's podman is seen or
	// touched, and everything made here goes when the test ends.
	dir := t.TempDir()
	for _, d := range []string{"bin", "storage", "run", "tmp", "engine"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	wrapper := filepath.Join(dir, "bin", "podman")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --runtime %s --root %s --runroot %s --tmpdir %s \"$@\"\n",
		podman, runc, filepath.Join(dir, "storage"), filepath.Join(dir, "run"), filepath.Join(dir, "tmp"))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	pod := func(args ...string) (string, error) {
		out, err := exec.Command(wrapper, args...).CombinedOutput()
		return string(out), err
	}
	if out, err := pod("info"); err != nil {
		requireOrSkip("podman cannot run here: podman info: %v: %s", err, lastLines(out, 5))
	}
	t.Cleanup(func() { removeAll(t, pod) })

	// The limits the containers get, explicit: podman's defaults for root
	// (nofile 1048576, and nproc 32768 with podman 4.3) can be above what
	// runc may set where root lacks CAP_SYS_RESOURCE, and podman 4.3 runs
	// runc with a hard nproc of 32768, whatever the host's.
	nofile := min(hardLimit(syscall.RLIMIT_NOFILE), 65536)
	nproc := min(hardLimit(6 /* RLIMIT_NPROC */), 16384)

	out, err := pod("load", "-i", archive)
	if err != nil {
		t.Fatalf("podman load -i %s: %v\n%s", archive, err, out)
	}
	m := regexp.MustCompile(`Loaded image(?:\(s\))?: (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("podman load -i %s: no image name in %q", archive, out)
	}
	overlayImage := m[1]

	engineImage := "localhost/" + prefix + "engine:test"
	dist := fmt.Sprintf("/usr/local/lib/python3.%d/dist-packages", minor)
	if err := buildEngineImage(wrapper, engineImage, filepath.Join(dir, "engine"), python, minor, dist); err != nil {
		t.Fatal(err)
	}
	// A container that runs nothing of infera-exec: if this fails, the
	// runtime cannot start containers on this machine.
	if out, err := pod("run", "--rm", "--network", "none", "--ulimit", fmt.Sprintf("nofile=%d:%d", nofile, nofile),
		"--ulimit", fmt.Sprintf("nproc=%d:%d", nproc, nproc), "--entrypoint", "/usr/bin/python3", engineImage, "-c", "pass"); err != nil {
		requireOrSkip("podman cannot start a container here: %v: %s", err, lastLines(out, 5))
	}

	// Every text line of infera-exec in the stories within
	// logging.TextBound, as cmd/infera-exec's stories.
	testscript.RunT(textbound.T{T: t}, testscript.Params{
		Dir:                 "testdata/runtime",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", filepath.Dir(wrapper)+":"+os.Getenv("PATH"))
			env.Setenv("RUN", recipe)
			env.Setenv("OVERLAY_ARCHIVE", archive)
			env.Setenv("OVERLAY_IMAGE", overlayImage)
			env.Setenv("ENGINE_IMAGE", engineImage)
			env.Setenv("DIST", dist)
			env.Setenv("PYTREE", fmt.Sprintf("py3%d", minor))
			// Workers: one that runs until stopped, and one that shows,
			// from inside the container, which Mooncake connector file
			// Python imports, whether it holds the fix or the anchor, and
			// whether the imported class has the patched method.
			env.Setenv("SLEEPER", `import time; print("ready", flush=True); time.sleep(600)`)
			env.Setenv("CHECK", checkWorker)
			env.Setenv("RESTARTER", restartWorker)
			env.Setenv("STATEWORKER", stateWorker)
			env.Setenv("IDWORKER", idWorker)
			// The recipe's settings for a machine without GPUs, RDMA or
			// a network the containers need.
			env.Setenv("NOFILE", strconv.FormatUint(nofile, 10))
			env.Setenv("NPROC", strconv.FormatUint(nproc, 10))
			env.Setenv("NETWORK", "none")
			env.Setenv("SHM_SIZE", "1g")
			env.Setenv("HOST_LIBIONIC_DIR", filepath.Join(env.WorkDir, "no-host-libionic"))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitlog":   waitLog(wrapper),
			"exits":     exits,
			"envstdout": envStdout,
			"fastpath":  fastPath(wrapper),
			"holddev":   holdDevice(wrapper),
		},
	})
}

const checkWorker = `import importlib.util
name = "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector"
origin = importlib.util.find_spec(name).origin
src = open(origin).read()
print("origin", origin)
print("fixed", "conv = cache_or_caches[0]" in src, "anchor", "conv, _ = cache_or_caches" in src)
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector import MooncakeConnector
print("build_prom_metrics", hasattr(MooncakeConnector, "build_prom_metrics"))
`

// idWorker prints the credentials the worker runs with, as the kernel
// has them, its HOME, and whether the Mooncake connector it imports holds
// the fix.
const idWorker = `import os, importlib.util
print("uid", *os.getresuid(), "fs", open("/proc/self/status").read().split("Uid:")[1].split()[3])
print("gid", *os.getresgid())
print("groups", ",".join(map(str, sorted(os.getgroups()))) or "none")
caps = dict(l.split(":\t") for l in open("/proc/self/status").read().splitlines() if l.startswith("Cap"))
print("capeff", caps["CapEff"], "capprm", caps["CapPrm"])
print("home", os.environ.get("HOME"))
origin = importlib.util.find_spec("vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector").origin
print("fixed", "conv = cache_or_caches[0]" in open(origin).read())
`

// restartWorker runs until stopped, after printing the identity of the
// container's root mount (device number, and ctime of /) and the engine
// patches whose results infera-exec took from its record, as the report it
// wrote before starting the worker says.
const restartWorker = `import json, os, time
st = os.stat("/")
report = json.load(open("/run/infera-exec/report.json"))
recorded = sorted(r["id"] for r in report["patches"]["results"] if r.get("recorded"))
print("start mount=%d:%d recorded=%s" % (st.st_dev, st.st_ctime_ns, ",".join(recorded) or "-"), flush=True)
print("ready", flush=True)
time.sleep(600)
`

// stateWorker prints the identity of the container's root mount and,
// from the report infera-exec wrote before starting it, whether the
// payload's native tree loads and whether that verdict was taken from the
// state directory.
const stateWorker = `import json, os
st = os.stat("/")
print("root mount=%d:%d" % (st.st_dev, st.st_ctime_ns), flush=True)
report = json.load(open("/run/infera-exec/report.json"))
def verdicts(x):
    if isinstance(x, dict):
        if "tree" in x and "cached" in x and "checked" in x:
            yield x
        for v in x.values():
            yield from verdicts(v)
    elif isinstance(x, list):
        for v in x:
            yield from verdicts(v)
found = list(verdicts(report))
assert found, "no native load verdict in the report"
for v in found:
    print("native-load ok=%s cached=%s" % (not v.get("failed") and not v.get("error"), v["cached"]), flush=True)
`

// fastpath CONTAINER: in the log of a container started by restartWorker
// (the first start applying the patches and recording them), every start
// after the first took every vLLM patch's result from the record, on the
// mount the previous start had and on a new one (the record's keys
// survive it); the first took none.
func fastPath(podman string) func(ts *testscript.TestScript, neg bool, args []string) {
	locRE := regexp.MustCompile(`(?m)^infera-exec: vllm \S+ at \S+( \(location cached\))?$|^start mount=(\S+) recorded=(\S+)$`)
	return func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 1 {
			ts.Fatalf("usage: fastpath CONTAINER")
		}
		out, err := exec.Command(podman, "logs", args[0]).CombinedOutput()
		ts.Check(err)
		type start struct {
			cached bool
			mount  string
			recs   []string
		}
		var starts []start
		for _, m := range locRE.FindAllStringSubmatch(string(out), -1) {
			if m[3] == "" {
				starts = append(starts, start{cached: m[1] != ""})
				continue
			}
			if len(starts) == 0 || starts[len(starts)-1].mount != "" {
				ts.Fatalf("a start line without its infera-exec line before it")
			}
			starts[len(starts)-1].mount, starts[len(starts)-1].recs = m[2], strings.Split(m[3], ",")
		}
		// Every built-in vLLM definition's result comes from the record on
		// the fast path.
		defs, err := patchdef.Builtin()
		ts.Check(err)
		wantVLLM := 0
		for _, d := range defs {
			if d.Package == "vllm" {
				wantVLLM++
			}
		}
		kept := 0
		for i, s := range starts {
			vllm := 0
			for _, r := range s.recs {
				if strings.HasPrefix(r, "vllm-") {
					vllm++
				}
			}
			same := i > 0 && s.mount == starts[i-1].mount
			ts.Logf("start %d: mount %s (%s), location cached %t, %d vLLM patch results from the record", i+1, s.mount,
				map[bool]string{true: "kept", false: "new"}[same], s.cached, vllm)
			switch {
			case i == 0 && vllm > 0:
				ts.Fatalf("start 1 took patch results from a record before it had written anything")
			case i > 0 && vllm != wantVLLM:
				ts.Fatalf("start %d missed the record: %d of the %d vLLM patch results from it", i+1, vllm, wantVLLM)
			case i > 0 && same:
				kept++
			}
		}
		if len(starts) < 3 {
			ts.Fatalf("%d starts in the log, want 3 or more", len(starts))
		}
		if kept == 0 {
			ts.Logf("podman mounted the storage anew at every start: the fast path was not exercised")
		}
		// With the device number of a stopped container's root held
		// (holddev), its next start is on another device.
		if held := ts.Getenv("HELD_DEVICE"); held != "" {
			var moved bool
			for i := 1; i < len(starts); i++ {
				moved = moved || strings.HasPrefix(starts[i-1].mount, held+":") && !strings.HasPrefix(starts[i].mount, held+":")
			}
			if !moved {
				ts.Fatalf("device %s was held, yet no start after it had another device", held)
			}
		}
	}
}

// holddev CONTAINER | holddev -stdout: after a container (whose worker
// printed "mount=DEV:CTIME" of its root, as restartWorker and stateWorker
// do) has stopped, hold the anonymous device number its root mount had, so
// that the next start gets another one, as a node's other mounts may take
// it in between. The number is read from the container's log, or from the
// last command's stdout. The kernel hands out the lowest free number, so
// tmpfs mounts are made until one has it; they are released when the
// script ends. When the number is still mounted (podman kept the storage
// mounted) or taken, nothing is held, HELD_DEVICE stays empty, and
// fastpath does not ask for a new device.
func holdDevice(podman string) func(ts *testscript.TestScript, neg bool, args []string) {
	startRE := regexp.MustCompile(`(?m)\bmount=(\d+):\d+\b`)
	return func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 1 {
			ts.Fatalf("usage: holddev CONTAINER | holddev -stdout")
		}
		var out string
		if args[0] == "-stdout" {
			out = ts.ReadFile("stdout")
		} else {
			b, err := exec.Command(podman, "logs", args[0]).CombinedOutput()
			ts.Check(err)
			out = string(b)
		}
		m := startRE.FindAllStringSubmatch(out, -1)
		if m == nil {
			ts.Fatalf("no mount=DEV:CTIME line in %s", args[0])
		}
		dev, err := strconv.ParseUint(m[len(m)-1][1], 10, 64)
		ts.Check(err)
		if unix.Major(dev) != 0 {
			ts.Logf("the root mount's device %d:%d is no anonymous device: nothing held", unix.Major(dev), unix.Minor(dev))
			return
		}
		mi, err := os.ReadFile("/proc/self/mountinfo")
		ts.Check(err)
		if regexp.MustCompile(fmt.Sprintf(`(?m)^\d+ \d+ 0:%d `, unix.Minor(dev))).Match(mi) {
			ts.Logf("device 0:%d is still mounted (podman kept the storage mounted): nothing held", unix.Minor(dev))
			return
		}
		var held []string
		ts.Defer(func() {
			for _, d := range held {
				unix.Unmount(d, unix.MNT_DETACH)
			}
		})
		for i := 0; i < 4096; i++ {
			d := ts.MkAbs(fmt.Sprintf("held-devices/%d", i))
			ts.Check(os.MkdirAll(d, 0o755))
			ts.Check(unix.Mount("tmpfs", d, "tmpfs", 0, "size=4k"))
			held = append(held, d)
			var st unix.Stat_t
			ts.Check(unix.Stat(d, &st))
			switch got := uint64(st.Dev); {
			case got == dev:
				ts.Logf("holding device 0:%d (after %d other free numbers)", unix.Minor(dev), i)
				ts.Setenv("HELD_DEVICE", strconv.FormatUint(dev, 10))
				return
			case unix.Major(got) == 0 && unix.Minor(got) > unix.Minor(dev):
				ts.Logf("device 0:%d was taken again before it could be held: nothing held", unix.Minor(dev))
				return
			}
		}
		ts.Fatalf("4096 tmpfs mounts did not reach device 0:%d", unix.Minor(dev))
	}
}

// waitlog CONTAINER REGEXP [N]: wait (up to a minute) until N lines
// (default 1) of the container's log, stdout and stderr, match.
func waitLog(podman string) func(ts *testscript.TestScript, neg bool, args []string) {
	return func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) < 2 || len(args) > 3 {
			ts.Fatalf("usage: waitlog CONTAINER REGEXP [N]")
		}
		re, err := regexp.Compile("(?m)" + args[1])
		ts.Check(err)
		want := 1
		if len(args) == 3 {
			want, err = strconv.Atoi(args[2])
			ts.Check(err)
		}
		var out []byte
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			out, err = exec.Command(podman, "logs", args[0]).CombinedOutput()
			if err == nil && len(re.FindAll(out, -1)) >= want {
				return
			}
		}
		ts.Fatalf("fewer than %d lines of %s's log match %q after a minute (%v):\n%s", want, args[0], args[1], err, out)
	}
}

// exits CODE PROGRAM [ARG...]: run it as exec does; it must exit with CODE.
func exits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE PROGRAM [ARG...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			ts.Fatalf("%s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// envstdout VAR: set VAR to the last command's standard output, trimmed.
func envStdout(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: envstdout VAR")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
}

// removeAll removes, one by one and by name, the containers, volumes and
// images of the test's own podman storage.
func removeAll(t *testing.T, pod func(...string) (string, error)) {
	for _, kind := range []struct{ list, rm []string }{
		{[]string{"ps", "-a", "--format", "{{.Names}}"}, []string{"rm", "-f", "-t", "0"}},
		{[]string{"volume", "ls", "--format", "{{.Name}}"}, []string{"volume", "rm", "-f"}},
		{[]string{"images", "--format", "{{.ID}}"}, []string{"rmi", "-f"}},
	} {
		out, err := pod(kind.list...)
		if err != nil {
			t.Errorf("podman %s: %v: %s", strings.Join(kind.list, " "), err, out)
			continue
		}
		for _, name := range strings.Fields(out) {
			if out, err := pod(append(kind.rm, name)...); err != nil {
				t.Errorf("podman %s %s: %v: %s", strings.Join(kind.rm, " "), name, err, out)
			}
		}
	}
}

func hardLimit(resource int) uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(resource, &l); err != nil || l.Max > 1<<20 {
		return 1 << 20
	}
	return l.Max
}

func pythonMinor(python string) (int, error) {
	real, err := filepath.EvalSymlinks(python)
	if err != nil {
		return 0, err
	}
	var minor int
	if _, err := fmt.Sscanf(filepath.Base(real), "python3.%d", &minor); err != nil {
		return 0, fmt.Errorf("%s is %s, not python3.N", python, real)
	}
	return minor, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// buildEngineImage imports into podman, as image name, a stand-in for a
// stock vLLM ROCm image, built from this machine's files without a
// registry: Debian's python3 with its standard library and the shared
// libraries they load, a fake ROCm 7 at /opt/rocm (a real ELF
// libamdhip64.so.7, as `make demo` has), and a vLLM install whose fixes
// are pending in dist (Debian's /usr/local/lib/python3.N/dist-packages, the
// vendor images' layout), compiled. Like vendor images it has an ENTRYPOINT of its
// own (one that refuses), which the recipe must replace, and a WORKDIR
// that is not /.
func buildEngineImage(podman, name, work, python string, minor int, dist string) error {
	r := &rootTar{entries: map[string]*entry{}}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if target, err := os.Readlink(d); err == nil {
			r.symlink(d, target) // merged /usr
		}
	}
	stdlib := fmt.Sprintf("/usr/lib/python3.%d", minor)
	if err := r.hostTree(stdlib, stdlib, func(rel string) bool { return strings.HasPrefix(rel, "config-") }); err != nil {
		return err
	}
	if etc := fmt.Sprintf("/etc/python3.%d", minor); exists(etc) {
		if err := r.hostTree(etc, etc, nil); err != nil {
			return err
		}
	}
	// The interpreter and the closure of what it and its extension
	// modules load.
	objects, _ := filepath.Glob(filepath.Join(stdlib, "lib-dynload", "*.so"))
	libs, err := neededLibraries(append([]string{python}, objects...))
	if err != nil {
		return err
	}
	for _, p := range append([]string{python}, libs...) {
		if err := r.hostFile(p); err != nil {
			return err
		}
	}

	rocm := filepath.Join(work, "rocm")
	if err := fixture.ROCm(rocm, 7, "7.1.70100"); err != nil {
		return err
	}
	if err := r.hostTree(rocm, "/opt/rocm", nil); err != nil {
		return err
	}
	// Compiled, as pip compiles what it installs: a worker importing the
	// engine writes no new __pycache__ directory into its packages.
	site := filepath.Join(work, "site-packages")
	if err := fixture.CopyTree(filepath.Join("..", "..", "patches", "testdata", "trees", "vllm-pending", "site-packages"), site); err != nil {
		return err
	}
	if out, err := exec.Command(python, "-m", "compileall", "-q", "-d", dist, site).CombinedOutput(); err != nil {
		return fmt.Errorf("compileall: %v: %s", err, out)
	}
	if err := r.hostTree(site, dist, nil); err != nil {
		return err
	}
	r.data("/etc/passwd", 0o644, "root:x:0:0:root:/root:/usr/sbin/nologin\n")
	r.data("/etc/group", 0o644, "root:x:0:\n")
	r.data("/usr/local/bin/stock-entrypoint", 0o755,
		"#!/usr/bin/python3\n# The engine image's own entrypoint: the recipe must replace it.\nimport sys\nsys.exit(\"the stock entrypoint ran: %r\" % sys.argv[1:])\n")
	for d, mode := range map[string]fs.FileMode{"/tmp": fs.ModeSticky | 0o777, "/run": 0o755, "/proc": 0o755, "/sys": 0o755, "/dev": 0o755, "/root": 0o700, "/app": 0o755} {
		r.dir(d, mode)
	}

	cmd := exec.Command(podman, "import", "--quiet",
		"--change", `ENTRYPOINT ["/usr/local/bin/stock-entrypoint"]`,
		"--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"--change", "WORKDIR /app",
		"-", name)
	pr, pw := io.Pipe()
	cmd.Stdin = pr
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	werr := r.write(pw)
	pw.CloseWithError(werr)
	if err := cmd.Wait(); err != nil || werr != nil {
		return fmt.Errorf("podman import %s: %v %v: %s", name, werr, err, out.String())
	}
	return nil
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// neededLibraries lists the shared libraries the objects load, as ldd
// names them (the dynamic loader among them).
func neededLibraries(objects []string) ([]string, error) {
	out, err := exec.Command("ldd", objects...).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd: %v", err)
	}
	seen := map[string]bool{}
	var libs []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "\t") {
			continue // "object:" heading
		}
		f := strings.Fields(line)
		var p string
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			p = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			p = f[0] // the dynamic loader
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("ldd: %s", strings.TrimSpace(line))
		}
		if p != "" && !seen[p] {
			seen[p] = true
			libs = append(libs, p)
		}
	}
	return libs, nil
}

// rootTar is a root filesystem to be written as one tar stream: entries
// by their absolute path in the image, parents made as directories.
type rootTar struct {
	entries map[string]*entry
}

// An entry's time is its file's, in whole seconds (as a pyc records its
// source's; the tar writer would round it to the nearest second).
type entry struct {
	hdr  tar.Header
	from string // host file with the content
	body string // or the content itself
}

func (r *rootTar) add(name string, e *entry) {
	name = filepath.Clean(name)
	for d := filepath.Dir(name); d != "/"; d = filepath.Dir(d) {
		if _, ok := r.entries[d]; !ok {
			r.dir(d, 0o755)
		}
	}
	e.hdr.Name = strings.TrimPrefix(name, "/")
	if e.hdr.ModTime.IsZero() {
		e.hdr.ModTime = time.Unix(0, 0)
	}
	r.entries[name] = e
}

func (r *rootTar) dir(name string, mode fs.FileMode) {
	m := int64(mode.Perm())
	if mode&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	r.add(name, &entry{hdr: tar.Header{Typeflag: tar.TypeDir, Mode: m}})
}

func (r *rootTar) symlink(name, target string) {
	r.add(name, &entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}})
}

func (r *rootTar) data(name string, mode fs.FileMode, body string) {
	r.add(name, &entry{hdr: tar.Header{Typeflag: tar.TypeReg, Mode: int64(mode.Perm()), Size: int64(len(body))}, body: body})
}

// hostFile adds the host file at p under the same path, each link of its
// chain as a link and the file it ends at, with every directory on the
// way taken as the host resolves it (so /lib/x/libc.so.6 lands in
// /usr/lib/x when /lib is a link to usr/lib).
func (r *rootTar) hostFile(p string) error {
	for hops := 0; hops < 40; hops++ {
		dir, err := filepath.EvalSymlinks(filepath.Dir(p))
		if err != nil {
			return err
		}
		p = filepath.Join(dir, filepath.Base(p))
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			r.add(p, &entry{hdr: tar.Header{Typeflag: tar.TypeReg, Mode: int64(fi.Mode().Perm()), Size: fi.Size(), ModTime: fi.ModTime().Truncate(time.Second)}, from: p})
			return nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		r.symlink(p, target)
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		p = target
	}
	return fmt.Errorf("%s: too many links", p)
}

// hostTree adds the host directory src as dest: directories, regular
// files with their modes and times, links as links. skip, if not nil,
// leaves out entries by their path relative to src.
func (r *rootTar) hostTree(src, dest string, skip func(rel string) bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if skip != nil && rel != "." && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		name := filepath.Join(dest, rel)
		switch {
		case d.IsDir():
			r.dir(name, fi.Mode())
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			r.symlink(name, target)
		case fi.Mode().IsRegular():
			r.add(name, &entry{hdr: tar.Header{Typeflag: tar.TypeReg, Mode: int64(fi.Mode().Perm()), Size: fi.Size(), ModTime: fi.ModTime().Truncate(time.Second)}, from: p})
		}
		return nil
	})
}

// write writes the entries in path order, so that every directory comes
// before what it holds.
func (r *rootTar) write(w io.Writer) error {
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		e := r.entries[n]
		hdr := e.hdr
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			return err
		}
		switch {
		case e.from != "":
			f, err := os.Open(e.from)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, hdr.Size)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %v", e.from, err)
			}
		case e.body != "":
			if _, err := io.WriteString(tw, e.body); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}
