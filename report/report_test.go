package report_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/launch"
	. "github.com/infera/infera-exec/report"
)

const secret = "hf_SECRET_token_value"

func sampleReport() *Report {
	before, after := "/usr/bin", "/overlay/bin:/usr/bin"
	return &Report{
		Schema:  Schema,
		Tool:    Tool{Version: "v0.3.0", Commit: "abc123", Go: "go1.26"},
		Mode:    "exec",
		Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		PID:     1,
		Args:    []string{"infera-exec", "python3", "-m", "infera.engine.vllm"},
		EnvChanges: []environ.Change{
			{Name: "PATH", Before: &before, After: &after},
		},
		Sections: []Section{fields{{Key: "family", Value: "rocm7-py312"}}, &launch.Outcome{
			Command: []string{"python3", "-m", "infera.engine.vllm"},
			Path:    "/usr/bin/python3",
			Argv:    []string{"python3", "-m", "infera.engine.vllm"},
			Cwd:     "/",
			Nofile:  launch.Nofile{Soft: 1048576, Hard: 1048576, Changed: true},
		}},
		Log:     []logging.Entry{{Level: "warn", Message: "something to fix"}},
		Timings: []Timing{{Step: "abi", Micros: 42}},
		Outcome: Outcome{Result: ResultExec, Code: 0},
	}
}

// fields is a section that only adds members to the JSON document.
type fields []Field

func (f fields) Fields() []Field   { return f }
func (fields) WriteText(io.Writer) {}

// execOf is the report's exec section: the launch step's outcome.
func execOf(r *Report) *launch.Outcome {
	for _, s := range r.Sections {
		if l, ok := s.(*launch.Outcome); ok {
			return l
		}
	}
	return nil
}

// withExplainEnv is r as --explain --json shows it: the worker's full
// environment in the exec section.
func withExplainEnv(r *Report) *Report {
	execOf(r).Env = []string{"PATH=/overlay/bin:/usr/bin", "HF_TOKEN=" + secret}
	return r
}

func TestSchemaIsTwo(t *testing.T) {
	assert.Equal(t, 2, Schema)
}

func TestWriteExplicitPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nested", "deeper", "report.json") // directories do not exist yet
	r := sampleReport()

	got, err := Write(r, path, "", "")
	require.NoError(t, err)
	assert.Equal(t, path, got)

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(data), secret, "the full environment never reaches the report file")
	assert.NotContains(t, string(data), "HF_TOKEN")
	assert.True(t, bytes.HasSuffix(data, []byte("}\n")))

	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m), "valid JSON")
	assert.Equal(t, float64(2), m["schema"])
	assert.Equal(t, "exec", m["mode"])
	assert.Equal(t, "rocm7-py312", m["family"])
	ex, ok := m["exec"].(map[string]any)
	require.True(t, ok, "exec is an object: %v", m["exec"])
	assert.NotContains(t, ex, "env")
	assert.Equal(t, "/usr/bin/python3", ex["path"])
	assert.Equal(t, []any{"python3", "-m", "infera.engine.vllm"}, ex["command"])
	assert.Equal(t, map[string]any{"soft": float64(1048576), "hard": float64(1048576), "changed": true}, ex["nofile"])
	assert.Less(t, strings.Index(string(data), `"family": `), strings.Index(string(data), `"exec": {`), "sections after the inputs")
	assert.Less(t, strings.Index(string(data), `"exec": {`), strings.Index(string(data), `"env_changes": `), "sections before what the pass did")
	changes, ok := m["env_changes"].([]any)
	require.True(t, ok)
	require.Len(t, changes, 1)
	assert.Equal(t, map[string]any{"name": "PATH", "before": "/usr/bin", "after": "/overlay/bin:/usr/bin"}, changes[0])
	assert.Equal(t, map[string]any{"result": "exec", "code": float64(0)}, m["outcome"])

	// Decodes back into a Report's fixed members.
	var back Report
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, Schema, back.Schema)
	assert.Equal(t, r.Started, back.Started)

	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the report may name the worker's arguments: root only")
	fi, err = os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.True(t, fi.IsDir())

	ents, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, ents, 1, "no temporary file left")
	assert.Equal(t, "report.json", ents[0].Name())
}

