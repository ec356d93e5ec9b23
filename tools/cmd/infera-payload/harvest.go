package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/infera/infera-exec/tools/harvest"
	"github.com/infera/infera-exec/tools/prune"
)

// strList is a repeatable string flag.
type strList []string

func (s *strList) String() string     { return strings.Join(*s, ",") }
func (s *strList) Set(v string) error { *s = append(*s, v); return nil }

var harvestCommand = subcommand{
	name:     "harvest",
	summary:  "make a native tree: packages with native extensions and the libraries the base lacks, proven to load",
	synopsis: "-root BUILDER_ROOT -package NAME [-package NAME]... -out TREE_DIR [-base BASE_ROOT] [-rocm MAJOR] [-capability NAME=PKG[,PKG]]... [-q]",
	about: `
Takes the named Python packages from a builder root (an unpacked image, any
root filesystem; located offline: site directories, .pth files, editable
finders), follows their DT_NEEDED closure by the dynamic loader's rules
inside that root (RUNPATH/RPATH with $ORIGIN, /etc/ld.so.conf and its
includes, default directories), and copies into TREE_DIR/lib only the
libraries the base does not provide: found in the base root (-base), or,
without one, not on the policy list (glibc, libstdc++, libgcc_s, the ROCm
runtime, libnuma, libibverbs, libpython). Soname links are made from the
SONAME of each file copied.

Then it proves the tree: every ELF must load against the base (every
DT_NEEDED found in the tree or the base, every symbol version it needs
defined there), and with -base the base's interpreter must import every
extension module with the tree on PYTHONPATH and LD_LIBRARY_PATH, run with
the base as / in a user and mount namespace of its own. A capability
whose evidence fails either check is not written; the output names the
missing library or symbol version. TREE_DIR/tree.toml is the tree's
payload.toml entry (python and rocm from what was found, capabilities with
evidence globs), which 'infera-payload index' merges.

-out is replaced only when it is new, empty, or a tree an earlier harvest
wrote (it holds ` + "`.infera-payload-out`" + `); a non-empty directory without
it needs -force, and one that holds or sits inside -root or -base, or
holds the working directory, is refused even with -force (exit 64).

Exit status 1 when any capability was refused or any ELF does not load.`,
	examples: []string{
		"infera-payload harvest -root build/builder -base build/base -package mooncake -out build/native/rocm7-py312",
		"infera-payload harvest -root build/builder -package lxml -out build/native/rocm7-py311 -rocm 7",
	},
	flags: func(fl *flag.FlagSet) action {
		var o harvest.Options
		var pkgs, caps strList
		fl.StringVar(&o.Root, "root", "", "the builder `ROOT` the packages and libraries come from")
		fl.Var(&pkgs, "package", "import `NAME` of a package to take (repeatable)")
		fl.StringVar(&o.Out, "out", "", "the tree `DIR` to write (replaced)")
		fl.StringVar(&o.Base, "base", "", "the target base `ROOT` (unpacked engine image); default: the policy list")
		fl.StringVar(&o.Name, "name", "", "the tree's `NAME` in payload.toml (default: the base name of -out)")
		fl.IntVar(&o.ROCm, "rocm", 0, "the ROCm `MAJOR` the tree is for (default: from libamdhip64.so.N in the closure)")
		fl.Var(&caps, "capability", "capability `NAME=PKG[,PKG]` proven by those packages (repeatable; default: one per package, named after it)")
		fl.StringVar(&o.Python, "python", "", "the base's interpreter, a `PATH` inside -base (default: /usr/bin/python3, ...)")
		fl.BoolVar(&o.NoImport, "no-import", false, "do not run the import check (the load check still runs)")
		fl.BoolVar(&o.Force, "force", false, "replace -out even when it is a non-empty directory an earlier run did not write")
		quiet := quietFlag(fl)
		return func(env []string, stdout, stderr io.Writer) error {
			o.Packages, o.Caps, o.Progress = pkgs, caps, reporter(*quiet, env, stderr)
			if o.Root == "" || o.Out == "" || len(o.Packages) == 0 {
				return usageError{errors.New("-root, -out and at least one -package are required")}
			}
			r, err := harvest.Run(o)
			if err != nil {
				return err
			}
			r.WriteText(stdout)
			if r.Failed() {
				return fmt.Errorf("%s: not every capability is proven; see above", o.Out)
			}
			return nil
		}
	},
}

