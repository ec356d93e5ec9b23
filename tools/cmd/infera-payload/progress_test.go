package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/progress"
)

// steppedClock makes every reading of the progress clock one interval
// later than the last, so each file counted says a line: the reporter's
// wiring is seen without waiting for real time to pass.
func steppedClock(t *testing.T) {
	now := time.Unix(1700000000, 0)
	old := clock
	clock = func() time.Time { now = now.Add(progress.Interval); return now }
	t.Cleanup(func() { clock = old })
}

// progressLines are the progress lines of stderr for step, text format.
func progressLines(stderr, step string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "infera-payload: "+step+":") || strings.HasPrefix(l, "infera-payload: "+step+" done:") {
			out = append(out, l)
		}
	}
	return out
}

// pyTree is a small pip --target tree: n files of 1000 bytes.
func pyTree(t *testing.T, dir string, n int) {
	for i := range n {
		p := filepath.Join(dir, "demo_pkg", "m"+string(rune('a'+i))+".py")
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("#", 999)+"\n"), 0o644))
	}
}

// index and image say how far they are, a line per file with the stepped
// clock, counts and bytes against the totals, and a summary per step;
// -q says nothing; INFERA_EXEC_LOG=json makes them JSON lines.
func TestIndexAndImageSayHowFarTheyAre(t *testing.T) {
	steppedClock(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "py312")
	pyTree(t, src, 3)
	bin := shim(t)
	fi, err := os.Stat(bin)
	require.NoError(t, err)
	binMB := float64(fi.Size()) / 1e6

	payload := filepath.Join(dir, "payload")
	r := runTool([]string{"index", "-out", payload, "-bin", bin, "-tree", src + ":py312"})
	require.Equal(t, 0, r.code, r.stderr)
	copied := progressLines(r.stderr, "index copy")
	require.Len(t, copied, 5, r.stderr) // the binary, 3 files, done
	assert.Regexp(t, `^infera-payload: index copy: 1 of 4 files, [0-9.]+ MB of [0-9.]+ MB \(2s\)$`, copied[0])
	total := regexp.MustCompile(`of ([0-9.]+) MB`).FindStringSubmatch(copied[0])[1]
	assert.Contains(t, copied[3], "4 of 4 files, "+total+" MB of "+total+" MB")
	assert.InDelta(t, binMB+0.003, atof(t, total), 0.06)
	assert.Regexp(t, `^infera-payload: index copy done: 4 files, `+regexp.QuoteMeta(total)+` MB in 10s$`, copied[4])
	hashed := progressLines(r.stderr, "index hash")
	require.NotEmpty(t, hashed, r.stderr)
	assert.Regexp(t, `^infera-payload: index hash done: 4 files, `+regexp.QuoteMeta(total)+` MB in `, hashed[len(hashed)-1])

	r = runTool([]string{"index", "-q", "-out", payload, "-bin", bin, "-tree", src + ":py312"})
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stderr, "-q: no progress")

	args := []string{"image", "-payload", payload, "-oci", filepath.Join(dir, "oci"), "-archive", "", "-arch", runtime.GOARCH}
	r = runTool(args)
	require.Equal(t, 0, r.code, r.stderr)
	// A line per file, and more while the binary, larger than one write,
	// is read (the stepped clock moves on every look at it).
	checked, layered := progressLines(r.stderr, "image check"), progressLines(r.stderr, "image layer")
	require.Greater(t, len(checked), 5, r.stderr)
	assert.Contains(t, checked[0], "image check: 0 of 4 files", "a line before the first file is done")
	assert.Contains(t, checked[len(checked)-2], "image check: 4 of 4 files")
	assert.Contains(t, checked[len(checked)-1], "image check done: 4 files, "+total+" MB")
	require.Greater(t, len(layered), 5, r.stderr)
	assert.Contains(t, layered[len(layered)-2], "image layer: 4 of 4 files, "+total+" MB of "+total+" MB")
	assert.Contains(t, layered[len(layered)-1], "image layer done: 4 files")

	r = runTool(append(args, "-q", "-force"))
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stderr, "-q: no progress")

	r = runTool(append(args, "-force"), "INFERA_EXEC_LOG=json")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	require.Greater(t, len(lines), 10, r.stderr)
	for _, l := range lines {
		assert.Regexp(t, `^\{"time":.*"level":"INFO","msg":"image (check|layer)( done)?: .*","logger":"infera-payload","event":"note","step":"main"\}$`, l)
	}
}

