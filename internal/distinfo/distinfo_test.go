package distinfo

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// write creates root/rel with content, and its directories.
func write(t *testing.T, root, rel, content string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func mkdirs(t *testing.T, root string, rels ...string) {
	t.Helper()
	for _, rel := range rels {
		require.NoError(t, os.MkdirAll(filepath.Join(root, rel), 0o755))
	}
}

// within fails the test when f does not return in time: a read that
// blocks (a FIFO opened for reading waits for a writer) must not hang.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10s: a metadata file blocked the read", what)
	}
}

func TestSiteDirs(t *testing.T) {
	for _, tc := range []struct {
		name string
		dirs []string // directories under the image root
		file string   // a regular file where a site directory could be
		want []string // relative to the root, in search order
	}{
		{name: "empty image"},
		{
			// sitepath's order: venvs and conda environments under /opt,
			// a /usr/local build (with the user site before its own),
			// Debian's /usr Python in its site.py order.
			name: "every kind, in the interpreters' order",
			dirs: []string{
				"root/.local/lib/python3.12/site-packages",
				"opt/conda/envs/serve/lib/python3.11/site-packages",
				"opt/venv/lib/python3.10/site-packages",
				"usr/local/lib/python3.12/site-packages",
				"usr/lib/python3/dist-packages",
				"usr/lib/python3.12/dist-packages",
			},
			want: []string{
				"opt/conda/envs/serve/lib/python3.11/site-packages",
				"opt/venv/lib/python3.10/site-packages",
				"root/.local/lib/python3.12/site-packages",
				"usr/local/lib/python3.12/site-packages",
				"usr/lib/python3/dist-packages",
				"usr/lib/python3.12/dist-packages",
			},
		},
		{
			name: "a file is no site directory, nor is a lookalike",
			dirs: []string{"usr/local/lib/python3.12/dist-packages", "usr/lib/python2.7/dist-packages", "opt/venv/lib/python3.12/dist-packages"},
			file: "usr/local/lib/python3.11/site-packages",
			want: []string{"usr/local/lib/python3.12/dist-packages"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			mkdirs(t, root, tc.dirs...)
			if tc.file != "" {
				write(t, root, tc.file, "not a directory")
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, filepath.Join(root, w))
			}
			assert.Equal(t, want, SiteDirs(root))
		})
	}
}

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"numpy":          "numpy",
		"NumPy":          "numpy",
		"Demo.Pkg":       "demo-pkg",
		"demo_pkg":       "demo-pkg",
		"demo-pkg":       "demo-pkg",
		"demo__-.pkg":    "demo-pkg",
		"zope.interface": "zope-interface",
		"A_B.C-D":        "a-b-c-d",
	} {
		assert.Equal(t, want, Canonical(in), "Canonical(%q)", in)
	}
}

func TestList(t *testing.T) {
	site := t.TempDir()
	write(t, site, "numpy-2.3.5.dist-info/METADATA", "Metadata-Version: 2.1\r\nName: numpy\r\nVersion: 2.3.5\r\n\r\n")
	// Headers end at the first empty line: the body's "Version:" is text.
	write(t, site, "Demo_Pkg-1.0.dist-info/METADATA", "Name: Demo.Pkg\nVersion: 1.0.post1\n\nVersion: 9.9\n")
	write(t, site, "legacy-0.9-py3.11.egg-info/PKG-INFO", "Name: legacy\nVersion: 0.9\n")
	mkdirs(t, site, "nometa-3.1.dist-info", "old-0.1-py3.10.egg-info", "numpy")
	write(t, site, "file-1.0.dist-info", "a file, not a metadata directory")
	// A FIFO planted as METADATA: never opened for a blocking read; the
	// directory name stands in.
	mkdirs(t, site, "fifo-1.2.dist-info")
	require.NoError(t, syscall.Mkfifo(filepath.Join(site, "fifo-1.2.dist-info", "METADATA"), 0o644))
	// METADATA over the cap: not read (its header says 9.9).
	big := write(t, site, "big-1.0.dist-info/METADATA", "Name: big\nVersion: 9.9\n\n")
	require.NoError(t, os.Truncate(big, maxMeta+1))

	var got []Dist
	var err error
	within(t, "List", func() { got, err = List(site) })
	require.NoError(t, err)
	type nv struct{ Name, Version, Meta string }
	var short []nv
	for _, d := range got {
		assert.Equal(t, site, d.Site)
		short = append(short, nv{d.Name, d.Version, filepath.Base(d.Meta)})
	}
	assert.Equal(t, []nv{
		{"big", "1.0", "big-1.0.dist-info"},
		{"Demo.Pkg", "1.0.post1", "Demo_Pkg-1.0.dist-info"},
		{"fifo", "1.2", "fifo-1.2.dist-info"},
		{"legacy", "0.9", "legacy-0.9-py3.11.egg-info"},
		{"nometa", "3.1", "nometa-3.1.dist-info"},
		{"numpy", "2.3.5", "numpy-2.3.5.dist-info"},
		{"old", "0.1", "old-0.1-py3.10.egg-info"},
	}, short)
	assert.Equal(t, "demo-pkg", got[1].Key())

	missing := filepath.Join(site, "missing")
	_, err = List(missing)
	require.Error(t, err)
	assert.Contains(t, err.Error(), missing)
}

