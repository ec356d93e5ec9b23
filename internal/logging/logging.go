// Package logging writes the shim's log lines: one line per action on
// stderr, "infera-exec: " first (the prefix operators grep for), or one
// record per line, JSON (INFERA_EXEC_LOG=json) or logfmt, whose fields
// are those of docs/logging.md. Every record is also kept for the report.
package logging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Prefix starts every text line.
const Prefix = "infera-exec: "

// Entry is a log record as the report keeps it.
type Entry struct {
	Time    time.Time      `json:"time"`
	Level   string         `json:"level"`
	Message string         `json:"msg"`
	Attrs   map[string]any `json:"attrs,omitempty"`
}

// Recorder keeps every record at or above Info for the report.
type Recorder struct {
	mu      sync.Mutex
	entries []Entry
}

// Entries returns the records kept so far.
func (r *Recorder) Entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Entry(nil), r.entries...)
}

// New returns a logger writing to w and recording into rec (which may be
// nil). Debug lines are written only when verbose is set.
func New(w io.Writer, jsonLines, verbose bool, rec *Recorder) *slog.Logger {
	return NewNamed(w, "infera-exec", jsonLines, verbose, rec)
}

// NewNamed is New for another program of the project (infera-payload):
// its text lines start with "NAME: ", its JSON lines carry logger NAME.
func NewNamed(w io.Writer, name string, jsonLines, verbose bool, rec *Recorder) *slog.Logger {
	o := Options{Name: name, Format: "text", Level: "info"}
	if jsonLines {
		o.Format = "json"
	}
	if verbose {
		o.Level = "debug"
	}
	return Open(w, o, rec)
}

// Options say how a logger writes: its program's name, the format
// (INFERA_EXEC_LOG: text, json or logfmt) and the least level written
// (INFERA_EXEC_LOG_LEVEL: debug, info, warn or error; "" is info).
type Options struct {
	Name   string
	Format string
	Level  string
}

// Level is the slog level of a level's name; info for "" or a name it
// does not know (config has warned about it).
func Level(name string) slog.Level {
	switch name {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Open returns a logger writing records as o says to w, and recording
// those from info up into rec (which may be nil), whatever o's level.
// Every record carries the fields event and step (see Fields): JSON and
// logfmt lines are records a log pipeline can select on, not prose.
func Open(w io.Writer, o Options, rec *Recorder) *slog.Logger {
	level := Level(o.Level)
	var out slog.Handler
	switch o.Format {
	case "json":
		out = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}).WithAttrs([]slog.Attr{slog.String("logger", o.Name)})
	case "logfmt":
		out = slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}).WithAttrs([]slog.Attr{slog.String("logger", o.Name)})
	default:
		out = &textHandler{w: w, mu: &sync.Mutex{}, level: level, prefix: o.Name + ": "}
	}
	if rec != nil {
		out = slog.NewMultiHandler(out, &recordHandler{rec: rec})
	}
	return slog.New(&fieldsHandler{inner: out, step: DefaultStep})
}

// DefaultStep is the step of a record logged outside any step of the
// pass (WithStep).
const DefaultStep = "main"

// The fields every record carries, first after time, level, msg (and
// logger): what happened (event) and in which step of the start.
const (
	FieldEvent = "event"
	FieldStep  = "step"
)

// WithStep is l with its records' step set to step (a step of the pass,
// or a mode: install, check, doctor).
func WithStep(l *slog.Logger, step string) *slog.Logger {
	if h, ok := l.Handler().(*fieldsHandler); ok {
		c := *h
		c.step = step
		return slog.New(&c)
	}
	return l.With(FieldStep, step)
}

// fieldsHandler puts event and step on every record, once and first:
// the event a call site names, else one said by the level (note,
// warning, error), and the step of the logger.
type fieldsHandler struct {
	inner slog.Handler
	step  string
	attrs []slog.Attr // With's, kept here so that event and step stay first and single
}

func (h *fieldsHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *fieldsHandler) Handle(ctx context.Context, r slog.Record) error {
	event, step := "", h.step
	rest := make([]slog.Attr, 0, len(h.attrs)+r.NumAttrs())
	take := func(a slog.Attr) bool {
		switch a.Key {
		case FieldEvent:
			event = a.Value.String()
		case FieldStep:
			step = a.Value.String()
		default:
			rest = append(rest, a)
		}
		return true
	}
	for _, a := range h.attrs {
		take(a)
	}
	r.Attrs(take)
	if event == "" {
		event = levelEvent(r.Level)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(slog.String(FieldEvent, event), slog.String(FieldStep, step))
	out.AddAttrs(rest...)
	return h.inner.Handle(ctx, out)
}

// levelEvent is the event of a record whose call site names none.
func levelEvent(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warning"
	}
	return "note"
}

