package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/internal/testsupport/fixture"
	"github.com/infera/infera-exec/patches"
)

// Every test tree states the patch states --check must find in it, one
// "<id> <state>" line per patch, in its EXPECTED file.
func TestCheckMatchesExpected(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, fixture.Trees("../../patches/testdata/trees", dir))
	trees, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	require.NotEmpty(t, trees)
	for _, tree := range trees {
		t.Run(filepath.Base(tree), func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(tree, "EXPECTED"))
			require.NoError(t, err)
			root := filepath.Join(tree, "site-packages")
			if _, err := os.Stat(root); err != nil {
				root = tree // an image-like tree: --check finds the packages
				matches, _ := filepath.Glob(filepath.Join(tree, "sgl-workspace/sglang/python"))
				if len(matches) == 1 {
					root = matches[0]
				}
			}
			var out, errb bytes.Buffer
			code := run([]string{"infera-exec", "--check", root, "--json"}, []string{"PAYLOAD_ROOT=/nonexistent"}, &out, &errb)
			var rep patches.CheckReport
			require.NoError(t, json.Unmarshal(out.Bytes(), &rep), "stderr: %s", errb.String())
			var got []string
			for _, r := range rep.Results {
				got = append(got, r.ID+" "+string(r.State))
			}
			sort.Strings(got)
			wantLines := strings.Split(strings.TrimSpace(string(want)), "\n")
			sort.Strings(wantLines)
			assert.Equal(t, wantLines, got)
			if strings.Contains(string(want), " drift") {
				assert.Equal(t, exitPatch, code)
			} else {
				assert.Equal(t, exitOK, code)
			}
		})
	}
}
