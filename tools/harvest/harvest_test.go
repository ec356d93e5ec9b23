package harvest_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/elfload"
	"github.com/infera/infera-exec/internal/pyimport"
	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/tools/harvest"
	"github.com/infera/infera-exec/tools/outdir"
	"github.com/infera/infera-exec/tools/prune"
)

func TestMain(m *testing.M) {
	harvest.SandboxChild() // the import check re-executes this binary
	code := m.Run()
	if rootsDir != "" {
		os.RemoveAll(rootsDir)
	}
	os.Exit(code)
}

// debDir is where .ci/run downloads the packages of testdata/debs.txt.
func debDir() string {
	if d := os.Getenv("INFERA_DEB_DIR"); d != "" {
		return d
	}
	return "/var/cache/infera-exec/debs"
}

var (
	rootsOnce             sync.Once
	builderRoot, baseRoot string
	rootsDir              string // removed when the tests end
	rootsErr              string
)

// roots builds the builder root (base packages plus lxml, pyverbs and
// their libraries) and the base root (a Python 3.11 without them) from the
// .deb files, once for all tests. Missing inputs skip, naming the command
// that provides them; with INFERA_REQUIRE_FIXTURES=1 they fail.
func roots(t *testing.T) (builder, base string) {
	t.Helper()
	rootsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "harvest-roots-")
		if err != nil {
			rootsErr = err.Error()
			return
		}
		rootsDir = dir
		builderRoot, baseRoot = filepath.Join(dir, "builder"), filepath.Join(dir, "base")
		f, err := os.Open("testdata/debs.txt")
		if err != nil {
			rootsErr = err.Error()
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			where, name, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
			if !ok || strings.HasPrefix(where, "#") {
				continue
			}
			debs, _ := filepath.Glob(filepath.Join(debDir(), name+"_*.deb"))
			if len(debs) == 0 {
				rootsErr = "no " + name + "_*.deb in " + debDir() + "; run: mkdir -p " + debDir() + " && cd " + debDir() + " && apt-get download $(awk '!/^#/ {print $2}' tools/harvest/testdata/debs.txt) (as .ci/run does)"
				return
			}
			targets := []string{builderRoot}
			if where == "base" {
				targets = append(targets, baseRoot)
			}
			for _, r := range targets {
				if out, err := exec.Command("dpkg-deb", "-x", debs[len(debs)-1], r).CombinedOutput(); err != nil {
					rootsErr = "dpkg-deb -x " + debs[len(debs)-1] + ": " + string(out)
					return
				}
			}
		}
		// What the postinst of libblas3 and liblapack3 does
		// (update-alternatives): the soname links the loader finds.
		for _, l := range []string{"blas/libblas.so.3", "lapack/liblapack.so.3"} {
			os.Symlink(l, filepath.Join(builderRoot, "usr/lib/x86_64-linux-gnu", filepath.Base(l)))
		}
		// Image roots have a /tmp; the import check mounts the tree there.
		for _, r := range []string{builderRoot, baseRoot} {
			os.MkdirAll(filepath.Join(r, "tmp"), 0o1777)
		}
	})
	if rootsErr != "" {
		if os.Getenv("INFERA_REQUIRE_FIXTURES") == "1" {
			t.Fatal(rootsErr)
		}
		t.Skip(rootsErr)
	}
	return builderRoot, baseRoot
}

