package logging

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docTable is the first column of the table under heading in
// docs/logging.md.
func docTable(t *testing.T, heading string) []string {
	doc, err := os.ReadFile("../../docs/logging.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "\n## "+heading+"\n")
	require.True(t, ok, "docs/logging.md has a section %s", heading)
	rest, _, _ = strings.Cut(rest, "\n## ")
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_-]+)` \\|").FindAllStringSubmatch(rest, -1) {
		names = append(names, m[1])
	}
	require.NotEmpty(t, names, "the %s table has rows", heading)
	return names
}

// emitted reads the module's source (not its tests, nor the tools
// module) for the field names its log calls write, and the events they
// name: the string keys of Debug/Info/Warn/Error(msg, key, value, ...)
// and With(key, value, ...), and slog.String(key, ...) and the like.
func emitted(t *testing.T) (fields, events map[string][]string) {
	fields, events = map[string][]string{}, map[string][]string{}
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel, _ := filepath.Rel(root, path); rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "build" || exists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			first := -1
			switch sel.Sel.Name {
			case "Debug", "Info", "Warn", "Error":
				first = 1
			case "With":
				first = 0
			case "String", "Int", "Int64", "Bool", "Any", "Duration", "Time", "Uint64", "Float64":
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "slog" && len(call.Args) == 2 {
					if k, ok := literal(call.Args[0]); ok {
						fields[k] = append(fields[k], fset.Position(call.Pos()).String())
					}
				}
				return true
			}
			if first < 0 || len(call.Args) <= first {
				return true
			}
			for i := first; i+1 < len(call.Args); i += 2 {
				k, ok := literal(call.Args[i])
				if !ok {
					continue
				}
				at := fset.Position(call.Args[i].Pos()).String()
				fields[k] = append(fields[k], at)
				if k == FieldEvent {
					if v, ok := literal(call.Args[i+1]); ok {
						events[v] = append(events[v], at)
					}
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return fields, events
}

func literal(e ast.Expr) (string, bool) {
	b, ok := e.(*ast.BasicLit)
	if !ok || b.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(b.Value)
	return s, err == nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Every field name a log call writes is in docs/logging.md's table, and
// every name in it is written: by slog itself (time, level, msg), by
// Open (logger, event, step), or by a call somewhere in the module.
// Likewise every event a call names is in the events table, and every
// event there is named by a call or by the level (note, warning, error).
func TestLogFieldsAreTheDocumentedOnes(t *testing.T) {
	fields, events := emitted(t)
	require.Contains(t, fields, "patch", "the scan finds the patch step's fields (or it reads nothing)")

	// What Open's handlers put on every record, seen on a real one.
	var b bytes.Buffer
	log := WithStep(Open(&b, Options{Name: "infera-exec", Format: "json"}, nil), "abi")
	log.Info("one")
	log.Warn("two")
	log.Error("three")
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		for k := range rec {
			fields[k] = append(fields[k], "Open")
		}
		events[rec[FieldEvent].(string)] = append(events[rec[FieldEvent].(string)], "level")
	}

	docFields, docEvents := docTable(t, "Fields"), docTable(t, "Events")
	for k, at := range fields {
		assert.Contains(t, docFields, k, "field %q (written at %s) is not in docs/logging.md's table", k, at[0])
	}
	for _, k := range docFields {
		assert.Contains(t, fields, k, "docs/logging.md lists field %q, which nothing writes", k)
	}
	for e, at := range events {
		assert.Contains(t, docEvents, e, "event %q (named at %s) is not in docs/logging.md's events", e, at[0])
	}
	for _, e := range docEvents {
		assert.Contains(t, events, e, "docs/logging.md lists event %q, which nothing names", e)
	}
}

// Each record has event and step once, first after the logger, whatever
// the call and its loggers' With said; the format is json or logfmt, and
// the level written is the one asked for (the report records info up).
func TestRecordsCarryEventAndStepOnce(t *testing.T) {
	var b bytes.Buffer
	rec := &Recorder{}
	log := Open(&b, Options{Name: "infera-exec", Format: "json", Level: "warn"}, rec)
	log = WithStep(log, "patches").With("event", "patch", "patch", "p1")
	log.Info("patch p1 applied", "file", "/a.py")
	log.Warn("patch p1 not applied", "file", "/a.py", "step", "other")
	WithStep(log, "exec").Error("refused", "event", "refused", "exit_code", 78)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2, "info is below the level asked for")
	assert.Regexp(t, `^\{"time":"[^"]+","level":"WARN","msg":"patch p1 not applied","logger":"infera-exec","event":"patch","step":"other","patch":"p1","file":"/a.py"\}$`, lines[0])
	assert.Regexp(t, `^\{"time":"[^"]+","level":"ERROR","msg":"refused","logger":"infera-exec","event":"refused","step":"exec","patch":"p1","exit_code":78\}$`, lines[1])
	got := rec.Entries()
	require.Len(t, got, 3, "the report keeps info up, whatever the level written")
	assert.Equal(t, map[string]any{"event": "patch", "step": "patches", "patch": "p1", "file": "/a.py"}, got[0].Attrs)

	b.Reset()
	log = WithStep(Open(&b, Options{Name: "infera-exec", Format: "logfmt", Level: "debug"}, nil), "patches")
	log.Debug("patch p2 not applicable", "event", "patch", "patch", "p2")
	assert.Regexp(t, `^time=\S+ level=DEBUG msg="patch p2 not applicable" logger=infera-exec event=patch step=patches patch=p2\n$`, b.String())

	b.Reset()
	Open(&b, Options{Name: "infera-exec", Format: "text"}, nil).Info("exec x", "event", "exec", "file", "/x")
	assert.Equal(t, "infera-exec: exec x\n", b.String(), "text lines carry no fields")
}
