package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

const stream = `{"Action":"run","Package":"p/a","Test":"TestOK"}
{"Action":"pass","Package":"p/a","Test":"TestOK"}
{"Action":"output","Package":"p/a","Test":"TestNS","Output":"=== RUN   TestNS\n"}
{"Action":"output","Package":"p/a","Test":"TestNS","Output":"    x_test.go:3: needs Linux namespaces (run as root)\n"}
{"Action":"skip","Package":"p/a","Test":"TestNS"}
{"Action":"output","Package":"p/a","Test":"TestS/py","Output":"    cmd.go:380: needs python3 (apt-get install python3)\n"}
{"Action":"output","Package":"p/a","Test":"TestS/py","Output":"    testscript.go:609: WORK=$WORK\n"}
{"Action":"skip","Package":"p/a","Test":"TestS/py"}
{"Action":"output","Package":"p/a","Test":"TestHelper","Output":"    x_test.go:9: helper: run by TestNS\n"}
{"Action":"skip","Package":"p/a","Test":"TestHelper"}
{"Action":"output","Package":"p/a","Output":"ok  \tp/a\t0.1s\n"}
{"Action":"pass","Package":"p/a"}
`

func TestReadCountsAndGroups(t *testing.T) {
	st := load("")
	var out strings.Builder
	failed := read(strings.NewReader(stream), &out, st)
	assert.False(t, failed)
	assert.Equal(t, "ok  \tp/a\t0.1s\n", out.String())
	assert.Equal(t, 1, st.Passed)
	assert.Equal(t, 2, st.Skipped, "the helper is not a skip")
	assert.Equal(t, 1, st.Helpers)

	var final strings.Builder
	writeFinal(&final, st)
	text := final.String()
	assert.Contains(t, text, "1 skipped: needs Linux namespaces (run as root)\n    enable: run the tests as root")
	assert.Contains(t, text, "1 skipped: needs python3 (apt-get install python3)\n    enable: apt-get install python3\n")
	assert.True(t, strings.HasSuffix(text, "\n1 passed, 0 failed, 2 skipped\n"), text)
}

func TestReadFailure(t *testing.T) {
	st := load("")
	var out strings.Builder
	failed := read(strings.NewReader(`{"Action":"output","Package":"p","Test":"TestX","Output":"    x_test.go:1: boom\n"}
{"Action":"fail","Package":"p","Test":"TestX"}
# p
./x.go:1: syntax error
{"Action":"fail","Package":"p"}
`), &out, st)
	assert.True(t, failed)
	assert.Equal(t, 1, st.Failed)
	assert.Contains(t, out.String(), "boom")
	assert.Contains(t, out.String(), "./x.go:1: syntax error", "lines that are not JSON are printed")
}
