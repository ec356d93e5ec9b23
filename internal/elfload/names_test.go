package elfload

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CPython's executable names Py_BytesMain (defines it, Debian's static
// build, or imports it from libpython, a shared build); another program
// (a shell) does not.
func TestNamesDynamic(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3.11"); err != nil {
		t.Skip("Debian's /usr/bin/python3.11 is missing (apt-get install python3)")
	}
	ok, err := NamesDynamic("/usr/bin/python3.11", "Py_BytesMain")
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = NamesDynamic("/bin/sh", "Py_BytesMain")
	require.NoError(t, err)
	assert.False(t, ok)
	ok, err = NamesDynamic("/bin/sh", "libc.so.6")
	require.NoError(t, err)
	assert.True(t, ok, "a needed library is named too")
	_, err = NamesDynamic("/etc/passwd", "x")
	assert.Error(t, err)
}
