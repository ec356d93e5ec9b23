package textbound

import (
	"strings"
	"testing"

	"github.com/infera/infera-exec/internal/logging"
)

// The check itself: a long line is found wherever it is in a story's
// log, a short one or another program's is not, and an exec line's
// command does not count.
func TestLongLinesFound(t *testing.T) {
	long := logging.Prefix + "warning: " + strings.Repeat("x", logging.TextBound)
	short := logging.Prefix + "warning: " + strings.Repeat("x", logging.TextBound-len(logging.Prefix)-len("warning: "))
	log := "> exec infera-exec python3\n[stderr]\n" + short + "\n    " + long + "\nsandbox: " + long + "\n" +
		logging.Prefix + "exec python3 -c '" + strings.Repeat("y", 300) + "' (/usr/bin/python3) in /\n"
	if got := LongLines(log); len(got) != 1 || got[0] != long {
		t.Fatalf("LongLines found %q, want only the long infera-exec line", got)
	}
}
