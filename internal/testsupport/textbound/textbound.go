// Package textbound holds stories to logging.TextBound (docs/logging.md):
// T runs testscript stories and fails one whose log has a text line of
// infera-exec over the bound; LongLines is the check. The stories of
// cmd/infera-exec and of deploy/containers both run under it.
package textbound

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/infera/infera-exec/internal/logging"
)

// T runs the stories (testscript.RunT) and holds every text line
// infera-exec writes in them (warnings, errors, refusals, --verbose's
// debug lines, on stderr or wherever a story copied them) to
// logging.TextBound: testscript hands the whole log of a story, every
// command's output in it, to Log once the story has run. The story's
// own directory is written $WORK there, as long as a container's
// /overlay, which is what the bound is about; the rest of a path is
// counted.
type T struct{ *testing.T }

func (t T) Run(name string, f func(testscript.T)) {
	t.T.Run(name, func(t *testing.T) { f(T{t}) })
}

// Verbose keeps every command's output in the log testscript hands to
// Log; Log shows it only as go test would (-v, or a failed story).
func (t T) Verbose() bool { return true }

func (t T) Log(args ...any) {
	s := fmt.Sprint(args...)
	for _, l := range LongLines(s) {
		t.Errorf("text log line over %d characters (%d): shorten the message where it is written, the detail in its record's fields (docs/logging.md):\n%s", logging.TextBound, utf8.RuneCountInString(l), l)
	}
	if testing.Verbose() || t.Failed() {
		t.T.Log(s)
	}
}

// LongLines are the text lines of infera-exec in log over the bound.
// The lines that quote the worker's command (exec, the init's start)
// are measured without it: its length is the operator's.
func LongLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		l = strings.TrimLeft(l, " \t")
		if !strings.HasPrefix(l, logging.Prefix) {
			continue
		}
		n := utf8.RuneCountInString(l)
		for _, q := range []string{logging.Prefix + "exec ", logging.Prefix + "init: starting "} {
			if strings.HasPrefix(l, q) {
				n = len(q) // the command quoted; what follows it is measured below
				if i := strings.LastIndex(l, " ("); i > 0 {
					n += utf8.RuneCountInString(l[i:])
				}
			}
		}
		if n > logging.TextBound {
			out = append(out, l)
		}
	}
	return out
}
