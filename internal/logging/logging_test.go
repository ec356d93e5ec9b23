package logging

import (
	"bytes"
	"errors"
	"fmt"
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

// A refusal's record: the brief of the error that has one replaces that
// error's own text within what wraps it (whose words stay), the whole
// message goes to detail; an error without a brief is its message.
func TestErrorRecordBriefWithinItsWrapping(t *testing.T) {
	inner := WithBrief(errors.New("no-such: not found in PATH=/a:/b:/c"), "no-such: not found in the 3 directories of PATH")
	err := fmt.Errorf("python interpreter (INFERA_PYTHON): %w; install it", inner)
	msg, detail := ErrorRecord(err)
	assert.Equal(t, "python interpreter (INFERA_PYTHON): no-such: not found in the 3 directories of PATH; install it", msg)
	assert.Equal(t, []any{"detail", err.Error()}, detail)

	msg, detail = ErrorRecord(errors.New("plain"))
	assert.Equal(t, "plain", msg)
	assert.Nil(t, detail, "no brief: no detail")

	msg, detail = ErrorRecord(WithBrief(errors.New("same"), "same"))
	assert.Equal(t, "same", msg)
	assert.Nil(t, detail, "a brief equal to the message adds nothing")

	var b bytes.Buffer
	m, d := ErrorRecord(err)
	WithStep(Open(&b, Options{Name: "infera-exec", Format: "text"}, nil), "abi").With(d...).Error(m, "event", "refused", "exit_code", 78)
	assert.Equal(t, "infera-exec: error: "+m+"\n", b.String(), "the text line is the brief alone")
	assert.Contains(t, m, "3 directories of PATH")
	b.Reset()
	WithStep(Open(&b, Options{Name: "infera-exec", Format: "json"}, nil), "abi").With(d...).Error(m, "event", "refused", "exit_code", 78)
	assert.Contains(t, b.String(), `"detail":"python interpreter (INFERA_PYTHON): no-such: not found in PATH=/a:/b:/c; install it"`)
}
