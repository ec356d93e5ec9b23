package overlay

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/infera/infera-exec/config"
)

// A start warns when another uid can change the payload root (it, or a
// directory above it, owned by another uid or writable by group or
// others; an ancestor's stickiness respected, the root's not), and
// refuses (78) when patches or native capabilities are required.
func TestPayloadRootTrustedLikeTheStateDirectory(t *testing.T) {
	if unix.Geteuid() != 0 {
		t.Skip("the owner cases need root (chown to another uid)")
	}
	const other = 4242
	for _, c := range []struct {
		rootMode, parentMode os.FileMode
		rootUID, parentUID   int
		link                 bool // the root reached through a link of another uid
		trusted              bool
		why                  string
	}{
		{rootMode: 0o755, parentMode: 0o755, trusted: true},
		{rootMode: 0o700, parentMode: 0o711, trusted: true},
		{rootMode: 0o555, parentMode: 0o777 | os.ModeSticky, trusted: true},
		{rootMode: 0o775, parentMode: 0o755, why: "mode 0775"},
		{rootMode: 0o757, parentMode: 0o755, why: "mode 0757"},
		{rootMode: 0o777, parentMode: 0o755, why: "mode 0777"},
		{rootMode: 0o777 | os.ModeSticky, parentMode: 0o755, why: "mode 1777"},
		{rootMode: 0o755, rootUID: other, parentMode: 0o755, why: "@: is owned by uid 4242, not by uid 0"},
		{rootMode: 0o777 | os.ModeSticky, rootUID: other, parentMode: 0o755, why: "@: is owned by uid 4242"},
		{rootMode: 0o755, parentMode: 0o775, why: "mode 0775) can be written by others and is not sticky"},
		{rootMode: 0o755, parentMode: 0o757, why: "mode 0757) can be written by others and is not sticky"},
		{rootMode: 0o755, parentMode: 0o777, why: "not sticky"},
		{rootMode: 0o755, parentMode: 0o755, parentUID: other, why: "is owned by uid 4242"},
		{rootMode: 0o755, parentMode: 0o777 | os.ModeSticky, parentUID: other, why: "is owned by uid 4242"},
		{rootMode: 0o755, parentMode: 0o755, link: true, why: "symbolic link owned by uid 4242"},
	} {
		name := fmt.Sprintf("root%v-uid%d-parent%v-uid%d-link%v", c.rootMode, c.rootUID, c.parentMode, c.parentUID, c.link)
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			parent := filepath.Join(base, "parent")
			root := filepath.Join(parent, "overlay")
			require.NoError(t, os.MkdirAll(filepath.Join(root, "py312"), 0o755))
			require.NoError(t, os.Chmod(root, c.rootMode))
			require.NoError(t, os.Chown(root, c.rootUID, c.rootUID))
			require.NoError(t, os.Chmod(parent, c.parentMode))
			require.NoError(t, os.Chown(parent, c.parentUID, c.parentUID))
			named := root
			why := strings.ReplaceAll(c.why, "@", root)
			if c.link {
				named = filepath.Join(base, "link")
				require.NoError(t, os.Symlink(root, named))
				require.NoError(t, os.Lchown(named, other, other))
			}
			for _, req := range []string{"", "patches", "native", "native-auto"} {
				cfg := config.Config{PayloadRoot: named, PayloadRootFrom: "PAYLOAD_ROOT"}
				switch req {
				case "patches":
					cfg.RequirePatches = []string{"p"}
				case "native":
					cfg.RequireNative = config.Requirement{Raw: "mooncake", Names: []string{"mooncake"}}
				case "native-auto":
					cfg.RequireNative = config.Requirement{Raw: "auto", Auto: true}
				}
				var logs bytes.Buffer
				err := guarded(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
				if c.trusted {
					assert.NoError(t, err, req)
					assert.Empty(t, logs.String(), req)
					continue
				}
				if req == "" {
					require.NoError(t, err)
					assert.Contains(t, logs.String(), "level=WARN")
					assert.Contains(t, logs.String(), "payload root "+named+" (from PAYLOAD_ROOT) can be changed by another uid")
					assert.Contains(t, logs.String(), why)
					continue
				}
				var ref *Refusal
				require.ErrorAs(t, err, &ref, req)
				assert.Equal(t, 78, ref.ExitCode())
				assert.Contains(t, err.Error(), why)
				assert.Contains(t, err.Error(), "chmod go-w")
				assert.Contains(t, err.Error(), "INFERA_REQUIRE_"+map[string]string{"patches": "PATCHES", "native": "NATIVE", "native-auto": "NATIVE"}[req]+" is set")
				assert.Empty(t, logs.String())
			}
		})
	}
}

// A payload root that does not exist is not this check's to report.
func TestPayloadRootMissingIsLeftToOpen(t *testing.T) {
	var logs bytes.Buffer
	cfg := config.Config{PayloadRoot: filepath.Join(t.TempDir(), "missing"), RequirePatches: []string{"p"}}
	assert.NoError(t, guarded(cfg, slog.New(slog.NewTextHandler(&logs, nil))))
	assert.Empty(t, logs.String())
}