func TestHarvestProvesTheTreeAgainstABaseThatLacksTheLibraries(t *testing.T) {
	builder, base := roots(t)
	out := filepath.Join(t.TempDir(), "rocm7-py311")
	r, err := harvest.Run(harvest.Options{Root: builder, Base: base, Packages: []string{"lxml", "pyverbs"}, Out: out, ROCm: 7})
	require.NoError(t, err)
	var text bytes.Buffer
	r.WriteText(&text)
	t.Log(text.String())
	require.False(t, r.Failed(), text.String())
	require.Equal(t, "= 3.11", r.Python)
	require.Equal(t, ">= 7, < 8", r.ROCm)
	require.Contains(t, r.Granted, "lxml")
	require.Contains(t, r.Granted, "pyverbs")

	// The tree holds the libraries the base lacks, and none it provides.
	base0 := elfload.NewLoader(base, nil)
	libs, _ := os.ReadDir(filepath.Join(out, "lib"))
	names := map[string]bool{}
	for _, e := range libs {
		names[e.Name()] = true
		require.Empty(t, base0.Find(e.Name()), "lib/%s is in the base too", e.Name())
	}
	for _, want := range []string{"libxml2.so.2", "libxslt.so.1", "libibverbs.so.1", "librdmacm.so.1", "libnl-3.so.200"} {
		require.True(t, names[want], "lib/%s (a soname link) missing; lib/ has %v", want, names)
	}
	for _, never := range []string{"libc.so.6", "libz.so.1", "liblzma.so.5", "libpython3.11.so.1.0"} {
		require.False(t, names[never], "lib/%s is provided by the base and must not be copied", never)
	}
	// Soname links point at the files present.
	target, err := os.Readlink(filepath.Join(out, "lib", "libxml2.so.2"))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(out, "lib", target))

	// The base's python3 imports the packages only with the tree.
	mods := []string{"lxml.etree", "pyverbs.device"}
	without, err := harvest.Importable(base, "", "", mods)
	require.NoError(t, err)
	require.Contains(t, without, "lxml.etree")
	require.Contains(t, without, "pyverbs.device")
	with, err := harvest.Importable(base, out, "", mods)
	require.NoError(t, err)
	require.Empty(t, with)

	// The entry for payload.toml lists what was proven.
	entry, err := os.ReadFile(filepath.Join(out, harvest.TreeFile))
	require.NoError(t, err)
	require.Contains(t, string(entry), `"lxml" = ["lxml/*.so"`)
	require.Contains(t, string(entry), `python = "= 3.11"`)
}

// Debian's python3-numpy puts numpy in /usr/lib/python3/dist-packages
// (953 files) and a stray numpy/core/_multiarray_umath...so in
// /usr/lib/python3.11/dist-packages, which python3.11 searches after it.
// A search in name order took the stray directory (3 files), numpy
// imported as an empty namespace package and the tree was called good.
// The harvest takes what the builder's interpreter imports, says that
// another copy exists, and the base's interpreter imports numpy itself
// from the tree.
func TestHarvestTakesTheCopyTheBuildersPythonImports(t *testing.T) {
	builder, base := roots(t)
	out := filepath.Join(t.TempDir(), "tree")
	r, err := harvest.Run(harvest.Options{Root: builder, Base: base, Packages: []string{"numpy"}, Out: out, ROCm: 7})
	require.NoError(t, err)
	var text bytes.Buffer
	r.WriteText(&text)
	t.Log(text.String())
	require.Equal(t, []string{filepath.Join(builder, "usr/lib/python3/dist-packages/numpy")}, r.From["numpy"])
	require.Greater(t, r.Files["numpy"], 500)
	require.FileExists(t, filepath.Join(out, "numpy/__init__.py"))
	require.Contains(t, text.String(), "also present at "+filepath.Join(builder, "usr/lib/python3.11/dist-packages/numpy"))
	require.False(t, r.Failed(), text.String())
	require.Contains(t, r.Granted, "numpy")
	require.NotContains(t, r.Imports.Failed, "numpy")
}

