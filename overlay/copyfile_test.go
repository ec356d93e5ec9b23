package overlay

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Both ways of copying a file (copy_file_range with the copy read back,
// and the buffered copy hashing what it writes) give the destination the
// source's bytes and the SHA-256 of the destination's content, stop one
// byte past the size the index gives, and report a short source as
// short. Sizes around the buffer's.
func TestCopyVerifiedBothWays(t *testing.T) {
	buf := make([]byte, 4096)
	dir := t.TempDir()
	ways := map[string]func(dst, src *os.File, size int64) (int64, string, error){
		"copy_file_range": func(dst, src *os.File, size int64) (int64, string, error) {
			return copyVerified(dst, src, size, buf, io.Discard)
		},
		"buffered": func(dst, src *os.File, size int64) (int64, string, error) {
			return copyThrough(dst, src, size+1, buf, io.Discard)
		},
	}
	for way, copyFn := range ways {
		for _, tc := range []struct{ have, size int }{
			{0, 0}, {1, 1}, {4095, 4095}, {4096, 4096}, {4097, 4097}, {3*4096 + 5, 3*4096 + 5},
			{10000, 9000}, // longer than the index says
			{9000, 10000}, // shorter
		} {
			t.Run(way+"/"+strconv.Itoa(tc.have)+"-"+strconv.Itoa(tc.size), func(t *testing.T) {
				content := make([]byte, tc.have)
				rand.New(rand.NewSource(int64(tc.have))).Read(content)
				sp := filepath.Join(dir, way+"-src-"+strconv.Itoa(tc.have)+"-"+strconv.Itoa(tc.size))
				require.NoError(t, os.WriteFile(sp, content, 0o644))
				src, err := os.Open(sp)
				require.NoError(t, err)
				defer src.Close()
				dst, err := os.OpenFile(sp+".copy", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
				require.NoError(t, err)
				defer dst.Close()
				n, sum, err := copyFn(dst, src, int64(tc.size))
				require.NoError(t, err)
				want := content[:min(tc.have, tc.size+1)]
				assert.Equal(t, int64(len(want)), n)
				got, err := os.ReadFile(sp + ".copy")
				require.NoError(t, err)
				assert.Equal(t, want, got)
				h := sha256.Sum256(got)
				assert.Equal(t, hex.EncodeToString(h[:]), sum)
			})
		}
	}
}
