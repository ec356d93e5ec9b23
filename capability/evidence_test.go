package capability

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A file is evidence of what a tree ships only when it resolves, through
// every link on the way, to a file inside the tree: each way a link can
// leave the tree (absolute, relative, through a chain, to a sibling whose
// name begins with the tree's, through a linked directory) withdraws the
// capability, and each way of staying inside grants it.
func TestEvidenceLinksAreResolvedBeforeTheyCount(t *testing.T) {
	for name, c := range map[string]struct {
		// layout under base: the tree is base/tree; link targets as given.
		links   map[string]string // path under base -> target
		files   []string          // regular files under base
		granted bool
	}{
		"regular file":               {files: []string{"tree/lib/libx.so.1"}, granted: true},
		"relative link inside":       {files: []string{"tree/lib/real.so"}, links: map[string]string{"tree/lib/libx.so.1": "real.so"}, granted: true},
		"absolute link inside":       {files: []string{"tree/lib/real.so"}, links: map[string]string{"tree/lib/libx.so.1": "@/tree/lib/real.so"}, granted: true},
		"chain staying inside":       {files: []string{"tree/real.so"}, links: map[string]string{"tree/lib/libx.so.1": "mid.so", "tree/lib/mid.so": "../real.so"}, granted: true},
		"absolute link outside":      {files: []string{"outside/libx.so.1"}, links: map[string]string{"tree/lib/libx.so.1": "@/outside/libx.so.1"}},
		"relative link outside":      {files: []string{"outside/libx.so.1"}, links: map[string]string{"tree/lib/libx.so.1": "../../outside/libx.so.1"}},
		"link to the tree's parent":  {files: []string{"libx.so.1"}, links: map[string]string{"tree/lib/libx.so.1": "../../libx.so.1"}},
		"sibling sharing the prefix": {files: []string{"tree-evil/libx.so.1"}, links: map[string]string{"tree/lib/libx.so.1": "@/tree-evil/libx.so.1"}},
		"chain leaving at its end":   {files: []string{"outside/libx.so.1"}, links: map[string]string{"tree/lib/libx.so.1": "mid.so", "tree/lib/mid.so": "@/outside/libx.so.1"}},
		"directory link leaving":     {files: []string{"outside/lib/libx.so.1"}, links: map[string]string{"tree/lib": "@/outside/lib"}},
		"dangling link":              {links: map[string]string{"tree/lib/libx.so.1": "@/nowhere/libx.so.1"}},
		"link out and back in":       {files: []string{"tree/lib/real.so"}, links: map[string]string{"tree/lib/libx.so.1": "../../tree/lib/real.so"}, granted: true},
	} {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(base, "tree"), 0o755))
			for _, f := range c.files {
				put(t, filepath.Join(base, f), "")
			}
			for l, target := range c.links {
				if target[0] == '@' {
					target = filepath.Join(base, target[1:])
				}
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(base, l)), 0o755))
				require.NoError(t, os.Symlink(target, filepath.Join(base, l)))
			}
			set, ev := Verify(filepath.Join(base, "tree"), map[string][]string{"mooncake": {"lib/libx.so*"}})
			assert.Equal(t, c.granted, set.Has("mooncake"), "granted")
			require.Len(t, ev, 1)
			assert.Equal(t, c.granted, ev[0].Granted)
			if !c.granted {
				assert.Equal(t, []string{"lib/libx.so*"}, ev[0].Missing)
			}
		})
	}
}