// The builder's interpreter is asked where it imports each package from
// (find_spec in the sandbox) and must agree with the offline search: here
// Debian's sitecustomize (/etc/python3.11/sitecustomize.py, linked from
// the standard library) puts another lxml first, which no site directory shows,
// and the harvest refuses rather than take a copy the builder does not
// import.
func TestHarvestRefusesWhenTheBuildersInterpreterDisagrees(t *testing.T) {
	builder, base := roots(t)
	custom := filepath.Join(builder, "etc/python3.11/sitecustomize.py")
	alt := filepath.Join(builder, "opt/alt/lxml/__init__.py")
	require.NoError(t, os.MkdirAll(filepath.Dir(alt), 0o755))
	require.NoError(t, os.WriteFile(alt, nil, 0o644))
	require.NoError(t, os.WriteFile(custom, []byte("import sys\nsys.path.insert(0, '/opt/alt')\n"), 0o644))
	t.Cleanup(func() { os.Remove(custom); os.RemoveAll(filepath.Join(builder, "opt/alt")) })

	out := filepath.Join(t.TempDir(), "tree")
	_, err := harvest.Run(harvest.Options{Root: builder, Base: base, Packages: []string{"lxml"}, Out: out, ROCm: 7})
	require.Error(t, err)
	require.Contains(t, err.Error(), "package lxml: the builder's /usr/bin/python3 imports it from /opt/alt/lxml, the offline search found /usr/lib/python3/dist-packages/lxml")
	require.NoDirExists(t, out)

	// Without the sitecustomize they agree, and the account says so.
	os.Remove(custom)
	r, err := harvest.Run(harvest.Options{Root: builder, Base: base, Packages: []string{"lxml"}, Out: out, ROCm: 7})
	require.NoError(t, err)
	require.Equal(t, "located by the builder's /usr/bin/python3 (find_spec), as the offline search found", r.LocateNote)
}

// The import check imports each package itself: one that imports as a
// namespace package (a directory without __init__, all a partial copy
// leaves) while the builder's is a regular package is refused, as is one
// that does not come from the tree.
func TestImportCheckRefusesAnEmptyNamespacePackage(t *testing.T) {
	_, base := roots(t)
	tree := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(tree, "numpy", "core"), 0o755))
	r, err := harvest.Import(base, "", tree, nil, map[string]bool{"numpy": false, "json": false})
	require.NoError(t, err)
	require.Contains(t, r.Failed["numpy"], "imports as an empty namespace package")
	require.Contains(t, r.Failed["json"], "not from the tree")
	// A namespace package the builder has as one is accepted from the tree.
	r, err = harvest.Import(base, "", tree, nil, map[string]bool{"numpy": true})
	require.NoError(t, err)
	require.Empty(t, r.Failed)
}

