// Package report holds the record of one run: every decision of the pass,
// what it changed, how long each step took and how it ended. The same value
// is written as JSON for operators (INFERA_EXEC_REPORT), printed by
// --explain, and printed as JSON by --explain --json.
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
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/infera/infera-exec/config"
	"github.com/infera/infera-exec/internal/atomicfile"
	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/internal/logging"
	"github.com/infera/infera-exec/internal/statedir"
	"golang.org/x/sys/unix"
)

// Schema is bumped when a field changes meaning or disappears.
const Schema = 2

// Name is the report's file name in the state directory.
const Name = "report.json"

// Report is one run of infera-exec. Sections are the stages' outcomes in
// pass order: each renders itself, and each names the fields it adds to
// the JSON document.
type Report struct {
	Schema     int             `json:"schema"`
	Tool       Tool            `json:"tool"`
	Mode       string          `json:"mode"` // exec or explain
	Started    time.Time       `json:"started"`
	PID        int             `json:"pid"`
	UID        int             `json:"uid"`
	GID        int             `json:"gid"`
	Args       Argv            `json:"args"`
	Config     *config.Config  `json:"config,omitempty"`
	Sections   []Section       `json:"-"`
	EnvChanges Changes         `json:"env_changes,omitempty"`
	Log        []logging.Entry `json:"log"`
	Timings    []Timing        `json:"timings"`
	Resources  *Resources      `json:"resources,omitempty"`
	Outcome    Outcome         `json:"outcome"`
}

// Section is a stage's outcome as the report holds it: the fields it adds
// to the JSON document, and its part of the text --explain prints.
type Section interface {
	Fields() []Field
	WriteText(w io.Writer)
}

// Field is one top-level member of the report's JSON document.
type Field struct {
	Key   string
	Value any
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
		Args:    append(Argv{"infera-exec"}, os.Args[1:]...),
		Config:  cfg,
	}
}

// Add records a stage's outcome; a nil one is left out.
func (r *Report) Add(s Section) {
	if s != nil {
		r.Sections = append(r.Sections, s)
	}
}

// Has reports whether s was added.
func (r *Report) Has(s Section) bool {
	for _, x := range r.Sections {
		if x == s {
			return true
		}
	}
	return false
}

// MarshalJSON writes the inputs (schema to config), every section's
// fields in pass order, then what the pass did (env_changes to outcome).
// Secrets are redacted by the types that hold them (Argv, Env, Changes).
func (r *Report) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := r.encode(&b, false); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// encode writes MarshalJSON's document to b, or, when indent is set,
// the document json.MarshalIndent(r, "", "  ") gives, and a newline.
// Every member goes through one encoder straight into b, which therefore
// holds the only copy of the document: no member is encoded into a buffer
// of its own, and the whole is not compacted and indented again.
func (r *Report) encode(b *bytes.Buffer, indent bool) error {
	enc := json.NewEncoder(b)
	top, member, colon := func() {}, func() {}, ":"
	if indent {
		top = func() { enc.SetIndent("", "  ") }      // the head's and tail's members
		member = func() { enc.SetIndent("  ", "  ") } // a section's value, one level down
		colon = ": "
	}
	// The head's members end the object's first part: its closing
	// brace goes, with the newlines the encoder put before and after it.
	top()
	if err := enc.Encode(&reportHead{r.Schema, r.Tool, r.Mode, r.Started, r.PID, r.UID, r.GID, r.Args, r.Config}); err != nil {
		return err
	}
	b.Truncate(b.Len() - len("}\n"))
	if indent {
		b.Truncate(b.Len() - len("\n"))
	}
	member()
	for _, s := range r.Sections {
		for _, f := range s.Fields() {
			if isNil(f.Value) {
				continue
			}
			k, _ := json.Marshal(f.Key)
			b.WriteByte(',')
			if indent {
				b.WriteString("\n  ")
			}
			b.Write(k)
			b.WriteString(colon)
			if err := enc.Encode(f.Value); err != nil {
				return fmt.Errorf("report field %s: %w", f.Key, err)
			}
			b.Truncate(b.Len() - len("\n"))
		}
	}
	// The tail's members follow, without its opening brace ("log" is
	// always there).
	top()
	b.WriteByte(',')
	at := b.Len()
	if err := enc.Encode(&reportTail{r.EnvChanges, r.Log, r.Timings, r.Resources, r.Outcome}); err != nil {
		return err
	}
	tail := b.Bytes()[at:]
	copy(tail, tail[1:])
	b.Truncate(b.Len() - 1)
	if !indent {
		b.Truncate(b.Len() - len("\n"))
	}
	return nil
}

// reportHead is the report's first members, before the sections.
type reportHead struct {
	Schema  int            `json:"schema"`
	Tool    Tool           `json:"tool"`
	Mode    string         `json:"mode"`
	Started time.Time      `json:"started"`
	PID     int            `json:"pid"`
	UID     int            `json:"uid"`
	GID     int            `json:"gid"`
	Args    Argv           `json:"args"`
	Config  *config.Config `json:"config,omitempty"`
}

// reportTail is the report's last members, after the sections.
type reportTail struct {
	EnvChanges Changes         `json:"env_changes,omitempty"`
	Log        []logging.Entry `json:"log"`
	Timings    []Timing        `json:"timings"`
	Resources  *Resources      `json:"resources,omitempty"`
	Outcome    Outcome         `json:"outcome"`
}

