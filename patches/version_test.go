package patches

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/patches/patchdef"
)

// Issue: an unreadable METADATA made the version unknown without a word,
// and a copy of the distribution's metadata in a later sys.path directory
// (another installation) was taken instead: a version-gated patch was
// applied on the strength of a version that is not the imported copy's.
// Now the metadata beside the package decides; when it cannot be read the
// start says so (a warning and the result's why), the gated patch is not
// applied and is drift (undecided), so a required one refuses.
func TestUnreadableMetadataIsSaidAndNotApplied(t *testing.T) {
	py := debianPython(t)
	site, other := t.TempDir(), t.TempDir()
	write(t, filepath.Join(site, "demo/__init__.py"), "")
	write(t, filepath.Join(site, "demo/a.py"), "    a, _ = x\n")
	write(t, filepath.Join(site, "demo-1.5.dist-info/RECORD"), "")
	require.NoError(t, syscall.Mkfifo(filepath.Join(site, "demo-1.5.dist-info/METADATA"), 0o644))
	write(t, filepath.Join(other, "demo-1.2.dist-info/METADATA"), "Name: demo\nVersion: 1.2\n")
	payload := t.TempDir()
	write(t, filepath.Join(payload, "patches/demo/fix.toml"), `id = "demo-fix"
summary = "s"
package = "demo"
distribution = "demo"
versions = ">= 1.0"
[[guard]]
file = "a.py"
[[edit]]
file = "a.py"
anchor = "    a, _ = x\n"
replacement = "    a = x[0]\n"
`)
	for _, required := range []bool{false, true} {
		var logs strings.Builder
		cfg := config.Config{PayloadRoot: payload}
		if required {
			cfg.RequirePatches = []string{"demo-fix"}
		}
		out, err := Run(t.Context(), Input{Config: cfg, Python: py, Env: envWith("PYTHONPATH", site+":"+other),
			Worker: &launch.Outcome{Cwd: "/"}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
		assert.Equal(t, "    a, _ = x\n", read(t, filepath.Join(site, "demo/a.py")), "not applied on a version that cannot be told")
		require.NotEmpty(t, out.Results)
		r := out.Results[len(out.Results)-1]
		require.Equal(t, "demo-fix", r.ID)
		assert.Equal(t, patchdef.Drift, r.State)
		assert.Contains(t, r.Why, "the version of demo is unknown (cannot read "+filepath.Join(site, "demo-1.5.dist-info/METADATA"))
		assert.Contains(t, logs.String(), "level=WARN")
		assert.Contains(t, logs.String(), "the version is unknown (cannot read ")
		assert.Contains(t, logs.String(), "the patches limited to a version range are not applied")
		pkg := out.Location.Packages["demo"]
		assert.Empty(t, pkg.Version, "the other installation's 1.2 is not this copy's version")
		if !required {
			require.NoError(t, err)
			continue
		}
		var req *RequiredError
		require.True(t, errors.As(err, &req), "%v", err)
		assert.Contains(t, err.Error(), "required patch demo-fix is drift")
	}
}