// harvest says how far its copy of the packages is.
func TestHarvestSaysHowFarItIs(t *testing.T) {
	steppedClock(t)
	dir := t.TempDir()
	builder := filepath.Join(dir, "builder")
	site := filepath.Join(builder, "usr/lib/python3.12/site-packages")
	pyTree(t, site, 2)
	require.NoError(t, os.WriteFile(filepath.Join(builder, "usr/lib/python3.12/os.py"), nil, 0o644))
	args := []string{"harvest", "-root", builder, "-package", "demo_pkg", "-out", filepath.Join(dir, "tree"), "-rocm", "7", "-no-import"}
	r := runTool(args)
	// A pure-Python package proves no capability (exit 1), but its files
	// were copied, and said so.
	lines := progressLines(r.stderr, "harvest copy")
	require.Len(t, lines, 3, r.stderr)
	assert.Equal(t, "infera-payload: harvest copy: 1 of 2 files, 0.0 MB of 0.0 MB (2s)", lines[0])
	assert.Equal(t, "infera-payload: harvest copy done: 2 files, 0.0 MB in 6s", lines[2])

	r = runTool(append(args, "-q", "-force"))
	assert.NotContains(t, r.stderr, "harvest copy", "-q: no progress")
}

// prune says how far its removal is; -base-site finds the base's
// packages in a venv outside the usual places, and names a place that
// holds none.
func TestPruneSaysHowFarItIsAndTakesTheBaseSite(t *testing.T) {
	steppedClock(t)
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	venvSite := filepath.Join(base, "app/.venv/lib/python3.12/site-packages")
	writeDist(t, venvSite, "six", "1.16.0", "six.py")
	require.NoError(t, os.WriteFile(filepath.Join(base, "app/.venv/pyvenv.cfg"), []byte("home = /usr/bin\n"), 0o644))
	tree := filepath.Join(dir, "tree")
	writeDist(t, tree, "six", "1.17.0", "six.py")

	r := runTool([]string{"prune", "-tree", tree, "-base", base})
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, "name where its packages live with -base-site, e.g. -base-site /app/.venv")

	r = runTool([]string{"prune", "-tree", tree, "-base", base, "-base-site", "/app"})
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, "-base-site /app: "+filepath.Join(base, "app")+" holds no site-packages")

	r = runTool([]string{"prune", "-tree", tree, "-base", base, "-base-site", "/app/.venv"})
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "removed six 1.17.0 (4 files): it would have shadowed the base's 1.16.0")
	assert.Contains(t, r.stdout, "compared with "+venvSite)
	lines := progressLines(r.stderr, "prune")
	require.Len(t, lines, 5, r.stderr) // six.py, its dist-info, METADATA, RECORD; done
	assert.Equal(t, "infera-payload: prune: 1 of 4 files, 0.0 MB of 0.0 MB (2s)", lines[0])
	assert.Equal(t, "infera-payload: prune done: 4 files, 0.0 MB in 10s", lines[4])
	assert.NoFileExists(t, filepath.Join(tree, "six.py"))

	// The site directory itself, and -q.
	writeDist(t, tree, "six", "1.17.0", "six.py")
	r = runTool([]string{"prune", "-q", "-tree", tree, "-base", base, "-base-site", "app/.venv/lib/python3.12/site-packages"})
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, r.stderr, "-q: no progress")
	assert.NoFileExists(t, filepath.Join(tree, "six.py"))
}

// writeDist writes a distribution as pip --target leaves it.
func writeDist(t *testing.T, site, name, version string, files ...string) {
	meta := name + "-" + version + ".dist-info"
	var record []string
	for _, f := range files {
		p := filepath.Join(site, f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("# "+f+"\n"), 0o644))
		record = append(record, f+",,")
	}
	require.NoError(t, os.MkdirAll(filepath.Join(site, meta), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(site, meta, "METADATA"), []byte("Metadata-Version: 2.1\nName: "+name+"\nVersion: "+version+"\n\n"), 0o644))
	record = append(record, meta+"/METADATA,,", meta+"/RECORD,,")
	require.NoError(t, os.WriteFile(filepath.Join(site, meta, "RECORD"), []byte(strings.Join(record, "\n")+"\n"), 0o644))
}

func atof(t *testing.T, s string) float64 {
	var f float64
	_, err := fmt.Sscan(s, &f)
	require.NoError(t, err)
	return f
}
