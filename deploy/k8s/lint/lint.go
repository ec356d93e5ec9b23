package lint

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/infera/infera-exec/preflight"
)

// Severity of a finding: an error is a pod that would not start, would
// hang or would lose what it was asked for; a warning is one that runs
// but with a known risk. --strict counts warnings as findings too.
type Severity string

const (
	Error Severity = "error"
	Warn  Severity = "warn"
)

// Finding is one problem of one document: where it is (file, document,
// the InferaDeployment service, the container), which check saw it, and
// the check's words: what it saw, why that matters, what to do. The
// checks infera-exec runs itself (preflight.Static) have the words
// --doctor prints in the pod.
type Finding struct {
	File      string   `json:"file"`
	Document  int      `json:"document"` // 1-based position in the file; 0: the file as a whole
	Kind      string   `json:"kind,omitempty"`
	Name      string   `json:"name,omitempty"`
	Service   string   `json:"service,omitempty"`   // of an InferaDeployment
	Container string   `json:"container,omitempty"` // "init NAME" for an init container
	Severity  Severity `json:"severity"`
	Check     string   `json:"check"`
	Seen      string   `json:"seen"`
	Why       string   `json:"why,omitempty"`
	Fix       string   `json:"fix,omitempty"`
}

// String is the finding on one line: where, severity and check, what was
// seen, and the fix.
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.File)
	if f.Document > 0 {
		fmt.Fprintf(&b, ": document %d (%s %s)", f.Document, f.Kind, f.Name)
	}
	if f.Service != "" {
		fmt.Fprintf(&b, ": service %q", f.Service)
	}
	if name, ok := strings.CutPrefix(f.Container, "init "); ok {
		fmt.Fprintf(&b, ": init container %q", name)
	} else if f.Container != "" {
		fmt.Fprintf(&b, ": container %q", f.Container)
	}
	fmt.Fprintf(&b, ": %s %s: %s", f.Severity, f.Check, f.Seen)
	if f.Fix != "" {
		b.WriteString(" -- fix: " + f.Fix)
	}
	return b.String()
}

// loc is where in a file a check looks.
type loc struct {
	doc       Doc
	service   string
	container string
}

func docLoc(d Doc) loc { return loc{doc: d} }

// in is the location of a container of the pod at l.
func (l loc) in(name string, isInit bool) loc {
	if isInit {
		name = "init " + name
	}
	l.container = name
	return l
}

func (l loc) finding(sev Severity, check, seen, why, fix string) Finding {
	return Finding{File: l.doc.File, Document: l.doc.Index, Kind: l.doc.Kind, Name: l.doc.Name, Service: l.service,
		Container: l.container, Severity: sev, Check: check, Seen: seen, Why: why, Fix: fix}
}

// ReadError is input that cannot be read as YAML at all (exit 2), as
// opposed to a manifest with findings.
type ReadError struct {
	File string
	Err  error
}

func (e *ReadError) Error() string { return e.File + ": " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// Lint checks one file's manifests: every document decoded (strictly for
// the built-in kinds), the placeholders left in its values, and every pod
// it makes (Pod, Deployment, StatefulSet, DaemonSet, Job,
// LeaderWorkerSet, InferaDeployment) with the manifest's checks and, for
// each container started through infera-exec, preflight.Static. A
// document that is not YAML is a *ReadError; findings are sorted by
// document, in the order the checks ran.
func Lint(file string, data []byte, ctx Context) ([]Finding, Stats, error) {
	parts := docSep.Split(string(data), -1)
	for i, part := range parts {
		if _, err := yaml.YAMLToJSON([]byte(part)); err != nil {
			return nil, Stats{}, &ReadError{File: file, Err: fmt.Errorf("document %d is not YAML: %w", i+1, err)}
		}
	}
	docs, decodeFindings := Decode(file, data)
	findings := decodeFindings
	for _, d := range docs {
		findings = append(findings, valuePlaceholders(d)...)
	}
	more, stats := Check(docs, ctx)
	findings = append(findings, more...)
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Document < findings[j].Document })
	return findings, stats, nil
}

// Failing counts the findings that fail a run: errors, and warnings too
// when strict.
func Failing(fs []Finding, strict bool) int {
	n := 0
	for _, f := range fs {
		if f.Severity == Error || strict {
			n++
		}
	}
	return n
}

// valuePlaceholders reports the template placeholders (<NAME>) left in
// the values of a document, as infera-exec's placeholders check finds
// them, with its words. The command, args and env of a container started
// through infera-exec are left out: preflight.Static reports those, as
// --doctor would in the pod.
func valuePlaceholders(d Doc) []Finding {
	var raw any
	if err := json.Unmarshal(d.JSON, &raw); err != nil {
		return nil
	}
	var found []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case string:
			for _, p := range preflight.Placeholders(x) {
				found = append(found, p+" in "+path)
			}
		case []any:
			for i, e := range x {
				walk(path+"["+strconv.Itoa(i)+"]", e)
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			shim := runsShim(x)
			for _, k := range keys {
				if shim && slices.Contains([]string{"command", "args", "env"}, k) {
					continue
				}
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(p, x[k])
			}
		}
	}
	walk("", raw)
	var out []Finding
	for _, f := range found {
		out = append(out, docLoc(d).finding(Error, "placeholders", f, preflight.PlaceholdersWhy, preflight.PlaceholdersFix))
	}
	return out
}

// runsShim: a container object (decoded JSON) whose command starts
// infera-exec.
func runsShim(obj map[string]any) bool {
	cmd, ok := obj["command"].([]any)
	if !ok || len(cmd) == 0 {
		return false
	}
	first, _ := cmd[0].(string)
	return isShimPath(first) && obj["image"] != nil
}

func isShimPath(s string) bool { return s == "infera-exec" || strings.HasSuffix(s, "/infera-exec") }
