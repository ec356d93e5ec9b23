// Package report holds the record of one run: every decision of the pass,
// what it changed, how long each step took and how it ended. The same value
// is written as JSON for operators (INFERA_EXEC_REPORT), printed by
// --explain, and printed as JSON by --explain --json.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/infera/infera-exec/internal/boundedread"

	"github.com/infera/infera-exec/abi"
	"github.com/infera/infera-exec/capability"
	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/environ"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/statedir"
	"github.com/infera/infera-exec/launch"
	"github.com/infera/infera-exec/libionic"
	"github.com/infera/infera-exec/overlay"
	"github.com/infera/infera-exec/patches"
	"github.com/infera/infera-exec/preflight"
)

// Schema is bumped when a field changes meaning or disappears.
const Schema = 2

// DefaultPaths are the report's locations when INFERA_EXEC_REPORT does not
// name one, tried in order.
var DefaultPaths = statedir.Sub("", "report.json")

// Report is one run of infera-exec.
type Report struct {
	Schema       int                 `json:"schema"`
	Tool         Tool                `json:"tool"`
	Mode         string              `json:"mode"` // exec or explain
	Started      time.Time           `json:"started"`
	PID          int                 `json:"pid"`
	UID          int                 `json:"uid"`
	GID          int                 `json:"gid"`
	Args         []string            `json:"args"`
	Config       *config.Config      `json:"config,omitempty"`
	Family       string              `json:"family,omitempty"`
	ABI          *abi.Family         `json:"abi,omitempty"`
	Payload      *overlay.Payload    `json:"payload,omitempty"`
	Trees        *overlay.Selection  `json:"trees,omitempty"`
	Capabilities *capability.Outcome `json:"capabilities,omitempty"`
	EnvChanges   []environ.Change    `json:"env_changes,omitempty"`
	Libionic     *libionic.Outcome   `json:"libionic,omitempty"`
	Preflight    *preflight.Outcome  `json:"preflight,omitempty"`
	Patches      *patches.Outcome    `json:"patches,omitempty"`
	Exec         *Exec               `json:"exec,omitempty"`
	Log          []logging.Entry     `json:"log"`
	Timings      []Timing            `json:"timings"`
	Resources    *Resources          `json:"resources,omitempty"`
	Outcome      Outcome             `json:"outcome"`
}

// New is the record of a run starting now: exec, or explain when dry.
func New(tool Tool, dry bool, cfg *config.Config) *Report {
	mode := "exec"
	if dry {
		mode = "explain"
	}
	return &Report{
		Schema:  Schema,
		Tool:    tool,
		Mode:    mode,
		Started: time.Now().UTC(),
		PID:     os.Getpid(),
		UID:     os.Getuid(),
		GID:     os.Getgid(),
		Args:    append([]string{"infera-exec"}, os.Args[1:]...),
		Config:  cfg,
	}
}

// Tool identifies the binary.
type Tool struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
}

// Section is a step's outcome as --explain prints it: a heading and the
// lines under it.
type Section interface {
	Heading() (name, state, summary string)
	TextLines() []string
}

// sections are the steps with a section of their own, in pass order.
func (r *Report) sections() []Section {
	var out []Section
	if r.Libionic != nil {
		out = append(out, r.Libionic)
	}
	if r.Preflight != nil {
		out = append(out, r.Preflight)
	}
	if r.Patches != nil {
		out = append(out, r.Patches)
	}
	return out
}

// Exec is what is (or would be) executed.
type Exec struct {
	Command []string      `json:"command"` // as given
	Path    string        `json:"path,omitempty"`
	Argv    []string      `json:"argv,omitempty"`
	Cwd     string        `json:"cwd"`
	Env     []string      `json:"env,omitempty"` // full environment; --explain only, never in the report file
	Nofile  launch.Nofile `json:"nofile"`
	// Init: how infera-exec stays as the worker's init ("init", or
	// "init-group" when signals go to the worker's process group); empty:
	// it execs the worker and is gone.
	Init string `json:"init,omitempty"`
}

