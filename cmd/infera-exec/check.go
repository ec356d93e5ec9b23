package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/infera/infera-exec/environ"
	"github.com/infera/infera-exec/patches"
)

// checkReport is --check's JSON output.
type checkReport struct {
	Root     string            `json:"root"`
	Location *patches.Location `json:"location"`
	Results  []patches.Result  `json:"results"`
	Drift    bool              `json:"drift"`
}

// runCheck evaluates every patch definition (built-in and the payload's)
// against an unpacked image root filesystem or a site-packages directory,
// without Python and without writing, so a payload build can catch an
// upstream change before anything is deployed. Exit 65 on drift.
func runCheck(root string, asJSON bool, env []string, stdout, stderr io.Writer) int {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	e := environ.New(env)
	payload := e.Value("PAYLOAD_ROOT")
	if payload == "" {
		if exe, err := os.Executable(); err == nil {
			payload = filepath.Dir(filepath.Dir(exe))
		}
	}
	set, err := loadPatchSet(payload)
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitConfig
	}
	loc, err := patches.LocateOffline(root, set.Packages())
	if err != nil {
		fmt.Fprintf(stderr, "infera-exec: error: %v\n", err)
		return exitConfig
	}
	names := set.Packages()
	for _, n := range names {
		pkg := loc.Packages[n]
		if pkg.Found {
			pkg.Version, pkg.VersionFrom = patches.DistVersion(distOf(set, n), append([]string{filepath.Dir(pkg.Dir)}, loc.SysPath...))
			loc.Packages[n] = pkg
		}
	}
	results := patches.Apply(set, loc, patches.Options{DryRun: true})
	rep := checkReport{Root: root, Location: loc, Results: results}
	for _, r := range results {
		if r.State == patches.Drift {
			rep.Drift = true
		}
	}
	if asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprintf(stdout, "infera-exec --check %s (nothing is written)\n", root)
		sort.Strings(names)
		for _, n := range names {
			pkg := loc.Packages[n]
			if pkg.Found {
				fmt.Fprintf(stdout, "\n%s %s at %s\n", n, orUnknown(pkg.Version), pkg.Dir)
			} else {
				fmt.Fprintf(stdout, "\n%s: %s\n", n, pkg.Why)
			}
			for _, r := range results {
				if r.Package != n {
					continue
				}
				state := string(r.State)
				if r.Variant != "" {
					state += " (" + r.Variant + ")"
				}
				fmt.Fprintf(stdout, "  %-40s %-15s %s\n", r.ID, state, r.Summary)
				if r.Why != "" && r.State != patches.Pending {
					fmt.Fprintf(stdout, "  %-40s %-15s %s\n", "", "", r.Why)
				}
			}
		}
	}
	if rep.Drift {
		return exitPatch
	}
	return exitOK
}
