package overlay

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/launch"
)

// Choose opens the payload at root (from says where that root came from)
// and picks the trees for the family, then checks them against the image:
// a payload distribution that shadows the image's at another version is a
// warning; a capability whose evidence does not load is not granted. The
// payload is returned even when no tree fits, for the report.
func Choose(root, from string, f abi.Family, img Image, log *slog.Logger) (*Payload, *Selection, error) {
	pl, err := Open(root)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (payload root from %s)", err, from)
	}
	sel, err := pl.Select(f)
	if err != nil {
		return pl, nil, fmt.Errorf("%w (payload root from %s%s)", err, from, rootHint(root, pl))
	}
	if img.IndexFile == "" {
		if _, err := os.Stat(filepath.Join(root, IndexName)); err == nil {
			img.IndexFile = filepath.Join(root, IndexName)
		}
	}
	sel.checkLoads(img)
	sel.Shadows = Shadows(sel.PythonPath, img.Root, f.Python.Version())
	for _, sh := range sel.Shadows {
		sel.Warnings = append(sel.Warnings, sh.String())
	}
	if sel.Loads != nil && sel.Loads.Cached {
		log.Debug("native tree load check: cached verdict (payload and libraries unchanged)")
	}
	log.Info("python tree " + sel.PyTree)
	if sel.Native != nil {
		log.Info(fmt.Sprintf("native tree %s (capabilities: %s)", sel.Native.Dir, sel.Native.Caps))
	} else if !f.ROCm.Found {
		log.Info("no native tree: " + sel.NoNativeWhy)
	}
	for _, w := range sel.Warnings {
		log.Warn(w)
	}
	return pl, sel, nil
}

// Env is what the selection adds to the worker's environment: its
// directories first on PATH, PYTHONPATH and LD_LIBRARY_PATH (PATH gets
// execvp's default first when it is unset, so ours do not replace it).
func (s *Selection) Env() []environ.Edit {
	return []environ.Edit{
		environ.SetDefault("PATH", launch.DefaultPath),
		environ.Prepend("PATH", s.Path...),
		environ.Prepend("PYTHONPATH", s.PythonPath...),
		environ.Prepend("LD_LIBRARY_PATH", s.LibraryPath...),
	}
}

// EnvSummary is the log line for Env.
func (s *Selection) EnvSummary() string {
	var parts []string
	for _, v := range []struct {
		name string
		dirs []string
	}{{"PYTHONPATH", s.PythonPath}, {"LD_LIBRARY_PATH", s.LibraryPath}, {"PATH", s.Path}} {
		if len(v.dirs) > 0 {
			parts = append(parts, v.name+" += "+strings.Join(v.dirs, ":"))
		}
	}
	return "environment: " + strings.Join(parts, "; ")
}

// BinDir is the payload's bin/, which goes first on the worker's PATH.
func BinDir(root string) string { return filepath.Join(root, "bin") }

// rootHint says how to point infera-exec at its payload when the root it
// used holds no payload at all: the binary copied out of its payload, or
// PAYLOAD_ROOT naming the payload's bin/ directory.
func rootHint(root string, pl *Payload) string {
	if len(pl.PyTrees) > 0 || len(pl.NativeTrees) > 0 {
		return ""
	}
	hint := "; it holds no payload trees"
	if filepath.Base(root) == "bin" {
		hint += "; it is a bin/ directory: the payload root is its parent, " + filepath.Dir(root)
	}
	return hint + "; run infera-exec from its payload's bin/ (the root is then found from the binary), or set PAYLOAD_ROOT to the directory that holds bin/ and the py3XX/ trees"
}
