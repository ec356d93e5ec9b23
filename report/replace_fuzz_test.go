package report_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	. "github.com/infera/infera-exec/report"
)

// Whatever a file at the report's path holds, a start either replaces it
// with a whole report or leaves it byte for byte as it was; a file that
// begins as a report, whatever follows its head, is replaced.
func FuzzWriteOverAnExistingFile(f *testing.F) {
	old, err := Marshal(sampleReport())
	if err != nil {
		f.Fatal(err)
	}
	head := old[:bytes.Index(old, []byte(`"started"`))]
	f.Add(false, old)
	f.Add(true, []byte(`"pad": 1}`))
	f.Add(false, []byte(`{"schema": 2, "tool": {}, "mode": "exec"}`))
	f.Add(false, []byte(`{"model_type": "llama"}`))
	f.Add(false, []byte(`{"schema": 2, "tool": null, "mode": "exec"}`))
	f.Add(false, []byte(" \n{\"schema\":1,\"tool\":{\"version\":\"v\"},\"mode\":\"x\""))
	f.Add(false, []byte(`[`))
	f.Add(false, []byte{})
	path := filepath.Join(f.TempDir(), "report.json") // one per fuzzing process, whose inputs run one at a time
	f.Fuzz(func(t *testing.T, withHead bool, data []byte) {
		if withHead {
			data = append(bytes.Clone(head), data...)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, werr := Write(sampleReport(), path, "", "")
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case werr != nil && withHead:
			t.Fatalf("a file that begins as a report was not replaced: %v", werr)
		case werr != nil && !bytes.Equal(got, data):
			t.Fatalf("refused (%v) but the file changed", werr)
		case werr == nil && !json.Valid(got):
			t.Fatalf("replaced by something that is not JSON")
		}
	})
}
