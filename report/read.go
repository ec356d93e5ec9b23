package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/statedir"
	"golang.org/x/sys/unix"
)

// ReadError is a last report that cannot be shown (--report): none
// where the starts write it, or a file there that cannot be read or is
// not a report. Exit code 66.
type ReadError struct {
	Msg   string
	brief string // the text line, when shorter (Brief)
}

func (e *ReadError) Error() string { return e.Msg }

// Brief is the text line (logging.Briefer); Error has the whole of it.
func (e *ReadError) Brief() string { return e.brief }

// ExitCode is EX_NOINPUT.
func (e *ReadError) ExitCode() int { return 66 }

// maxReport bounds the read of a report: a start's is about 26 KB.
const maxReport = boundedread.Manifest

// Last finds and reads the report the last start wrote: at path when
// INFERA_EXEC_REPORT names one, else report.json in the first of the
// state directory's candidates (stateDir, or the defaults) that holds
// one. Only a regular file of this uid that begins as a report is taken:
// the report is written 0600 by the uid that starts the worker, and a
// file planted in a shared /tmp by another is not shown as ours. It
// returns the path and the document as the file holds it.
func Last(path, stateDir string) (string, []byte, error) {
	var tried []string
	if path != "" {
		tried = []string{path}
	} else {
		for _, d := range statedir.Candidates(stateDir) {
			tried = append(tried, filepath.Join(d, Name))
		}
	}
	for _, p := range tried {
		// Every check is made on the descriptor that is read: not a link,
		// a regular file (boundedread.Open), this uid's, then the bytes.
		f, err := boundedread.Open(p, unix.O_NOFOLLOW)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return p, nil, &ReadError{Msg: fmt.Sprintf("report %s: %v", p, boundedread.BareErr(err))}
		}
		data, err := ownedBy(f, p)
		f.Close()
		if err != nil {
			return p, nil, err
		}
		if !beginsAsReport(bytes.NewReader(data)) || !json.Valid(data) {
			return p, nil, &ReadError{Msg: fmt.Sprintf("report %s is not an infera-exec report (it does not begin with schema, tool and mode, or is not whole JSON)", p)}
		}
		return p, data, nil
	}
	why := "no start has written one there yet"
	brief := fmt.Sprintf("no report at %s: %s", strings.Join(tried, " or "), why)
	if path == "" {
		why += " (INFERA_EXEC_REPORT=off writes none; INFERA_EXEC_STATE_DIR or INFERA_EXEC_REPORT moves it: give --report the same)"
		brief += " (give --report the INFERA_EXEC_STATE_DIR the start had)"
	}
	return "", nil, &ReadError{fmt.Sprintf("no report at %s: %s", strings.Join(tried, " or "), why), brief}
}

// stored is what the text of a stored report shows: the head, the
// decisions every report has, and the tail.
type stored struct {
	Schema  int    `json:"schema"`
	Tool    Tool   `json:"tool"`
	Mode    string `json:"mode"`
	Started string `json:"started"`
	PID     int    `json:"pid"`
	UID     int    `json:"uid"`
	Family  string `json:"family"`
	Trees   *struct {
		Python string `json:"python_tree"`
		Native *struct {
			Dir string `json:"dir"`
		} `json:"native_tree"`
		NoNative string `json:"no_native_tree_why"`
	} `json:"trees"`
	Exec *struct {
		Argv []string `json:"argv"`
		Cwd  string   `json:"cwd"`
		Init string   `json:"init"`
	} `json:"exec"`
	Patches *struct {
		Results []struct {
			ID    string `json:"id"`
			State string `json:"state"`
			Why   string `json:"why"`
		} `json:"results"`
	} `json:"patches"`
	Log     []logging.Entry `json:"log"`
	Timings []Timing        `json:"timings"`
	Outcome Outcome         `json:"outcome"`
}

// WriteStored prints a stored report (Last) for a person: who wrote it
// and when, the family and trees, the command, the patches' states, the
// warnings and errors of its log, and how the start ended. --report
// --json prints the document itself.
func WriteStored(w io.Writer, path string, data []byte) error {
	var r stored
	if err := json.Unmarshal(data, &r); err != nil {
		return &ReadError{Msg: fmt.Sprintf("report %s: %v", path, err)}
	}
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("Report %s (schema %d)", path, r.Schema)
	p("  infera-exec %s (commit %s), mode %s, started %s, pid %d, uid %d", r.Tool.Version, r.Tool.Commit, r.Mode, r.Started, r.PID, r.UID)
	if r.Family != "" {
		p("  ABI family %s", r.Family)
	}
	if r.Trees != nil {
		p("  python tree %s", r.Trees.Python)
		if r.Trees.Native != nil {
			p("  native tree %s", r.Trees.Native.Dir)
		} else {
			p("  native tree none (%s)", r.Trees.NoNative)
		}
	}
	if r.Exec != nil {
		p("  command %s in %s%s", QuoteArgs(r.Exec.Argv), r.Exec.Cwd, map[bool]string{true: " (infera-exec stays as its " + r.Exec.Init + ")", false: ""}[r.Exec.Init != ""])
	}
	if r.Patches != nil && len(r.Patches.Results) > 0 {
		p("")
		p("Patches:")
		for _, x := range r.Patches.Results {
			p("  %s: %s", x.ID, x.State)
		}
	}
	var notes []string
	for _, l := range r.Log {
		if l.Level == "warn" || l.Level == "error" {
			notes = append(notes, l.Level+": "+l.Message)
		}
	}
	if len(notes) > 0 {
		p("")
		p("Warnings and errors:")
		for _, n := range notes {
			p("  %s", n)
		}
	}
	p("")
	switch r.Outcome.Result {
	case ResultExec, ResultInit, ResultWouldStart:
		p("Outcome: %s", r.Outcome.Result)
	default:
		p("Outcome: %s (exit %d): %s", r.Outcome.Result, r.Outcome.Code, r.Outcome.Reason)
	}
	return nil
}

// ownedBy reads the open report f whole (at most maxReport bytes) when it
// belongs to this uid.
func ownedBy(f *os.File, p string) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, &ReadError{Msg: fmt.Sprintf("report %s: %v", p, err)}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		owner := "unknown"
		if ok {
			owner = fmt.Sprint(st.Uid)
		}
		return nil, &ReadError{Msg: fmt.Sprintf("report %s belongs to uid %s, not to this uid (%d): not shown as infera-exec's (run --report as the user the container starts as)", p, owner, os.Geteuid())}
	}
	data, err := boundedread.ReadAll(f, p, maxReport)
	if err != nil {
		return nil, &ReadError{Msg: fmt.Sprintf("report %s cannot be read: %v", p, err)}
	}
	return data, nil
}