func TestVersion(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	write(t, second, "Demo_Pkg-1.0.dist-info/METADATA", "Name: Demo_Pkg\nVersion: 1.0.post1\n")
	write(t, second, "other-2.0.dist-info/METADATA", "Name: other\nVersion: 2.0\n")
	write(t, first, "legacy-0.9-py3.11.egg-info/PKG-INFO", "Name: legacy\nVersion: 0.9\n")
	write(t, first, "nover-1.0.dist-info/METADATA", "Name: nover\n")
	write(t, first, "twice-1.0.dist-info/METADATA", "Name: twice\nVersion: 1.0\n")
	write(t, first, "twice-1.1.dist-info/METADATA", "Name: twice\nVersion: 1.1\n")
	write(t, first, "other-2.0.egg-info", "Name: other\nVersion: 0.1\n") // a distutils file, not a directory
	// The first directory's copy cannot be read (a FIFO): it decides, read
	// without blocking, and the version is unknown. The second directory's
	// copy is another installation, never taken instead.
	mkdirs(t, first, "demo.pkg-7.0.dist-info")
	fifo := filepath.Join(first, "demo.pkg-7.0.dist-info", "METADATA")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	dirs := []string{filepath.Join(first, "missing"), first, second}

	for _, tc := range []struct{ dist, version, from, why string }{
		{"demo-pkg", "", fifo, "cannot read " + fifo + ": "},
		{"Demo.Pkg", "", fifo, "not a regular file"},
		{"legacy", "0.9", filepath.Join(first, "legacy-0.9-py3.11.egg-info", "PKG-INFO"), ""},
		{"other", "2.0", filepath.Join(second, "other-2.0.dist-info", "METADATA"), ""},
		{"nover", "", filepath.Join(first, "nover-1.0.dist-info", "METADATA"), "has no Version field"},
		{"twice", "", filepath.Join(first, "twice-1.0.dist-info", "METADATA"), "2 metadata directories for twice that do not agree"},
		{"absent", "", "", "no absent *.dist-info or *.egg-info in "},
	} {
		var f Found
		within(t, "Find", func() { f = Find(tc.dist, dirs) })
		assert.Equal(t, tc.version, f.Version, "Find(%q)", tc.dist)
		assert.Equal(t, tc.from, f.From, "Find(%q) read from", tc.dist)
		if tc.why == "" {
			assert.Empty(t, f.Why, tc.dist)
		} else {
			assert.Contains(t, f.Why, tc.why, tc.dist)
		}
		v, from := Version(tc.dist, dirs)
		assert.Equal(t, tc.version, v)
		assert.Equal(t, tc.from, from)
	}
}

func TestFiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		meta    string            // the metadata directory
		files   map[string]string // in the metadata directory
		want    []string
		wantErr string
	}{
		{
			name: "RECORD: quoted paths, repeats and entries outside the site left out",
			meta: "demo-1.0.dist-info",
			files: map[string]string{"RECORD": strings.Join([]string{
				"demo/__init__.py,sha256=abc,10",
				"demo/sub/mod.py,,",
				`"demo/we,ird.py",sha256=x,1`,
				`"demo/quo""te.py",,`,
				"../../../bin/demo-cli,sha256=y,5",
				"/usr/bin/demo-abs,,",
				"demo/./x.py,,",
				"demo/__init__.py,,",
				"demo-1.0.dist-info/RECORD,,",
				"",
			}, "\n")},
			want: []string{"demo/__init__.py", "demo/sub/mod.py", "demo/we,ird.py", `demo/quo"te.py`, "demo/x.py", "demo-1.0.dist-info/RECORD", "demo-1.0.dist-info"},
		},
		{
			name:    "RECORD missing is an error",
			meta:    "norecord-1.0.dist-info",
			files:   map[string]string{"METADATA": "Name: norecord\n"},
			wantErr: "RECORD",
		},
		{
			name: "installed-files.txt: relative to the egg-info directory",
			meta: "legacy-0.9-py3.11.egg-info",
			files: map[string]string{"installed-files.txt": strings.Join([]string{
				"../legacy/__init__.py",
				"../legacy/core.py",
				"../../../../bin/legacy",
				"PKG-INFO",
			}, "\n")},
			want: []string{"legacy/__init__.py", "legacy/core.py", "legacy-0.9-py3.11.egg-info/PKG-INFO", "legacy-0.9-py3.11.egg-info"},
		},
		{
			name:  "egg-info without installed-files.txt: the metadata directory only",
			meta:  "bare-0.1.egg-info",
			files: map[string]string{"PKG-INFO": "Name: bare\n"},
			want:  []string{"bare-0.1.egg-info"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			site := t.TempDir()
			for name, content := range tc.files {
				write(t, site, filepath.Join(tc.meta, name), content)
			}
			d := Dist{Meta: filepath.Join(site, tc.meta), Site: site}
			got, err := d.Files()
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestTopLevel(t *testing.T) {
	record := strings.Join([]string{
		"demo/__init__.py,,",
		"demo/core.py,,",
		"single.py,,",
		"_ext.cpython-312-x86_64-linux-gnu.so,,",
		"README.txt,,",
		"__pycache__/single.cpython-312.pyc,,",
		"demo-1.0.data/scripts/run,,",
		"demo-1.0.dist-info/METADATA,,",
		"../../../bin/demo,,",
	}, "\n")
	for _, tc := range []struct {
		name     string
		topLevel string // "" = no top_level.txt
		want     []string
	}{
		{name: "top_level.txt wins", topLevel: "demo\n\n_demo_native\n", want: []string{"demo", "_demo_native"}},
		{name: "from RECORD: packages and modules", want: []string{"demo", "single", "_ext"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			site := t.TempDir()
			write(t, site, "demo-1.0.dist-info/RECORD", record)
			if tc.topLevel != "" {
				write(t, site, "demo-1.0.dist-info/top_level.txt", tc.topLevel)
			}
			d := Dist{Meta: filepath.Join(site, "demo-1.0.dist-info"), Site: site}
			assert.Equal(t, tc.want, d.TopLevel())
		})
	}
}
