// Package logging writes the shim's log lines: one line per action on
// stderr, "infera-exec: " first (the prefix operators grep for), or JSON
// lines when INFERA_EXEC_LOG=json. Every record is also kept for the report.
package logging

import (
	"context"
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
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	var out slog.Handler
	if jsonLines {
		out = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}).WithAttrs([]slog.Attr{slog.String("logger", name)})
	} else {
		out = &textHandler{w: w, mu: &sync.Mutex{}, level: level, prefix: name + ": "}
	}
	if rec == nil {
		return slog.New(out)
	}
	return slog.New(slog.NewMultiHandler(out, &recordHandler{rec: rec}))
}

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
