package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/infera/infera-exec/tools/payloadindex"
)

var indexCommand = subcommand{
	name:     "index",
	summary:  "build a payload directory and its index (payload.index.json)",
	synopsis: "[-out DIR] [-bin BINARY] [-tree SRC:DEST]... [-patches DIR] [-demo DIR] [-q]",
	about: `
Replaces -out with a payload in the v0.2.2 layout: bin/infera-exec (the
static binary), the trees given with -tree (py3XX/, native/rocmN-py3XX/),
or without -tree the demo trees (py39..py314 with a tiny worker, native
ROCm 7 trees with CAPABILITIES and a real ELF library), patches/ from
-patches, and the index every byte is checked against by
'infera-exec --install' and 'infera-payload image'.

The -patches definitions (DIR/<import-name>/<file>.toml) are loaded as a
start loads them before anything is written: one a start would refuse
(exit 78), or a .toml file elsewhere in DIR (no start reads it), fails the
build. A definition without a [[guard]] is noted: it reads as drift on
engine releases that lack the code it fixes.

A definition DIR/<import-name>/<name>.toml may ship pristine trees beside
it: DIR/<import-name>/<name>.trees/<tree>/, each the engine's files as a
release installs them, where the fix is pending, laid out as
site-packages (<tree>/<package>/<file>, e.g.
sglang/my-fix.trees/v0.5.16/sglang/srt/disaggregation/prefill.py). Every
marker of every variant (upstream, legacy_marker, the replacement) is
checked against every tree: one that a tree holds outside the edit's site
fails the build (exit 1), naming definition, variant, edit, file and line,
and so does a tree that holds none of the files the definition edits. A
definition without trees is noted: its markers were not checked against
upstream's code. The trees are build input: checked, and left out of the
payload.

With -demo it also makes what 'make demo' mounts beside the payload: a
fake ROCm 7 (rocm/), a vLLM install with pending fixes (engine/) and a
model directory (models/demo).

-out and -demo are replaced only when nothing but an earlier output can be
lost: each must be new, empty, or a directory an earlier run wrote (it
holds ` + "`.infera-payload-out`" + `, which the index never lists); a non-empty
directory without it needs -force. One that holds or sits inside an input
(-bin, -tree SRC, -src, -patches, -engine), the other output or the
working directory is refused even with -force. Refusals exit 64.`,
	examples: []string{
		"infera-payload index -out build/payload -bin bin/infera-exec -tree build/wheels/py312:py312 -tree build/native/rocm7-py312:native/rocm7-py312",
		"infera-payload index -out build/payload -bin bin/infera-exec -patches my-patches",
		"infera-payload index -out build/payload -bin bin/infera-exec -demo build/demo",
	},
	flags: func(fl *flag.FlagSet) action {
		var o payloadindex.Options
		o.Flags(fl)
		quiet := quietFlag(fl)
		return func(env []string, stdout, stderr io.Writer) error {
			o.Progress = reporter(*quiet, env, stderr)
			r, err := payloadindex.Build(o)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "payload in %s: %d entries, index %s\n", r.Dir, r.Entries, r.Index)
			for _, n := range r.Notes {
				fmt.Fprintf(stdout, "note: %s\n", n)
			}
			if o.Demo == "" {
				return nil
			}
			d, err := payloadindex.Demo(o)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "fake ROCm 7 in %s, engine in %s, models in %s\n", d.ROCm, d.Engine, d.Models)
			return nil
		}
	},
}