// Prepare builds encoding/json's encoders for the report's types beside
// the caller, so that writing the report, the last thing before the exec,
// does not spend its first use of each type on reflection (about 2 ms of
// a start). zero holds a fresh zero value of each section type the report
// may hold; only their types are used, and nothing is written anywhere.
// The encoder cache is safe for concurrent use, and a start that ends
// before this is done loses nothing. wait returns once it is done, with
// the panic of a section whose Fields fails on its zero value as an error
// (the start itself never waits, and never fails for it).
func Prepare(zero ...Section) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("preparing the report's encoders: %v", p)
			}
			close(done)
		}()
		warm := []any{(*reportHead)(nil), (*reportTail)(nil)}
		for _, s := range zero {
			for _, f := range s.Fields() {
				warm = append(warm, f.Value)
			}
		}
		for _, v := range warm {
			// A nil pointer of each type: json builds the encoder of what
			// it points to, and writes "null".
			if t := reflect.TypeOf(v); t != nil {
				if t.Kind() != reflect.Pointer {
					t = reflect.PointerTo(t)
				}
				json.Marshal(reflect.Zero(t).Interface())
			}
		}
	}()
	return func() error { return <-done }
}

// isNil reports whether v is nil or a nil pointer, map or slice.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// Tool identifies the binary.
type Tool struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
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
	Result Result `json:"result"`
	Code   int    `json:"code"`
	Reason string `json:"reason,omitempty"`
}

// Result is how a run ends.
type Result string

const (
	ResultExec        Result = "exec"        // the worker replaced infera-exec
	ResultInit        Result = "init"        // the worker started; infera-exec stays as its init
	ResultWouldStart  Result = "would-start" // --explain: the worker would start
	ResultRefused     Result = "refused"     // a stage refused the start
	ResultExecFailed  Result = "exec-failed" // execve itself failed
	ResultInterrupted Result = "interrupted" // a signal ended the start
)

// Marshal renders r as indented JSON, secrets redacted (see RedactArgs),
// and a newline.
func Marshal(r *Report) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(reportSize)
	if err := r.encode(&b, true); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// reportSize is room for a start's report (about 26 KB with the engine
// patches): one buffer, whose pages are touched only as far as written.
const reportSize = 64 << 10

// Write stores r for operators at path, or, when path is empty, as
// report.json in stateDir, the state directory the run picked (noState
// says why there is none). It returns where the report went.
func Write(r *Report, path, stateDir, noState string) (string, error) {
	if path == "" {
		if stateDir == "" {
			return "", logging.WithBrief(fmt.Errorf("no state directory (%s); set INFERA_EXEC_REPORT to a file, or INFERA_EXEC_STATE_DIR", noState),
				"no state directory is usable; set INFERA_EXEC_REPORT to a file, or INFERA_EXEC_STATE_DIR")
		}
		path = filepath.Join(stateDir, Name)
	}
	data, err := Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode report: %w", err)
	}
	if err := writeOne(path, data); err != nil {
		return "", err
	}
	return path, nil
}

// Print shows the plan of --explain: as JSON, or as text for a person.
func Print(w io.Writer, r *Report, asJSON bool) error {
	if asJSON {
		b, err := Marshal(r)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
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
	// Only a report replaces a report: INFERA_EXEC_REPORT naming a
	// model's config.json must not destroy it.
	if err := replaceable(path); err != nil {
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

// replaceable says why the file at path must not be replaced by a report:
// it is not a regular file, belongs to another uid, or does not begin as
// an infera-exec report (beginsAsReport). Nothing there is fine.
func replaceable(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("is a %s, not a report; not replacing it (point INFERA_EXEC_REPORT at a new file)", fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("belongs to uid %d, not to this process (uid %d); not replacing it", st.Uid, os.Geteuid())
	}
	f, err := boundedread.Open(path, unix.O_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("cannot be read back to check that it is a report (%w); not replacing it", boundedread.Reason(err))
	}
	defer f.Close()
	if !beginsAsReport(io.LimitReader(f, maxReportHead)) {
		return errors.New("is not an infera-exec report; not replacing it (point INFERA_EXEC_REPORT at a new file, or remove it)")
	}
	return nil
}

// beginsAsReport reports whether r begins as every report Marshal writes
// (and every one an earlier version wrote): a JSON object whose first
// members are "schema" (a number), "tool" (an object) and "mode" (a
// non-empty string). Only that head is read, not the whole report.
func beginsAsReport(r io.Reader) bool {
	dec := json.NewDecoder(r)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	var head struct {
		Schema *int
		Tool   *Tool
		Mode   string
	}
	for _, m := range []struct {
		key string
		val any
	}{{"schema", &head.Schema}, {"tool", &head.Tool}, {"mode", &head.Mode}} {
		if t, err := dec.Token(); err != nil || t != m.key || dec.Decode(m.val) != nil {
			return false
		}
	}
	return head.Schema != nil && head.Tool != nil && head.Mode != ""
}

// maxReportHead bounds the read of an existing report's head: a real
// one's is a few hundred bytes.
const maxReportHead = 16 << 10

// ReportMode is the report file's mode.
const ReportMode = 0o600
