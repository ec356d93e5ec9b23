package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The bill goes to -o, with SOURCE_DATE_EPOCH's time and no other; a
// malformed epoch and a file that is not a Go binary are refused.
func TestRun(t *testing.T) {
	bin, err := os.Executable()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "sbom.cdx.json")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"-name", "infera-exec", "-version", "v1.2.3", "-o", out, bin}, "86400", &stdout, &stderr), stderr.String())
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	var m struct {
		Format   string `json:"bomFormat"`
		Metadata struct {
			Timestamp string `json:"timestamp"`
			Component struct {
				Name, Version string
			} `json:"component"`
		} `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal(data, &m))
	assert.Equal(t, "CycloneDX", m.Format)
	assert.Equal(t, "1970-01-02T00:00:00Z", m.Metadata.Timestamp)
	assert.Equal(t, "infera-exec", m.Metadata.Component.Name)
	assert.Equal(t, "v1.2.3", m.Metadata.Component.Version)
	assert.Empty(t, stdout.String())

	stdout.Reset()
	require.Equal(t, 0, run([]string{bin}, "", &stdout, &stderr))
	assert.NotContains(t, stdout.String(), `"timestamp"`, "no SOURCE_DATE_EPOCH: no time")

	assert.Equal(t, 64, run([]string{bin}, "yesterday", &stdout, &stderr))
	assert.Contains(t, stderr.String(), `SOURCE_DATE_EPOCH="yesterday"`)

	script := filepath.Join(t.TempDir(), "x.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755))
	stderr.Reset()
	assert.Equal(t, 1, run([]string{script}, "", &stdout, &stderr))
	assert.Contains(t, stderr.String(), "not a Go binary")
}
