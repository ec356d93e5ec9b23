package patches

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/procgroup"
	"github.com/infera/infera-exec/patches/patchdef"
)

// legacyScript is a v0.2.2 patch: an executable Python file in
// <payload>/patches/<import-name>/*.py, run with the interpreter when that
// package is importable.
type legacyScript struct {
	Path     string `json:"path"`
	Package  string `json:"package"`
	Ran      bool   `json:"ran"`
	ExitCode int    `json:"exit_code"`
	Took     string `json:"took,omitempty"`
	Output   string `json:"output,omitempty"` // the tail of stdout+stderr
	Why      string `json:"why,omitempty"`
	// SupersededBy is the id of the definition that fixes the same bug;
	// such a script never runs (on top of the definition's edits it would
	// half-apply or apply twice).
	SupersededBy string `json:"superseded_by,omitempty"`
}

// legacyScripts lists the v0.2.2 scripts under dir, in name order per package.
func legacyScripts(dir string) []legacyScript {
	matches, _ := filepath.Glob(filepath.Join(dir, "*", "*.py"))
	sort.Strings(matches)
	var out []legacyScript
	for _, m := range matches {
		if fi, err := os.Stat(m); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, legacyScript{Path: m, Package: filepath.Base(filepath.Dir(m))})
	}
	return out
}

// superseded marks the scripts whose fix a definition of set covers (its
// supersedes list names the script's file name, for the same package).
func superseded(scripts []legacyScript, set *patchdef.Set) []legacyScript {
	for i := range scripts {
		scripts[i].SupersededBy = set.Supersede(scripts[i].Path, scripts[i].Package)
	}
	return scripts
}

// runScripts runs each script whose package was found, as v0.2.2 did:
// `<python> <script>` with the worker's environment and cwd /. A failing
// script is reported, never fatal.
func runScripts(ctx context.Context, scripts []legacyScript, loc *Location, python string, env *environ.Env, timeout time.Duration, dry bool) []legacyScript {
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	out := make([]legacyScript, 0, len(scripts))
	for _, s := range scripts {
		pkg, ok := loc.Packages[s.Package]
		switch {
		case s.SupersededBy != "":
			s.Why = "superseded by " + s.SupersededBy + "; not run"
		case !ok || !pkg.Found:
			s.Why = s.Package + " is not importable; not run"
		case dry:
			s.Why = "would run"
		default:
			runScript(ctx, &s, python, env, timeout)
		}
		out = append(out, s)
	}
	return out
}

func runScript(ctx context.Context, s *legacyScript, python string, env *environ.Env, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	cmd := procgroup.Command(ctx, python, s.Path)
	cmd.Env = env.Slice()
	cmd.Dir = "/"
	var buf procgroup.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := procgroup.Run(ctx, cmd)
	s.Ran = true
	s.Took = time.Since(start).Round(time.Millisecond).String()
	s.Output = tail(buf.String())
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		s.ExitCode = -1
		s.Why = fmt.Sprintf("killed after %s", timeout)
	case err != nil:
		s.ExitCode = -1
		if ee, ok := err.(*exec.ExitError); ok {
			s.ExitCode = ee.ExitCode()
		}
		s.Why = err.Error()
	}
}
