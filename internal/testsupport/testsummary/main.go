// Command testsummary reads `go test -json` and says what ran: the
// package lines go test prints, the output of failed tests, and at the end
// of `make test` one closing line, "N passed, N failed, N skipped", after
// every group of skipped tests with what enables it. No test skips
// silently.
//
//	go test -json ./... | testsummary -state build/test-summary.json
//	testsummary -state build/test-summary.json -final
//
// Each reading adds its counts to the state file, so the three modules of
// `make test` end in one summary. A reading exits 1 when a test or a
// package failed.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// State is what the readings so far counted.
type State struct {
	Passed, Failed, Skipped int
	// Skips are the skipped tests by reason (the test's skip message).
	Skips map[string][]string
	// Helpers are tests that only run as a child of another test.
	Helpers int
}

// logLine is a t.Log or t.Skip line of a test: "    file.go:12: message".
var logLine = regexp.MustCompile(`^ {4}\S+\.go:\d+: (.*)$`)

// helperPrefix marks the skip of a test that only runs as another test's
// child, in the environment that test makes: not a skip to enable.
const helperPrefix = "helper:"

func main() {
	statePath := flag.String("state", "", "file accumulating the counts across readings")
	final := flag.Bool("final", false, "print the groups of skipped tests and the closing line")
	flag.Parse()
	st := load(*statePath)
	if *final {
		writeFinal(os.Stdout, st)
		return
	}
	failed := read(os.Stdin, os.Stdout, st)
	if *statePath != "" {
		b, _ := json.MarshalIndent(st, "", "  ")
		if err := os.WriteFile(*statePath, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
	}
	if failed {
		os.Exit(1)
	}
}

func load(path string) *State {
	st := &State{Skips: map[string][]string{}}
	if path == "" {
		return st
	}
	if b, err := os.ReadFile(path); err == nil {
		json.Unmarshal(b, st)
	}
	if st.Skips == nil {
		st.Skips = map[string][]string{}
	}
	return st
}

// read consumes one go test -json stream. It prints the package result
// lines as go test does, the whole output of a failed test or package,
// and lines that are not JSON (a build error before any test ran).
func read(r io.Reader, w io.Writer, st *State) (failed bool) {
	outputs := map[string][]string{} // package/test -> output lines
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintln(w, string(line))
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output", "build-output":
			outputs[key] = append(outputs[key], e.Output)
			if e.Test == "" && isResultLine(e.Output) {
				fmt.Fprint(w, e.Output)
			}
			continue
		case "pass":
			if e.Test != "" {
				st.Passed++
			}
		case "fail", "build-fail":
			failed = true
			if e.Test != "" {
				st.Failed++
			}
			fmt.Fprint(w, strings.Join(outputs[key], ""))
		case "skip":
			if e.Test == "" {
				break // a package without tests
			}
			reason := skipReason(outputs[key])
			if strings.HasPrefix(reason, helperPrefix) {
				st.Helpers++
				break
			}
			st.Skipped++
			st.Skips[reason] = append(st.Skips[reason], shortPkg(e.Package)+" "+e.Test)
		default:
			continue
		}
		delete(outputs, key)
	}
	return failed
}

// isResultLine is one of go test's package lines: ok, FAIL, "?" (no test
// files).
func isResultLine(s string) bool {
	return strings.HasPrefix(s, "ok  \t") || strings.HasPrefix(s, "FAIL\t") || strings.HasPrefix(s, "?   \t") || strings.HasPrefix(s, "FAIL ")
}

// skipReason is the test's last log line: what t.Skip said (testscript's
// skip command logs its message first, then the script).
func skipReason(lines []string) string {
	reason := ""
	for _, l := range lines {
		m := logLine.FindStringSubmatch(strings.TrimRight(l, "\n"))
		if m == nil || strings.HasPrefix(m[1], "WORK=") {
			continue
		}
		reason = m[1]
	}
	if reason == "" {
		return "(no reason given)"
	}
	return reason
}