func TestWriteWithoutExec(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	r := sampleReport()
	r.Sections = nil
	r.Outcome = Outcome{Result: ResultRefused, Code: 69, Reason: "capability hipfile missing"}

	_, err := Write(r, path, "", "")
	require.NoError(t, err)
	var m map[string]any
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &m))
	assert.NotContains(t, m, "exec")
	assert.Equal(t, map[string]any{"result": "refused", "code": float64(69), "reason": "capability hipfile missing"}, m["outcome"])
}

func TestWriteReplacesPreviousReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	old := sampleReport()
	old.PID = 4242
	_, err := Write(old, path, "", "")
	require.NoError(t, err)

	_, err = Write(sampleReport(), path, "", "")
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, json.Valid(data))
	assert.NotContains(t, string(data), `"pid": 4242`, "the previous report was replaced")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the report is for root only")
}

// INFERA_EXEC_REPORT naming a file that is not a report (a model's
// config.json, a stale half-written file) leaves it as it was.
func TestWriteReplacesOnlyAReport(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"config.json": `{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}`,
		"stale.json":  "stale, not JSON",
		"empty.json":  "",
		"schema.json": `{"schema": 2}`,
		// A head out of order, or with a member of the wrong kind.
		"order.json":     `{"tool": {}, "schema": 2, "mode": "exec", "outcome": {}}`,
		"nulltool.json":  `{"schema": 2, "tool": null, "mode": "exec", "outcome": {}}`,
		"strschema.json": `{"schema": "2", "tool": {}, "mode": "exec", "outcome": {}}`,
		"nomode.json":    `{"schema": 2, "tool": {}, "mode": "", "outcome": {}}`,
		"array.json":     `[{"schema": 2, "tool": {}, "mode": "exec"}]`,
	} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
		_, err := Write(sampleReport(), path, "", "")
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "not an infera-exec report; not replacing it", name)
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, content, string(got), "%s is untouched", name)
	}
	// Not a regular file: a directory, a link.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	_, err := Write(sampleReport(), filepath.Join(dir, "d"), "", "")
	assert.ErrorContains(t, err, "not a report; not replacing it")
	target := filepath.Join(dir, "config.json")
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "link.json")))
	_, err = Write(sampleReport(), filepath.Join(dir, "link.json"), "", "")
	assert.ErrorContains(t, err, "not a report; not replacing it")
	fi, err := os.Lstat(filepath.Join(dir, "link.json"))
	require.NoError(t, err)
	assert.Equal(t, os.ModeSymlink, fi.Mode().Type(), "the link stays")

	if os.Geteuid() != 0 {
		t.Skip("the other-uid case needs root (chown); run the tests as root")
	}
	theirs := filepath.Join(dir, "theirs.json")
	_, err = Write(sampleReport(), theirs, "", "")
	require.NoError(t, err)
	require.NoError(t, os.Chown(theirs, 4242, 4242))
	_, err = Write(sampleReport(), theirs, "", "")
	assert.ErrorContains(t, err, "belongs to uid 4242")
}

// A report is recognized by its head alone: the rest is not read, so a
// report of any size, even one cut short, is replaced.
func TestWriteReadsOnlyTheReportsHead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	_, err := Write(sampleReport(), path, "", "")
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	for name, content := range map[string][]byte{
		"cut short":        data[:len(data)/2],
		"larger than 4 MB": append(data[:len(data)-len("}\n")], []byte(`, "pad": "`+strings.Repeat("x", 5<<20)+`"}`)...),
	} {
		require.NoError(t, os.WriteFile(path, content, 0o600))
		_, err = Write(sampleReport(), path, "", "")
		require.NoError(t, err, name)
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.True(t, json.Valid(got), "%s: replaced by a whole report", name)
	}
}