// Resources is what the run cost in memory, read just before the exec.
type Resources struct {
	PeakRSSKB         int64 `json:"peak_rss_kb"`          // VmHWM of infera-exec itself
	ChildrenPeakRSSKB int64 `json:"children_peak_rss_kb"` // the largest process it ran (the interpreter)
}

// ReadResources measures this process. VmHWM is per address space, so it
// is infera-exec's own peak even when it was forked from a large parent
// (ru_maxrss would carry that parent's).
func ReadResources() *Resources {
	r := &Resources{}
	// Read as every small input is: a regular file, within a cap.
	if data, err := boundedread.File("/proc/self/status", boundedread.SmallText); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				r.PeakRSSKB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		r.ChildrenPeakRSSKB = ru.Maxrss
	}
	return r
}

// Timing is how long one step took.
type Timing struct {
	Step   string `json:"step"`
	Micros int64  `json:"us"`
}

// Outcome is how the run ended (or, for explain, would end).
type Outcome struct {
	Result string `json:"result"` // exec, would-start, refused, exec-failed
	Code   int    `json:"code"`
	Reason string `json:"reason,omitempty"`
}

// Marshal renders r as indented JSON, secrets redacted (see RedactArgs),
// and a newline.
func Marshal(r *Report) ([]byte, error) {
	b, err := json.MarshalIndent(redacted(r), "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Write stores r for operators. path empty means the default locations in
// order. The full environment is left out: it may hold tokens, and the env
// changes already say what infera-exec did to it. It returns where the
// report went.
func Write(r *Report, path string) (string, error) {
	cp := *r
	if cp.Exec != nil {
		e := *cp.Exec
		e.Env = nil
		cp.Exec = &e
	}
	data, err := Marshal(&cp)
	if err != nil {
		return "", fmt.Errorf("encode report: %w", err)
	}
	paths := DefaultPaths
	if path != "" {
		paths = []string{path}
	}
	var errs WriteError
	for _, p := range paths {
		if err := writeOne(p, data); err != nil {
			errs = append(errs, err)
			continue
		}
		return p, nil
	}
	return "", errs
}

// WriteError is why the report was not written: one error per place
// tried, each for its own reason.
type WriteError []error

// Error is one clause per place, on one line: a joined error would run
// them together.
func (e WriteError) Error() string {
	if len(e) == 1 {
		return e[0].Error()
	}
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return fmt.Sprintf("%d places tried: %s", len(parts), strings.Join(parts, "; then "))
}

func (e WriteError) Unwrap() []error { return e }

// Print shows the plan of --explain: as JSON (everything, the whole
// environment included), or as text for a person, where the whole
// environment (the container's, tens of lines) is shown only when
// verbose, since the changes are listed anyway.
func Print(w io.Writer, r *Report, asJSON, verbose bool) error {
	if asJSON {
		b, err := Marshal(r)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	if !verbose && r.Exec != nil {
		e := *r.Exec
		e.Env = nil
		cp := *r
		cp.Exec = &e
		r = &cp
	}
	WriteText(w, r)
	return nil
}

func writeOne(path string, data []byte) error {
	// The directory must be ours (see statedir.Dir): a shared /tmp may
	// hold a directory or link planted by someone else.
	if err := statedir.Dir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("report %s: %w", path, err)
	}
	// Renamed into place, so never read half-written and never written
	// through a link at the name; not fsynced, since a report lost to a
	// power cut is not worth a slower start. 0600: the report names the
	// worker's command line and the payload, for root's eyes only. The
	// old report is unlinked just before the rename: on ext4 a rename
	// over an existing file starts the new file's writeback
	// (auto_da_alloc), 0.1 to 1 ms of every start; a reader then finds
	// the old report, none for that instant, or the new one.
	dropOld := func() error {
		syscall.Unlink(path) // nothing there, or a directory: the rename says
		return nil
	}
	if err := atomicfile.WriteBytes(path, data, atomicfile.Options{Mode: ReportMode, NoSync: true, BeforeRename: dropOld}); err != nil {
		return fmt.Errorf("report %w", err)
	}
	return nil
}

// ReportMode is the report file's mode.
const ReportMode = 0o600
