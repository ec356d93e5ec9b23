package overlay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzManifestLinks reads payload.toml over a payload whose directories
// are joined by a fuzzed graph of links (relative, absolute, looping,
// leaving the payload): whatever ReadManifest accepts, every tree
// directory and every search path that exists must resolve inside the
// payload, as the kernel resolves it.
func FuzzManifestLinks(f *testing.F) {
	f.Add("t", "out", "/etc", "t", "t", "native")  // an absolute link out
	f.Add("t", "up", "../..", "t", "t", "python")  // a relative link out
	f.Add("t", "loop", "loop", "t", "t", "native") // a link to itself
	f.Add("t", "in", "../t", "t", "t", "python")   // a link that stays
	f.Add("t", "d", "../u", "t", "t", "native")    // a link to an absent dir
	f.Fuzz(func(t *testing.T, dir, link, target, linkDir, treeDir, kind string) {
		for _, s := range []string{dir, link, linkDir, treeDir} {
			if s == "" || len(s) > 40 || strings.ContainsAny(s, "\x00\"\\\n") || strings.Contains(s, "..") || filepath.IsAbs(s) {
				return
			}
		}
		if len(target) > 60 || strings.ContainsAny(target, "\x00") {
			return
		}
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			return
		}
		if err := os.MkdirAll(filepath.Join(root, linkDir), 0o755); err != nil {
			return
		}
		os.Symlink(target, filepath.Join(root, linkDir, link))
		rocm := ""
		if kind == "native" {
			rocm = "rocm = \">= 7\"\n"
		}
		toml := "schema = 1\n[[tree]]\nname = \"t\"\nkind = \"" + strings.ReplaceAll(kind, "\"", "") + "\"\ndir = \"" + treeDir + "\"\npython = \">= 3.10\"\n" + rocm +
			"pythonpath = [\".\", \"" + link + "\"]\n"
		if err := os.WriteFile(filepath.Join(root, ManifestName), []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := ReadManifest(root)
		if err != nil {
			return
		}
		realRoot, err := filepath.EvalSymlinks(root)
		if err != nil {
			t.Fatal(err)
		}
		inside := func(p string) {
			r, err := filepath.EvalSymlinks(p)
			if err != nil {
				return // absent: nothing is read from it
			}
			if r != realRoot && !strings.HasPrefix(r, realRoot+"/") {
				t.Fatalf("accepted %s, which resolves to %s outside the payload %s", p, r, realRoot)
			}
		}
		for _, tr := range m.Trees {
			inside(filepath.Join(root, tr.Dir))
			for _, d := range tr.PythonPath {
				inside(filepath.Join(root, tr.Dir, d))
			}
		}
	})
}
