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
// "<id> <state>" line per patch, in its EXPECTED file; a third field,
// "<id> <state> <variant>", names the variant that must decide the state.
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
			wantLines := strings.Split(strings.TrimSpace(string(want)), "\n")
			sort.Strings(wantLines)
			withVariant := map[string]bool{}
			for _, l := range wantLines {
				if f := strings.Fields(l); len(f) == 3 {
					withVariant[f[0]] = true
				}
			}
			var got []string
			for _, r := range rep.Results {
				line := r.ID + " " + string(r.State)
				if withVariant[r.ID] {
					line += " " + r.Variant
				}
				got = append(got, line)
			}
			sort.Strings(got)
			assert.Equal(t, wantLines, got)
			if strings.Contains(string(want), " drift") {
				assert.Equal(t, exitPatch, code)
			} else {
				assert.Equal(t, exitOK, code)
			}
		})
	}
}