func (h *fieldsHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *fieldsHandler) WithGroup(string) slog.Handler { return h }

// Headline is the attribute (true) of the one info line a quiet logger
// still writes: the start's own (launch's Announce).
const Headline = "headline"

// NewQuiet is New (text lines, not verbose) for a terminal the worker
// shares (the init's, on a terminal): it writes warnings, errors and the
// headline line only; rec still keeps every record at or above Info.
func NewQuiet(w io.Writer, rec *Recorder) *slog.Logger {
	out := &textHandler{w: w, mu: &sync.Mutex{}, level: slog.LevelInfo, prefix: "infera-exec: ", quiet: true}
	if rec == nil {
		return slog.New(out)
	}
	return slog.New(slog.NewMultiHandler(out, &recordHandler{rec: rec}))
}

// textHandler prints "infera-exec: [warning: ]message". Attributes are for
// JSON and the report; text messages carry their facts in the sentence.
type textHandler struct {
	w      io.Writer
	mu     *sync.Mutex
	level  slog.Level
	prefix string // Prefix for infera-exec
	quiet  bool   // below Warn, only Headline lines
}

func (h *textHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *textHandler) Handle(_ context.Context, r slog.Record) error {
	if h.quiet && r.Level < slog.LevelWarn {
		headline := false
		r.Attrs(func(a slog.Attr) bool {
			headline = headline || (a.Key == Headline && a.Value.Kind() == slog.KindBool && a.Value.Bool())
			return !headline
		})
		if !headline {
			return nil
		}
	}
	var b strings.Builder
	b.WriteString(h.prefix)
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	case r.Level < slog.LevelInfo:
		b.WriteString("debug: ")
	}
	// One record is one line, whatever its message holds, and a value
	// taken from the environment or a file cannot move the cursor, clear
	// the screen or forge a line of its own.
	writeEscaped(&b, r.Message)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

// writeEscaped writes s with newlines as spaces and every other control
// character (C0, DEL, C1) as \xNN.
func writeEscaped(b *strings.Builder, s string) {
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteByte(' ')
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			fmt.Fprintf(b, "\\x%02x", r)
		default:
			b.WriteRune(r)
		}
	}
}

func (h *textHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *textHandler) WithGroup(string) slog.Handler      { return h }

type recordHandler struct {
	rec   *Recorder
	attrs []slog.Attr
}

func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	e := Entry{Time: r.Time, Level: strings.ToLower(r.Level.String()), Message: r.Message}
	add := func(a slog.Attr) bool {
		if e.Attrs == nil {
			e.Attrs = map[string]any{}
		}
		e.Attrs[a.Key] = a.Value.Resolve().Any()
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.rec.mu.Lock()
	h.rec.entries = append(h.rec.entries, e)
	h.rec.mu.Unlock()
	return nil
}

func (h *recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recordHandler{rec: h.rec, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h *recordHandler) WithGroup(string) slog.Handler { return h }

// TextBound is the most characters a text line should have, its prefix
// included (docs/logging.md): a message says what, which file or value,
// and the fix in a few words; the rest goes into the record's detail
// field, which JSON and logfmt lines and the report keep. A test of the
// stories holds every line to it (internal/testsupport/textbound).
const TextBound = 200

// Briefer is an error whose text line is shorter than its message:
// Brief says what, which file or value, and the fix in a few words. The
// termination log and the report keep the whole message.
type Briefer interface{ Brief() string }

// ErrorRecord is the message and fields of the record that logs err:
// its message with the text of the first error in its chain that has a
// brief replaced by that brief (what wraps it keeps its words), and the
// whole message as the detail field; else the message itself.
func ErrorRecord(err error) (msg string, attrs []any) {
	var b Briefer
	full := err.Error()
	if !errors.As(err, &b) {
		return full, nil
	}
	brief := b.Brief()
	if inner, ok := b.(error); ok && brief != "" {
		brief = strings.Replace(full, inner.Error(), brief, 1)
	}
	if brief == "" || brief == full {
		return full, nil
	}
	return brief, []any{"detail", full}
}

// WithBrief is err with brief as its text line (Briefer): for an error
// whose message ends in a list or a reason the text line leaves to the
// record's detail.
func WithBrief(err error, brief string) error { return &briefError{err, brief} }

type briefError struct {
	err   error
	brief string
}

func (e *briefError) Error() string { return e.err.Error() }
func (e *briefError) Unwrap() error { return e.err }
func (e *briefError) Brief() string { return e.brief }
