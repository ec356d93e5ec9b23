package pyimport

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	latin1Once sync.Once
	latin1Dir  string
	latin1Err  error
)

// latin1Locales builds (once) a locale directory for LOCPATH holding
// en_US.ISO-8859-1, made by glibc's localedef from Debian's locales
// sources: a worker locale whose encoding is Latin-1.
func latin1Locales(t *testing.T) string {
	latin1Once.Do(func() {
		dir, err := os.MkdirTemp("", "locales")
		if err != nil {
			latin1Err = err
			return
		}
		out, err := exec.Command("localedef", "-i", "en_US", "-f", "ISO-8859-1", filepath.Join(dir, "en_US.ISO-8859-1")).CombinedOutput()
		if err != nil {
			latin1Err = fmt.Errorf("localedef -i en_US -f ISO-8859-1: %v: %s", err, out)
			return
		}
		latin1Dir = dir
	})
	if latin1Err != nil {
		needFixture(t, "a Latin-1 locale built by localedef (apt-get install locales): %v", latin1Err)
	}
	return latin1Dir
}

// A locale case is a .pth file with bytes outside ASCII, read by a
// worker in a locale. What the resolver must say on each version follows
// site.py's addpackage and the interpreter's locale set-up (see
// pthCodec): either it is certain (and the interpreter agrees), or it
// names the rule; where the rule says the start fails, the interpreter
// is held to failing.
type localeCase struct {
	env  map[string]string // besides PATH and HOME; "LOCPATH" = the Latin-1 locales
	opts []string          // interpreter options before -c
}

// The expected reason of a .pth with Latin-1 bytes (latin1) or with
// UTF-8 ones outside ASCII, by version, for each locale case. A path
// that is not ASCII is also encoded to be looked for, in the filesystem
// encoding (UTF-8 in the UTF-8 Mode, else the locale's): in ASCII it
// cannot be, and the line adds nothing.
var localeCases = map[string]struct {
	localeCase
	latin1, utf8 func(version string) string
}{
	"no locale variables": {localeCase{}, // the C locale: the UTF-8 Mode; coerced to C.UTF-8 when installed
		byVersion("fails at start", "coerced to C.UTF-8", "coerced to C.UTF-8"), byVersion("", "coerced to C.UTF-8", "")},
	"LC_ALL=C": {localeCase{env: map[string]string{"LC_ALL": "C"}},
		byVersion("fails at start", "fails at start", "fails at start"), byVersion("", "fails at start", "")},
	"LC_ALL=POSIX PYTHONUTF8=0": {localeCase{env: map[string]string{"LC_ALL": "POSIX", "PYTHONUTF8": "0"}},
		byVersion("fails at start", "fails at start", "fails at start"), byVersion("fails at start", "fails at start", "")},
	"LANG=C.UTF-8": {localeCase{env: map[string]string{"LANG": "C.UTF-8"}},
		byVersion("depends on the locale definitions", "depends on the locale definitions", "depends on the locale definitions"),
		byVersion("depends on the locale definitions", "depends on the locale definitions", "depends on the locale definitions")},
	"LC_CTYPE=C LANG=C.UTF-8 PYTHONCOERCECLOCALE=0": {localeCase{env: map[string]string{"LC_CTYPE": "C", "LANG": "C.UTF-8", "PYTHONCOERCECLOCALE": "0"}},
		byVersion("fails at start", "fails at start", "fails at start"), byVersion("", "fails at start", "")},
	"Latin-1 locale": {localeCase{env: map[string]string{"LC_ALL": "en_US.ISO-8859-1", "LOCPATH": ""}},
		byVersion("depends on the locale definitions", "depends on the locale definitions", "depends on the locale definitions"),
		byVersion("depends on the locale definitions", "depends on the locale definitions", "depends on the locale definitions")},
	"Latin-1 locale, PYTHONUTF8=1": {localeCase{env: map[string]string{"LANG": "en_US.ISO-8859-1", "LOCPATH": "", "PYTHONUTF8": "1"}},
		byVersion("fails at start", "depends on the locale definitions", "depends on the locale definitions"),
		byVersion("", "depends on the locale definitions", "")},
	"Latin-1 locale, PYTHONUTF8=1 under -E": {localeCase{env: map[string]string{"LANG": "en_US.ISO-8859-1", "LOCPATH": "", "PYTHONUTF8": "1"}, opts: []string{"-E"}},
		byVersion("depends on the locale definitions", "depends on the locale definitions", "depends on the locale definitions"),
		byVersion("depends on the locale definitions", "depends on the locale definitions", "depends on the locale definitions")},
	"Latin-1 locale, -X utf8": {localeCase{env: map[string]string{"LC_ALL": "en_US.ISO-8859-1", "LOCPATH": ""}, opts: []string{"-X", "utf8"}},
		byVersion("fails at start", "depends on the locale definitions", "depends on the locale definitions"),
		byVersion("", "depends on the locale definitions", "")},
	"-X utf8=0 LC_ALL=C": {localeCase{env: map[string]string{"LC_ALL": "C"}, opts: []string{"-X", "utf8=0"}},
		byVersion("fails at start", "fails at start", "fails at start"), byVersion("fails at start", "fails at start", "")},
	// PYTHONCOERCECLOCALE is not read under -E: the C locale is coerced.
	"LC_CTYPE=C PYTHONCOERCECLOCALE=0 under -E": {localeCase{env: map[string]string{"LC_CTYPE": "C", "PYTHONCOERCECLOCALE": "0"}, opts: []string{"-E"}},
		byVersion("fails at start", "coerced to C.UTF-8", "coerced to C.UTF-8"), byVersion("", "coerced to C.UTF-8", "")},
	// An empty variable names no locale: the next one does.
	"LC_ALL= LANG=Latin-1": {localeCase{env: map[string]string{"LC_ALL": "", "LANG": "en_US.ISO-8859-1", "LOCPATH": ""}},
		byVersion("depends on the locale definitions", "depends on the locale definitions", "depends on the locale definitions"),
		byVersion("depends on the locale definitions", "depends on the locale definitions", "depends on the locale definitions")},
	"-X utf8 LC_ALL=C": {localeCase{env: map[string]string{"LC_ALL": "C"}, opts: []string{"-X", "utf8"}},
		byVersion("fails at start", "fails at start", "fails at start"), byVersion("", "fails at start", "")},
}

