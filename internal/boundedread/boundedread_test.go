package boundedread

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestFileRefusesWhatIsNotASmallRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))
	zero := filepath.Join(dir, "zero")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	big := filepath.Join(dir, "big")
	require.NoError(t, os.WriteFile(big, make([]byte, 101), 0o644))
	ok := filepath.Join(dir, "ok")
	require.NoError(t, os.WriteFile(ok, []byte("mooncake\n"), 0o644))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink("ok", link))

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := File(fifo, 100)
		assert.ErrorIs(t, err, ErrNotRegular)
		assert.ErrorContains(t, err, fifo)
		assert.ErrorContains(t, err, "FIFO")
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}

	_, err := File(zero, 100)
	assert.ErrorIs(t, err, ErrNotRegular)
	assert.ErrorContains(t, err, "character device")

	_, err = File(big, 100)
	assert.ErrorIs(t, err, ErrTooLarge)
	assert.ErrorContains(t, err, big)
	assert.ErrorContains(t, err, "cap is 100 bytes")

	_, err = File(dir, 100)
	assert.ErrorIs(t, err, ErrNotRegular)

	_, err = File(filepath.Join(dir, "missing"), 100)
	assert.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)

	data, err := File(link, 100)
	require.NoError(t, err)
	assert.Equal(t, "mooncake\n", string(data))

	_, err = FileNoFollow(link, 100)
	assert.ErrorContains(t, err, "symbolic link")
	data, err = FileNoFollow(ok, 100)
	require.NoError(t, err)
	assert.Equal(t, "mooncake\n", string(data))
}
