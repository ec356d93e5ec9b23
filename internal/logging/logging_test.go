package logging

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Another program of the project logs in the same format under its own
// name: the text prefix and the JSON logger attribute.
func TestNewNamedKeepsTheFormat(t *testing.T) {
	var b bytes.Buffer
	NewNamed(&b, "infera-payload", false, false, nil).Info("index copy: 1 of 2 files")
	assert.Equal(t, "infera-payload: index copy: 1 of 2 files\n", b.String())
	b.Reset()
	NewNamed(&b, "infera-payload", true, false, nil).Info("index copy: 1 of 2 files")
	assert.Contains(t, b.String(), `"logger":"infera-payload"`)
	assert.Contains(t, b.String(), `"msg":"index copy: 1 of 2 files"`)
}