func shortPkg(p string) string {
	for _, prefix := range []string{"github.com/infera/infera-exec/"} {
		p = strings.TrimPrefix(p, prefix)
	}
	return p
}

// enabling maps words of a skip reason to the command that enables the
// group; a reason that names its own command needs no entry.
var enabling = []struct{ words, command string }{
	{"Linux namespaces", "run the tests as root (or where unprivileged user namespaces are allowed)"},
	{"INFERA_SEED_PATCHES", "INFERA_SEED_PATCHES=DIR go test ./patches/ (DIR: the seed repository's deploy/docker/patches)"},
	{"coverage tables: needs INFERA_SGLANG_GIT", "INFERA_SGLANG_GIT=DIR INFERA_VLLM_GIT=DIR go test -run TestCoverageTables ./patches/ [-update-coverage] (git directories of SGLang and vLLM)"},
	{"INFERA_ATOM_GIT", "INFERA_SEED_GIT=DIR INFERA_ATOM_GIT=DIR go test -run TestSeedATOMScriptsOnRevisions ./patches/ (git directories of the seed repository and of ROCm/ATOM)"},
	{"INFERA_SGLANG_GIT", "INFERA_SEED_GIT=DIR INFERA_SGLANG_GIT=DIR go test -run TestSeed ./patches/ (git directories of the seed repository and of SGLang; TestSeedDSADiffsOnRevisions also needs patch)"},
	{"INFERA_VLLM_GIT", "INFERA_SEED_GIT=DIR INFERA_VLLM_GIT=DIR go test -run TestSeedScriptsOnRevisions ./patches/ (git directories of the seed repository and of vLLM)"},
	{"INFERA_SEED_GIT", "INFERA_SEED_GIT=DIR go test -run TestSeedScriptVersions ./patches/ (a git directory of the seed repository: every version of its scripts on the test trees)"},
	{"libibverbs1", "apt-get install libibverbs1 ibverbs-providers ibverbs-utils"},
	{"Debian python3", "apt-get install python3 python3-venv python3-setuptools python3-wheel python3-pip"},
	{"python3", "apt-get install python3"},
	{"iproute2", "apt-get install iproute2"},
	{"/dev/fuse", "run as root on a kernel with FUSE (/dev/fuse)"},
	{"non-root user", "run the tests as a non-root user (CI runs as root, so these run elsewhere)"},
	{"needs root", "run the tests as root"},
	{"cc not found", "apt-get install gcc libc6-dev"},
	{"make build", "make test (it builds bin/infera-exec and sets INFERA_EXEC_BIN)"},
	{"make test-runtime", "make test-runtime (as root, with podman, runc and catatonit; bash .ci/run installs them)"},
	{"make test-long", "make test-long (bash .ci/run runs it after make test)"},
}

func enableCommand(reason string) string {
	if i := strings.Index(reason, "apt-get install"); i >= 0 {
		return strings.TrimRight(reason[i:], ")")
	}
	for _, e := range enabling {
		if strings.Contains(reason, e.words) {
			return e.command
		}
	}
	return "see the reason"
}

func writeFinal(w io.Writer, st *State) {
	reasons := make([]string, 0, len(st.Skips))
	for r := range st.Skips {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if len(st.Skips[reasons[i]]) != len(st.Skips[reasons[j]]) {
			return len(st.Skips[reasons[i]]) > len(st.Skips[reasons[j]])
		}
		return reasons[i] < reasons[j]
	})
	if len(reasons) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Skipped tests, by reason (bash .ci/run, as root, installs every fixture package first; tests that need a non-root user run only without root):\n")
	}
	for _, r := range reasons {
		tests := st.Skips[r]
		fmt.Fprintf(w, "  %d skipped: %s\n", len(tests), r)
		fmt.Fprintf(w, "    enable: %s\n", enableCommand(r))
		shown := tests
		if len(shown) > 4 {
			shown = shown[:4]
		}
		more := ""
		if len(tests) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(tests)-len(shown))
		}
		fmt.Fprintf(w, "    tests:  %s%s\n", strings.Join(shown, ", "), more)
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", st.Passed, st.Failed, st.Skipped)
}
