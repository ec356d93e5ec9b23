package logging

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A value from the environment (a path, a variable) holding control
// characters cannot forge a line or drive the terminal.
func TestTextLinesEscapeControlCharacters(t *testing.T) {
	var b bytes.Buffer
	log := New(&b, false, false, nil)
	log.Info("chdir /x\x1b[2J\rinfera-exec: replaced\nfake\x7f\u0085end\ttab")
	assert.Equal(t, "infera-exec: chdir /x\\x1b[2J\\x0dinfera-exec: replaced fake\\x7f\\x85end\\x09tab\n", b.String())
}