// The offline lookup (package pyimport, which harvest, infera-exec
// --check and the start use) reads a Debian-like image root as its own
// interpreters do, each run in the sandbox with the root as "/": Debian's
// python3.11 with the editable installs the real pip makes (finder and
// path forms, their sources at the same paths inside the root) in
// /usr/local/lib/python3.11/dist-packages, a .pth naming a directory
// that holds a shadowed copy, Debian's stray numpy directory, and a venv
// made by hand at /opt/venv whose interpreter links to /usr/bin/python3.11
// (resolved inside the root) with its own copies. Each installation's
// sys.path and find_spec answers are the offline ones, and LocateOffline
// names what the preferred installation (the venv) imports, or, for what
// it cannot import, the next.
func TestOfflineLookupIsTheInterpreters(t *testing.T) {
	builder, _ := roots(t)
	ed, err := fixture.Editables()
	if err != nil {
		if os.Getenv("INFERA_REQUIRE_FIXTURES") == "1" {
			t.Fatal(err)
		}
		t.Skipf("%v (INFERA_REQUIRE_FIXTURES=1 makes this fail)", err)
	}
	var made []string
	t.Cleanup(func() {
		for _, p := range made {
			os.RemoveAll(p)
		}
	})
	put := func(rel, content string) {
		p := filepath.Join(builder, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		made = append(made, p)
	}
	dist := "usr/local/lib/python3.11/dist-packages"
	src := filepath.Join(builder, ed.Dir)
	require.NoError(t, os.MkdirAll(src, 0o755))
	made = append(made, src)
	for _, n := range fixture.EditableNames {
		require.NoError(t, fixture.CopyTree(filepath.Join(ed.Dir, "src-"+n), filepath.Join(src, "src-"+n)))
	}
	files, _ := os.ReadDir(ed.Files)
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(ed.Files, f.Name()))
		require.NoError(t, err)
		put(filepath.Join(dist, f.Name()), string(data))
	}
	put(filepath.Join(dist, "eng/__init__.py"), "")
	put("usr/lib/python3/dist-packages/zz-extra.pth", "/opt/extra\n")
	put("opt/extra/eng/__init__.py", "")
	put("opt/extra/edf/__init__.py", "") // on sys.path: before the finder
	put("opt/venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n")
	require.NoError(t, os.MkdirAll(filepath.Join(builder, "opt/venv/bin"), 0o755))
	require.NoError(t, os.Symlink("/usr/bin/python3.11", filepath.Join(builder, "opt/venv/bin/python3.11")))
	put("opt/venv/lib/python3.11/site-packages/eng/__init__.py", "")
	put("opt/venv/lib/python3.11/site-packages/lxml/__init__.py", "")
	made = append(made, filepath.Join(builder, "opt/venv"))

	names := append([]string{"eng", "lxml", "numpy", "six"}, fixture.EditableNames...)
	r := pyimport.ResolveImage(builder, names)
	var pys []string
	for _, a := range r.Installations {
		pys = append(pys, a.Interpreter)
	}
	require.Equal(t, []string{"/opt/venv/bin/python3.11", "/usr/bin/python3.11"}, pys)
	for _, a := range r.Installations {
		real, err := harvest.SysPath(builder, a.Interpreter)
		require.NoError(t, err)
		require.Equal(t, real, a.SysPath, a.Interpreter)
		_, specs, err := harvest.Specs(builder, a.Interpreter, names)
		require.NoError(t, err)
		for _, n := range names {
			got, want := a.Specs[n], specs[n]
			require.Empty(t, want.Err, "%s: %s", a.Interpreter, n)
			require.Equal(t, want.Found, got.Found, "%s: %s: real %+v, offline %+v", a.Interpreter, n, want, got)
			require.Equal(t, want.Origin, got.Origin, "%s: %s", a.Interpreter, n)
			require.Equal(t, want.Locations, got.Locations, "%s: %s", a.Interpreter, n)
		}
	}
	require.Equal(t, []string{"/opt/extra/edf"}, r.Installations[1].Specs["edf"].Locations, "a copy on sys.path comes before the editable finder")
	require.Equal(t, []string{"/usr/lib/python3/dist-packages/numpy"}, r.Installations[1].Specs["numpy"].Locations)

	loc, err := patches.LocateOffline(builder, names)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(builder, "opt/venv/lib/python3.11/site-packages/eng"), loc.Packages["eng"].Dir)
	require.Equal(t, []string{filepath.Join(builder, dist, "eng"), filepath.Join(builder, "opt/extra/eng")}, loc.Packages["eng"].Others)
	require.Equal(t, filepath.Join(builder, "opt/venv/lib/python3.11/site-packages/lxml"), loc.Packages["lxml"].Dir)
	require.Equal(t, filepath.Join(builder, "usr/lib/python3/dist-packages/numpy"), loc.Packages["numpy"].Dir)
	require.Equal(t, filepath.Join(builder, "opt/extra/edf"), loc.Packages["edf"].Dir)
	require.Equal(t, filepath.Join(builder, ed.Dir, "src-eds/src/eds"), loc.Packages["eds"].Dir)
	require.Equal(t, filepath.Join(builder, ed.Dir, "src-edc/edc"), loc.Packages["edc"].Dir)
}

