package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
)

// config.Vars is the one list of the variables infera-exec reads: --help
// prints it, and the README's table must have a row for each, and no row
// for a variable infera-exec does not read.
func TestHelpAndReadmeListEveryVariable(t *testing.T) {
	help := helpText()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	known := map[string]bool{}
	for _, v := range config.Vars {
		known[v.Name] = true
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(v.Name)+`\s`, help, "--help lists %s", v.Name)
		assert.Contains(t, string(readme), "| `"+v.Name+"` |", "the README's table has a row for %s", v.Name)
	}
	for name := range config.Foreign {
		if strings.HasPrefix(name, "INFERA_KVD") || name == "INFERA_ADVERTISE_IP" {
			assert.Contains(t, string(readme), "| `"+name+"` |", "the README names the worker's variable %s", name)
		}
	}
	// Every INFERA_* row names a variable infera-exec reads or one the
	// worker reads.
	for _, m := range regexp.MustCompile("(?m)^\\| `(INFERA_[A-Z0-9_]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		_, foreign := config.Foreign[m[1]]
		assert.True(t, known[m[1]] || foreign, "README row for %s, which is in neither config.Vars nor config.Foreign", m[1])
	}
	for _, line := range strings.Split(help, "\n") {
		assert.LessOrEqual(t, len(line), 80, "--help fits 80 columns: %q", line)
	}
}
