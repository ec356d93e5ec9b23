package report

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Last shows only a report that is a regular file of this uid, reached
// without following a link: each row breaks one of those.
func TestLastTrustsOnlyARegularFileOfThisUid(t *testing.T) {
	body := `{"schema":1,"tool":{"version":"x"},"mode":"start"}`
	cases := []struct {
		name  string
		setup func(t *testing.T, p string)
		want  string // "" = shown
	}{
		{"this uid's file", func(t *testing.T, p string) { require.NoError(t, os.WriteFile(p, []byte(body), 0o600)) }, ""},
		{"a link to a report", func(t *testing.T, p string) {
			real := p + ".real"
			require.NoError(t, os.WriteFile(real, []byte(body), 0o600))
			require.NoError(t, os.Symlink(real, p))
		}, "symbolic link"},
		{"a directory", func(t *testing.T, p string) { require.NoError(t, os.Mkdir(p, 0o700)) }, "not a regular file"},
		{"another uid's file", func(t *testing.T, p string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the file to another uid (CI runs as root)")
			}
			require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
			require.NoError(t, os.Chown(p, 65534, 65534))
		}, "belongs to uid 65534"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), Name)
			c.setup(t, p)
			_, data, err := Last(p, "")
			if c.want == "" {
				require.NoError(t, err)
				assert.Equal(t, body, string(data))
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Nil(t, data)
		})
	}
}