func TestHarvestRefusesACapabilityWhoseLibraryNeedsANewerBase(t *testing.T) {
	builder, base := roots(t)
	out := filepath.Join(t.TempDir(), "tree")
	_, err := harvest.Run(harvest.Options{Root: builder, Base: base, Packages: []string{"lxml"}, Out: out, ROCm: 7, NoImport: true})
	require.NoError(t, err)

	// libxslt as a newer base's build would be: it needs a glibc symbol
	// version bookworm's glibc 2.36 does not define.
	lib := filepath.Join(out, "lib", "libxslt.so.1.1.35")
	renameNeededVersion(t, lib, "GLIBC_2.14", "GLIBC_2.99")
	checks, err := harvest.Verify(out, base)
	require.NoError(t, err)
	var problems, failing []string
	for _, c := range checks {
		problems = append(problems, c.Problems...)
		if !c.OK {
			failing = append(failing, c.Path)
		}
	}
	joined := strings.Join(problems, "\n")
	require.Contains(t, joined, "needs GLIBC_2.99 from libc.so.6")
	require.Contains(t, joined, "libxslt.so.1.1.35")
	// The extension module that loads it fails too: its closure holds it.
	require.Contains(t, strings.Join(failing, "\n"), "lxml/etree.cpython-311-x86_64-linux-gnu.so")
}

func TestHarvestWithoutBaseUsesThePolicy(t *testing.T) {
	builder, _ := roots(t)
	out := filepath.Join(t.TempDir(), "tree")
	r, err := harvest.Run(harvest.Options{Root: builder, Packages: []string{"pyverbs"}, Out: out, ROCm: 7})
	require.NoError(t, err)
	for _, l := range r.Copied {
		require.NotContains(t, l.Name, "libibverbs", "libibverbs is on the policy list")
		require.NotContains(t, l.Name, "libc.so")
	}
	require.Contains(t, r.ImportNote, "no base root")
}

func TestPruneRemovesDuplicatesAndReportsShadows(t *testing.T) {
	builder, _ := roots(t)
	tree := t.TempDir()
	// A pip --target tree: lxml at the builder's version (a duplicate),
	// six at another version than the builder's 1.16.0 (a shadow), and a
	// distribution the builder does not have.
	dist(t, tree, "lxml", "4.9.2", "lxml/__init__.py", "lxml/etree.py")
	dist(t, tree, "six", "1.17.0", "six.py")
	dist(t, tree, "infera_demo_only", "0.1", "infera_demo_only/__init__.py")
	r, err := prune.Run(prune.Options{Tree: tree, Base: builder})
	require.NoError(t, err)
	var text bytes.Buffer
	r.WriteText(&text, false)
	t.Log(text.String())
	require.Len(t, r.Matches, 2)
	shadows := r.Shadows()
	require.Len(t, shadows, 1)
	require.Equal(t, "1.17.0", shadows[0].TreeVersion)
	require.Equal(t, "1.16.0", shadows[0].BaseVersion)
	require.NoFileExists(t, filepath.Join(tree, "lxml", "etree.py"))
	require.NoDirExists(t, filepath.Join(tree, "lxml"))
	require.NoFileExists(t, filepath.Join(tree, "six.py"))
	require.DirExists(t, filepath.Join(tree, "infera_demo_only"))
	require.Equal(t, 1, r.Left)
	require.Contains(t, text.String(), "would have shadowed the base's 1.16.0")

	// The allow-list keeps one.
	dist(t, tree, "six", "1.17.0", "six.py")
	r, err = prune.Run(prune.Options{Tree: tree, Base: builder, Keep: []string{"Six"}})
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(tree, "six.py"))
	require.True(t, r.Matches[0].Kept)
}

// dist writes a distribution as pip --target leaves it: its files and a
// dist-info with METADATA and RECORD.
func dist(t *testing.T, tree, name, version string, files ...string) {
	meta := name + "-" + version + ".dist-info"
	record := []string{}
	for _, f := range files {
		p := filepath.Join(tree, f)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("# "+f+"\n"), 0o644))
		record = append(record, f+",,")
	}
	require.NoError(t, os.MkdirAll(filepath.Join(tree, meta), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tree, meta, "METADATA"), []byte("Metadata-Version: 2.1\nName: "+name+"\nVersion: "+version+"\n\n"), 0o644))
	record = append(record, meta+"/METADATA,,", meta+"/RECORD,,")
	require.NoError(t, os.WriteFile(filepath.Join(tree, meta, "RECORD"), []byte(strings.Join(record, "\n")+"\n"), 0o644))
}

