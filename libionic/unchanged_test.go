package libionic

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// "already the host build" is decided by the digest of every file the
// two names lead to: the soname's file and the provider link's file,
// here two different files. Each that is not byte for byte the host
// build (another build, or the host build with one byte changed at the
// same length) makes the start replace it.
func TestUnchangedOnlyWhenEveryFileIsTheHostBuild(t *testing.T) {
	host, err := os.ReadFile(realMana)
	if err != nil {
		needDebianRDMA(t)
		t.Fatal(err)
	}
	flipped := append([]byte(nil), host...)
	flipped[len(flipped)-1] ^= 0xff // same size, other bytes
	other := append(append([]byte(nil), host...), 0)
	for _, c := range []struct {
		soname, provider []byte
		name             string
	}{
		{host, host, "both the host build"},
		{host, other, "provider another build"},
		{other, host, "soname another build"},
		{host, flipped, "provider one byte changed"},
		{flipped, host, "soname one byte changed"},
		{other, other, "neither"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := fakeRoot(t, true)
			lib := filepath.Join(root, multiarch)
			require.NoError(t, os.WriteFile(filepath.Join(lib, "libmana.so.1.0.44.0"), c.soname, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(lib, "libmana-provider.so"), c.provider, 0o644))
			require.NoError(t, os.Remove(filepath.Join(lib, "libibverbs/libmana-rdmav34.so")))
			symlink(t, "../libmana-provider.so", filepath.Join(lib, "libibverbs/libmana-rdmav34.so"))

			r := Swap(context.Background(), opts(root))
			same := string(c.soname) == string(host) && string(c.provider) == string(host)
			if same {
				assert.Equal(t, Unchanged, r.State, r.Summary)
				return
			}
			require.Equal(t, Replaced, r.State, r.Summary)
			for _, name := range []string{"libmana.so.1.0.44.0", "libmana-provider.so"} {
				got, err := os.ReadFile(filepath.Join(lib, name))
				require.NoError(t, err)
				assert.Equal(t, host, got, fmt.Sprintf("%s is the host build after the swap", name))
			}
		})
	}
}
