package patches

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/infera/infera-exec/patches/patchdef"
	"github.com/infera/infera-exec/patches/record"
)

// benchRecord is a record of six patches over a vLLM install: what a
// restart reads.
func benchRecord() record.Record {
	rec := record.Record{Version: record.Version, Key: "5c1d0e8f2a7b4c3d9e6f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d"}
	for i := 0; i < 24; i++ {
		rec.Files = append(rec.Files, record.File{Path: fmt.Sprintf("/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/mod%d.py", i),
			ID: identity{Dev: 2049, Ino: uint64(1234567 + i), Size: int64(4096 + i), Mode: 0o100644, Mtime: 1735787045123456789, Ctime: 1735787045123456789}, PyCache: i%4 == 0})
	}
	var results []Result
	for i := 0; i < 6; i++ {
		results = append(results, Result{ID: fmt.Sprintf("vllm-fix-%d", i), Summary: "keep the rocm path", Source: "builtin", Package: "vllm", Version: ">=0.10",
			State: patchdef.Applied, Before: patchdef.Applied, Action: "applied",
			Edits: []EditResult{{File: fmt.Sprintf("vllm/model_executor/layers/mod%d.py", i), Path: fmt.Sprintf("/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/mod%d.py", i),
				Evaluation: patchdef.Evaluation{State: patchdef.Applied, Replacement: 1}, SHA256After: "3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}}})
	}
	rec.Results, _ = json.Marshal(results)
	return rec
}

// BenchmarkRecordDecode is the record's read on every restart: the
// record, then the results it keeps.
func BenchmarkRecordDecode(b *testing.B) {
	rec := benchRecord()
	data, err := json.Marshal(&rec)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var got record.Record
		var res []Result
		if err := json.Unmarshal(data, &got); err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(got.Results, &res); err != nil {
			b.Fatal(err)
		}
	}
}