func TestWriteExplicitPathFailure(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(blocker, []byte("x"), 0o644))
	state := filepath.Join(dir, "state")

	got, err := Write(sampleReport(), filepath.Join(blocker, "report.json"), state, "")
	require.Error(t, err)
	assert.Equal(t, "", got)
	assert.Contains(t, err.Error(), "report "+filepath.Join(blocker, "report.json"))
	assert.NoFileExists(t, filepath.Join(state, Name), "an explicit path does not fall back")
}

// Without INFERA_EXEC_REPORT the report goes to the state directory the
// run picked (INFERA_EXEC_STATE_DIR moves it too), and nowhere without
// one.
func TestWriteInStateDir(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.Mkdir(state, 0o700))
	got, err := Write(sampleReport(), "", state, "")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(state, "report.json"), got)
	assert.FileExists(t, got)

	got, err = Write(sampleReport(), "", "", "/run/infera-exec: read-only file system")
	assert.ErrorContains(t, err, "no state directory (/run/infera-exec: read-only file system); set INFERA_EXEC_REPORT")
	assert.Equal(t, "", got)
}

func TestWriteRefusesSymlinkedDirInTmp(t *testing.T) {
	target := t.TempDir()
	link := filepath.Join("/tmp", fmt.Sprintf("infera-exec-report-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	require.NoError(t, os.Symlink(target, link))
	t.Cleanup(func() { os.Remove(link) })

	_, err := Write(sampleReport(), filepath.Join(link, "report.json"), "", "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is a symbolic link")
	assert.NoFileExists(t, filepath.Join(target, "report.json"))
}

// The report directory is one infera-exec writes into as root: a link, a
// directory another uid made first, or one others can write is refused.
func TestWriteRefusesDirectoriesItDoesNotOwn(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "real")
	require.NoError(t, os.Mkdir(target, 0o755))
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(target, link))
	_, err := Write(sampleReport(), filepath.Join(link, "report.json"), "", "")
	assert.ErrorContains(t, err, "is a symbolic link")
	assert.NoFileExists(t, filepath.Join(target, "report.json"))

	shared := filepath.Join(base, "shared")
	require.NoError(t, os.Mkdir(shared, 0o755))
	require.NoError(t, os.Chmod(shared, 0o777))
	_, err = Write(sampleReport(), filepath.Join(shared, "report.json"), "", "")
	assert.ErrorContains(t, err, "written by group or others")
	assert.NoFileExists(t, filepath.Join(shared, "report.json"))

	if os.Geteuid() != 0 {
		t.Skip("the foreign-owner case needs root (chown)")
	}
	foreign := filepath.Join(base, "foreign")
	require.NoError(t, os.Mkdir(foreign, 0o755))
	require.NoError(t, os.Chown(foreign, 4242, 4242))
	_, err = Write(sampleReport(), filepath.Join(foreign, "report.json"), "", "")
	assert.ErrorContains(t, err, "owned by uid 4242")
	assert.NoFileExists(t, filepath.Join(foreign, "report.json"))
}

func TestMarshalKeepsEnvForExplain(t *testing.T) {
	data, err := Marshal(withExplainEnv(sampleReport()))
	require.NoError(t, err)
	assert.True(t, bytes.HasSuffix(data, []byte("\n")))
	assert.Contains(t, string(data), `"HF_TOKEN=\u003credacted\u003e"`, "--explain --json shows the full environment, secrets redacted")
	assert.NotContains(t, string(data), secret)
	assert.Contains(t, string(data), "\n  \"schema\": 2,")
}

func TestQuoteArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nil", nil, ""},
		{"plain", []string{"python3", "-m", "infera.engine.vllm", "--model", "/models/X"}, "python3 -m infera.engine.vllm --model /models/X"},
		{"safe punctuation", []string{"--opt=a,b:c+d_e.f-g/h"}, "--opt=a,b:c+d_e.f-g/h"},
		{"space", []string{"echo", "a b"}, "echo 'a b'"},
		{"empty string", []string{"cmd", "", "x"}, "cmd '' x"},
		{"single quote", []string{"it's"}, `'it'\''s'`},
		{"only a single quote", []string{"'"}, `''\'''`},
		{"double quotes", []string{`say "hi"`}, `'say "hi"'`},
		{"dollar", []string{"$HOME"}, "'$HOME'"},
		{"backtick", []string{"`id`"}, "'`id`'"},
		{"glob", []string{"*.py"}, "'*.py'"},
		{"tilde", []string{"~/x"}, "'~/x'"},
		{"semicolon", []string{"a;b"}, "'a;b'"},
		{"backslash", []string{`a\b`}, `'a\b'`},
		{"tab and newline", []string{"a\tb\nc"}, "'a\tb\nc'"},
		{"non-ASCII", []string{"modèle"}, "'modèle'"},
		{"json", []string{`{"k": 1}`}, `'{"k": 1}'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, QuoteArgs(tt.args))
		})
	}
}

func TestQuoteArgsPastesIntoShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	args := []string{"python3", "", "a b", "it's", `say "hi"`, "$HOME", "`id`", "*", "~", `back\slash`, "tab\there", "new\nline", "modèle", "!x", "a'b'c", "--x=y,z"}
	out, err := exec.Command(sh, "-c", `printf '%s\0' `+QuoteArgs(args)).Output()
	require.NoError(t, err)
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	assert.Equal(t, args, got)
}

func TestWriteText(t *testing.T) {
	r := withExplainEnv(sampleReport())
	r.Mode = "explain"
	execOf(r).Argv = []string{"python3", "-m", "infera.engine.vllm", "--served-model-name", "my model"}
	r.Outcome = Outcome{Result: ResultWouldStart}
	var b bytes.Buffer
	WriteText(&b, r)
	out := b.String()

	assert.Contains(t, out, "infera-exec v0.3.0: plan (nothing was changed)\n")
	assert.Contains(t, out, "Environment changes:\n  PATH\n    now /overlay/bin:/usr/bin\n    was /usr/bin\n")
	assert.Contains(t, out, "  cwd    /\n")
	assert.Contains(t, out, "  nofile soft 1048576, hard 1048576\n")
	assert.Contains(t, out, "  path   /usr/bin/python3\n")
	assert.Contains(t, out, "  argv   python3 -m infera.engine.vllm --served-model-name 'my model'\n")
	assert.Contains(t, out, "  env\n    PATH=/overlay/bin:/usr/bin\n    HF_TOKEN=<redacted>\n", "secrets are redacted in the plan too")
	assert.Contains(t, out, "Warnings:\n  something to fix\n")
	assert.True(t, strings.HasSuffix(out, "Verdict: would start the worker (exit 0)\n"), out)
}

func TestWriteTextRefused(t *testing.T) {
	r := sampleReport()
	r.Sections = []Section{&launch.Outcome{Command: []string{"nosuch", "a b"}, Cwd: "/srv", Init: config.InitOff}}
	r.Outcome = Outcome{Result: ResultExecFailed, Code: 127, Reason: "nosuch: not found"}
	var b bytes.Buffer
	WriteText(&b, r)
	out := b.String()
	assert.Contains(t, out, "infera-exec v0.3.0: run\n")
	assert.Contains(t, out, "  argv   nosuch 'a b'\n", "the command as given when it was not resolved")
	assert.NotContains(t, out, "  path   ")
	assert.NotContains(t, out, "  env\n")
	assert.True(t, strings.HasSuffix(out, "Verdict: exec-failed (exit 127): nosuch: not found\n"), out)
}

// Secrets in the worker's arguments or environment never reach the
// report file, the plan or the exec log line.
func TestSecretsAreRedacted(t *testing.T) {
	argv := []string{"vllm", "serve", "/m", "--api-key", "sk-live-1234", "--hf-token=hf_abcd", "--tokenizer", "/tok",
		"--max-num-batched-tokens", "8192", "--ssl-keyfile", "/k.pem", "--db-password", "pw", "--client-secret=s3", "--", "--api-key", "x"}
	got := RedactArgs(argv)
	assert.Equal(t, []string{"vllm", "serve", "/m", "--api-key", Redacted, "--hf-token=" + Redacted, "--tokenizer", "/tok",
		"--max-num-batched-tokens", "8192", "--ssl-keyfile", "/k.pem", "--db-password", Redacted, "--client-secret=" + Redacted, "--", "--api-key", Redacted}, got)
	assert.Equal(t, "sk-live-1234", argv[4], "the worker still gets the real value")
	for name, want := range map[string]bool{"HF_TOKEN": true, "OPENAI_API_KEY": true, "AWS_SECRET_ACCESS_KEY": true, "HUGGING_FACE_HUB_TOKEN": true,
		"TOKENIZERS_PARALLELISM": false, "PATH": false, "MY_PASSWORD_FILE": true, "INFERA_EXEC_REPORT": false} {
		assert.Equal(t, want, SecretName(name), name)
	}

	r := sampleReport()
	r.Args = append([]string{"infera-exec"}, argv...)
	execOf(r).Argv, execOf(r).Command = argv, argv
	v := "sk-env-5678"
	r.EnvChanges = append(r.EnvChanges, environ.Change{Name: "VLLM_API_KEY", After: &v})
	path := filepath.Join(t.TempDir(), "report.json")
	_, err := Write(r, path, "", "")
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, s := range []string{"sk-live-1234", "hf_abcd", "sk-env-5678", "s3\""} {
		assert.NotContains(t, string(data), s)
	}
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	var b bytes.Buffer
	WriteText(&b, r)
	assert.NotContains(t, b.String(), "sk-live-1234")
	assert.Equal(t, "sk-live-1234", execOf(r).Argv[4], "the report itself keeps what the worker gets")
}

// The peak RSS comes from /proc/self/status (VmHWM): a running test has one.
func TestReadResources(t *testing.T) {
	r := ReadResources()
	require.NotNil(t, r)
	assert.Positive(t, r.PeakRSSKB)
}

// TestMarshalIsTheIndentedDocument: the report file, written member by
// member through one encoder into one buffer, is byte for byte what
// encoding/json's MarshalIndent makes of the compact document
// (MarshalJSON), and each section's member holds what json.Marshal makes
// of its value, in pass order between the head's and the tail's members.
func TestMarshalIsTheIndentedDocument(t *testing.T) {
	for name, r := range map[string]*Report{"realistic": realisticReport(), "sample": sampleReport(), "explain": withExplainEnv(sampleReport())} {
		t.Run(name, func(t *testing.T) {
			got, err := Marshal(r)
			require.NoError(t, err)
			want, err := json.MarshalIndent(r, "", "  ")
			require.NoError(t, err)
			assert.Equal(t, string(want)+"\n", string(got))

			var keys []string
			members := map[string]json.RawMessage{}
			dec := json.NewDecoder(bytes.NewReader(got))
			_, err = dec.Token() // {
			require.NoError(t, err)
			for dec.More() {
				k, err := dec.Token()
				require.NoError(t, err)
				var v json.RawMessage
				require.NoError(t, dec.Decode(&v))
				keys = append(keys, k.(string))
				members[k.(string)] = v
			}
			wantKeys := []string{"schema", "tool", "mode", "started", "pid", "uid", "gid", "args"}
			if r.Config != nil {
				wantKeys = append(wantKeys, "config")
			}
			for _, s := range r.Sections {
				for _, f := range s.Fields() {
					v, err := json.Marshal(f.Value)
					require.NoError(t, err)
					if string(v) == "null" {
						continue
					}
					wantKeys = append(wantKeys, f.Key)
					var compact bytes.Buffer
					require.NoError(t, json.Compact(&compact, members[f.Key]))
					assert.Equal(t, string(v), compact.String(), f.Key)
				}
			}
			if len(r.EnvChanges) > 0 {
				wantKeys = append(wantKeys, "env_changes")
			}
			wantKeys = append(wantKeys, "log", "timings")
			if r.Resources != nil {
				wantKeys = append(wantKeys, "resources")
			}
			wantKeys = append(wantKeys, "outcome")
			assert.Equal(t, wantKeys, keys)
		})
	}
}
