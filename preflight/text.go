package preflight

import (
	"fmt"
	"io"
	"strings"
)

// Width of the doctor report: readable in any terminal and in kubectl logs.
const Width = 80

// WriteText prints results for a person: failures first with what was
// seen, why it matters and what to do, then one line per check that
// passed or was skipped. Every line fits in Width columns (a single word
// longer than that, a long path, stands on a line of its own).
func WriteText(w io.Writer, results []Result) {
	count := map[string]int{}
	for _, r := range results {
		switch {
		case r.Status == Fail:
			count[string(r.Severity)]++
		default:
			count[string(r.Status)]++
		}
	}
	fmt.Fprintf(w, "infera-exec doctor: %s, %s, %s, %d passed, %d skipped\n",
		plural(count["error"], "error"), plural(count["warn"], "warning"), plural(count["info"], "note"), count["pass"], count["skipped"])
	for _, sev := range []Severity{Error, Warn, Info} {
		for _, r := range results {
			if !r.Failed(sev) {
				continue
			}
			fmt.Fprintf(w, "\n%-6s %s\n", strings.ToUpper(string(sev)), r.Name)
			for _, f := range []struct{ label, text string }{{"seen", r.Seen}, {"why", r.Why}, {"do", r.Do}, {"skip", "INFERA_PREFLIGHT_SKIP=" + r.Name}} {
				if f.text != "" {
					wrap(w, fmt.Sprintf("       %-6s", f.label+":"), strings.Repeat(" ", 13), f.text)
				}
			}
		}
	}
	fmt.Fprintln(w)
	for _, r := range results {
		if r.Status == Fail {
			continue
		}
		label := "ok"
		if r.Status == Skipped {
			label = "skip"
		}
		wrap(w, fmt.Sprintf("%-6s %-13s ", label, r.Name), strings.Repeat(" ", 21), r.Seen)
	}
}

// wrap prints text after first, continuing lines after indent, breaking
// at spaces so that no line passes Width.
func wrap(w io.Writer, first, indent, text string) {
	line := first
	fresh := true
	for _, word := range strings.Fields(text) {
		if !fresh && len(line)+1+len(word) > Width {
			fmt.Fprintln(w, strings.TrimRight(line, " "))
			line, fresh = indent, true
		}
		if !fresh {
			line += " "
		}
		line += word
		fresh = false
	}
	fmt.Fprintln(w, strings.TrimRight(line, " "))
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