// renameNeededVersion edits a library's .gnu.version_r in place: the
// needed version old becomes new (same length), with its ELF hash, as a
// build against a newer library would have it.
func renameNeededVersion(t *testing.T, path, old, new string) {
	t.Helper()
	require.Equal(t, len(old), len(new))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := elf.NewFile(bytes.NewReader(b))
	require.NoError(t, err)
	dynstr, vr := f.Section(".dynstr"), f.Section(".gnu.version_r")
	require.NotNil(t, dynstr)
	require.NotNil(t, vr)
	strs := b[dynstr.Offset : dynstr.Offset+dynstr.Size]
	str := func(off uint32) string {
		s := strs[off:]
		return string(s[:bytes.IndexByte(s, 0)])
	}
	le := binary.LittleEndian
	found := false
	for off := vr.Offset; ; {
		cnt, aux, next := le.Uint16(b[off+2:]), le.Uint32(b[off+8:]), le.Uint32(b[off+12:])
		a := off + uint64(aux)
		for i := uint16(0); i < cnt; i++ {
			if str(le.Uint32(b[a+8:])) == old {
				le.PutUint32(b[a:], elfHash(new))
				copy(strs[le.Uint32(b[a+8:]):], new)
				found = true
			}
			a += uint64(le.Uint32(b[a+12:]))
		}
		if next == 0 {
			break
		}
		off += uint64(next)
	}
	require.True(t, found, "%s needs no %s", path, old)
	require.NoError(t, os.WriteFile(path, b, 0o755))
}

func elfHash(s string) uint32 {
	var h uint32
	for _, c := range []byte(s) {
		h = h<<4 + uint32(c)
		if g := h & 0xf0000000; g != 0 {
			h ^= g >> 24
		}
		h &^= 0xf0000000
	}
	return h
}

// -out is replaced: one that holds or sits inside a root, or is a
// non-empty directory no harvest wrote, is refused before anything is
// read or removed, naming the path and the fix.
func TestHarvestRefusesAnOutputItDidNotWrite(t *testing.T) {
	dir := t.TempDir()
	root, base := filepath.Join(dir, "builder"), filepath.Join(dir, "base")
	for _, f := range []string{filepath.Join(root, "usr", "lib", "keep"), filepath.Join(base, "usr", "lib", "keep"), filepath.Join(dir, "native", "rocm7-py312", "keep")} {
		require.NoError(t, os.MkdirAll(filepath.Dir(f), 0o755))
		require.NoError(t, os.WriteFile(f, []byte("input"), 0o644))
	}
	for out, want := range map[string]string{
		dir:                          "holds -root " + root,
		root:                         "is -root",
		filepath.Join(root, "out"):   "is inside -root " + root,
		filepath.Join(base, "tree"):  "is inside -base " + base,
		filepath.Join(dir, "native"): "is a non-empty directory that infera-payload did not write",
		filepath.Join(dir, "new"):    "", // new: accepted (fails later, on the empty root)
	} {
		_, err := harvest.Run(harvest.Options{Root: root, Base: base, Packages: []string{"x"}, Out: out, NoImport: true})
		require.Error(t, err, out)
		var refused *outdir.Error
		if want == "" {
			assert.False(t, errors.As(err, &refused), "%s: %v", out, err)
			continue
		}
		require.ErrorAs(t, err, &refused, out)
		assert.Contains(t, err.Error(), "-out "+out+": "+want)
		for _, f := range []string{filepath.Join(root, "usr", "lib", "keep"), filepath.Join(base, "usr", "lib", "keep"), filepath.Join(dir, "native", "rocm7-py312", "keep")} {
			assert.FileExists(t, f, "-out %s", out)
		}
	}
}