var verifyCommand = subcommand{
	name:     "verify",
	summary:  "check that every ELF of a tree loads against a base root",
	synopsis: "-tree DIR -base BASE_ROOT",
	about: `
The check harvest ends with, and the shim runs at start: every ELF shared
object of the tree (extension modules, lib/) must load against the base,
with the tree's lib/ first on LD_LIBRARY_PATH; each failure names the
missing library or symbol version. Exit status 1 when any does not load.`,
	examples: []string{"infera-payload verify -tree build/native/rocm7-py312 -base build/base"},
	flags: func(fl *flag.FlagSet) action {
		var tree, base string
		fl.StringVar(&tree, "tree", "", "the tree `DIR`")
		fl.StringVar(&base, "base", "", "the base `ROOT`")
		return func(_ []string, stdout, _ io.Writer) error {
			if tree == "" || base == "" {
				return usageError{errors.New("-tree and -base are required")}
			}
			checks, err := harvest.Verify(tree, base)
			if err != nil {
				return err
			}
			bad := 0
			for _, c := range checks {
				for _, p := range c.Problems {
					fmt.Fprintf(stdout, "does not load: %s\n", p)
				}
				if !c.OK {
					bad++
				}
			}
			fmt.Fprintf(stdout, "%s: %d ELF files, %d load against %s\n", tree, len(checks), len(checks)-bad, base)
			if bad > 0 {
				return fmt.Errorf("%d ELF files of %s do not load against %s", bad, tree, base)
			}
			return nil
		}
	},
}

var pruneCommand = subcommand{
	name:     "prune",
	summary:  "remove from a py3XX tree the distributions the base already provides",
	synopsis: "-tree DIR -base BASE_ROOT [-base-site PATH]... [-keep NAME]... [-n] [-q]",
	about: `
For a tree made with 'pip install --target', removes every distribution
the base root also has (matched by canonical name, removed with every file
its RECORD lists), and lists those that would have shadowed the base's
copy at another version. -keep names distributions to leave in place.

The base's packages are looked for where installations usually live
(/usr, /usr/local, venvs and conda environments under /opt); an image
that keeps them elsewhere, such as a venv at /app/.venv, is told so with
-base-site /app/.venv. A -base-site that holds no site-packages is an
error.`,
	examples: []string{"infera-payload prune -tree build/wheels/py312 -base build/base -keep vllm-kvd", "infera-payload prune -tree build/wheels/py312 -base build/base -base-site /app/.venv"},
	flags: func(fl *flag.FlagSet) action {
		var o prune.Options
		var keep, sites strList
		fl.StringVar(&o.Tree, "tree", "", "the tree `DIR` (pip --target)")
		fl.StringVar(&o.Base, "base", "", "the base `ROOT`")
		fl.Var(&keep, "keep", "distribution `NAME` to keep (repeatable)")
		fl.BoolVar(&o.DryRun, "n", false, "say what would be removed, remove nothing")
		fl.Var(&sites, "base-site", "where the base's packages live, a `PATH` inside -base: a venv or prefix (/app/.venv) or a site-packages directory (repeatable; default: every installation found under /usr, /usr/local and /opt)")
		quiet := quietFlag(fl)
		return func(env []string, stdout, stderr io.Writer) error {
			o.Keep, o.Sites, o.Progress = keep, sites, reporter(*quiet, env, stderr)
			if o.Tree == "" || o.Base == "" {
				return usageError{errors.New("-tree and -base are required")}
			}
			r, err := prune.Run(o)
			if err != nil {
				return err
			}
			r.WriteText(stdout, o.DryRun)
			return nil
		}
	},
}
