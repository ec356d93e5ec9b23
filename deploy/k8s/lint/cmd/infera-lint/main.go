// Command infera-lint checks Kubernetes manifests that start engines
// through infera-exec, before they are applied:
//
//	infera-lint [-json] [-strict] FILE|DIR|- ...
//
// It reads each FILE (a directory: its *.yaml and *.yml files, a "-":
// standard input), multi-document YAML: Pods, Deployments, StatefulSets,
// DaemonSets, Jobs, LeaderWorkerSets and InferaDeployments (each
// service's extraPodSpec as the operator turns it into a pod), with the
// Services, accounts and roles beside them. For every container started
// through infera-exec it runs the checks infera-exec --doctor runs in the
// pod that the manifest alone decides (placeholders, the addresses a
// prefill/decode worker advertises per connector and role), with the same
// words, and the deployment's own rules (hostNetwork and the libionic
// mount for RDMA, the startup probe against INFERA_ENGINE_READY_TIMEOUT,
// memory request and limit, enableServiceLinks, the model volume, the
// init container that fills /overlay). One finding a line: file,
// document, container, severity and check, what was seen, the fix.
//
// Exit status, as kubeconform's: 0 no finding that fails (warnings are
// printed; -strict counts them), 1 findings, 2 input that could not be
// read or is not YAML, or a usage error.
//
// A module of its own (deploy/k8s/lint): k8s.io/api never enters the
// infera-exec binary's build.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/infera/infera-exec/deploy/k8s/lint"
	"github.com/infera/infera-exec/patches/patchdef"
)

// Exit codes.
const (
	exitClean    = 0
	exitFindings = 1
	exitInput    = 2
)

// maxInput bounds one file or standard input.
const maxInput = 64 << 20

var version = "dev" // set by make build (-X main.version)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// report is what -json prints.
type report struct {
	Findings []lint.Finding `json:"findings"`
	Files    int            `json:"files"`
	Engines  int            `json:"engines"` // containers started through infera-exec
	Errors   int            `json:"errors"`
	Warnings int            `json:"warnings"`
	Unread   []string       `json:"unreadable,omitempty"`
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("infera-lint", flag.ContinueOnError)
	fl.SetOutput(stderr)
	asJSON := fl.Bool("json", false, "print one JSON object: the findings and their counts")
	strict := fl.Bool("strict", false, "warnings fail too (exit 1)")
	showVersion := fl.Bool("version", false, "print the version and exit")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: infera-lint [-json] [-strict] FILE|DIR|- ...")
		fmt.Fprintln(stderr, "Checks Kubernetes manifests that start engines through infera-exec; - reads standard input.")
		fmt.Fprintln(stderr, "Exit status: 0 clean, 1 findings, 2 unreadable input or usage.")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return exitInput
	}
	if *showVersion {
		fmt.Fprintln(stdout, "infera-lint", version)
		return exitClean
	}
	if fl.NArg() == 0 {
		fl.Usage()
		return exitInput
	}
	defs, err := patchdef.Builtin()
	if err != nil {
		fmt.Fprintln(stderr, "infera-lint:", err)
		return exitInput
	}
	ctx := lint.Context{PatchIDs: map[string]bool{}}
	for _, d := range defs {
		ctx.PatchIDs[d.ID] = true
	}

	var rep report
	for _, arg := range fl.Args() {
		files := []string{arg}
		if fi, err := os.Stat(arg); err == nil && fi.IsDir() {
			if files, err = lint.ManifestFiles(arg); err != nil {
				rep.Unread = append(rep.Unread, fmt.Sprintf("%s: %v", arg, err))
				continue
			}
		}
		for _, f := range files {
			data, name, err := read(f, stdin)
			if err == nil {
				var fs []lint.Finding
				var st lint.Stats
				fs, st, err = lint.Lint(name, data, ctx)
				rep.Findings = append(rep.Findings, fs...)
				rep.Engines += st.Engines
			}
			if err != nil {
				rep.Unread = append(rep.Unread, err.Error())
				continue
			}
			rep.Files++
		}
	}
	for _, f := range rep.Findings {
		if f.Severity == lint.Error {
			rep.Errors++
		} else {
			rep.Warnings++
		}
	}
	if *asJSON {
		if rep.Findings == nil {
			rep.Findings = []lint.Finding{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		for _, f := range rep.Findings {
			fmt.Fprintln(stdout, f.String())
		}
	}
	for _, u := range rep.Unread {
		fmt.Fprintln(stderr, "infera-lint:", u)
	}
	if !*asJSON {
		fmt.Fprintf(stderr, "infera-lint: %d file(s), %d container(s) through infera-exec: %d error(s), %d warning(s)", rep.Files, rep.Engines, rep.Errors, rep.Warnings)
		if len(rep.Unread) > 0 {
			fmt.Fprintf(stderr, ", %d unreadable", len(rep.Unread))
		}
		fmt.Fprintln(stderr)
	}
	switch {
	case len(rep.Unread) > 0:
		return exitInput
	case lint.Failing(rep.Findings, *strict) > 0:
		return exitFindings
	}
	return exitClean
}

// read is one input: "-" standard input (named <stdin>), else a regular
// file, each at most maxInput bytes.
func read(f string, stdin io.Reader) ([]byte, string, error) {
	if f == "-" {
		data, err := io.ReadAll(io.LimitReader(stdin, maxInput+1))
		if err == nil && len(data) > maxInput {
			err = fmt.Errorf("more than %d bytes", maxInput)
		}
		if err != nil {
			return nil, "", fmt.Errorf("<stdin>: %w", err)
		}
		return data, "<stdin>", nil
	}
	fi, err := os.Stat(f)
	switch {
	case err != nil:
		return nil, "", err
	case !fi.Mode().IsRegular():
		return nil, "", fmt.Errorf("%s: not a regular file", f)
	case fi.Size() > maxInput:
		return nil, "", fmt.Errorf("%s: %d bytes, more than %d", f, fi.Size(), maxInput)
	}
	data, err := os.ReadFile(f)
	if err != nil {
		return nil, "", err
	}
	return data, filepath.Clean(f), nil
}