// byVersion is a reason for 3.10, one for 3.11 and 3.12, one for 3.13 and
// later.
func byVersion(v310, v311, v313 string) func(string) string {
	return func(v string) string {
		switch {
		case versionAtLeast(v, 13):
			return v313
		case versionAtLeast(v, 11):
			return v311
		}
		return v310
	}
}

// The locale cases join the rules held against every CPython, each with
// a .pth naming a directory in Latin-1 bytes and one naming it in UTF-8
// (both directories exist).
func init() {
	for name, c := range localeCases {
		for _, content := range []struct {
			kind, pth string
			why       func(string) string
		}{{"latin-1", "@/extra1\n@/caf\xe9\n", c.latin1}, {"utf-8", "@/extra1\n@/caf\u00e9\n", c.utf8}} {
			lc := c.localeCase
			why := content.why
			ruleCases["pth "+content.kind+", "+name] = ruleCase{
				build: func(t *testing.T, T, exe, version string) genLayout {
					l := bare(t, T, exe, version, map[string]string{"a.pth": content.pth})
					for _, d := range []string{"caf\xe9", "caf\u00e9"} {
						require.NoError(t, os.MkdirAll(filepath.Join(T, d), 0o755))
					}
					for k, v := range lc.env {
						if k == "LOCPATH" {
							v = latin1Locales(t)
						}
						l.env[k] = v
					}
					if len(lc.opts) > 0 {
						l.argv = append(append([]string{l.argv[0]}, lc.opts...), l.argv[1:]...)
					}
					return l
				},
				uncertain: why,
				fails:     func(v string) bool { return strings.Contains(why(v), "fails at start") },
			}
		}
	}
}
