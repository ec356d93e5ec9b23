package report

import (
	"fmt"
	"io"
	"strings"
)

// WriteText prints r for a person: what was detected and why, which trees
// were picked, what the environment becomes, and the exact exec.
func WriteText(w io.Writer, r *Report) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("infera-exec %s: %s", r.Tool.Version, map[bool]string{true: "plan (nothing was changed)", false: "run"}[r.Mode == "explain"])
	for _, s := range r.Sections {
		p("")
		s.WriteText(w)
	}

	if len(r.EnvChanges) > 0 {
		p("")
		p("Environment changes:")
		for _, c := range r.EnvChanges {
			before := "(unset)"
			if c.Before != nil {
				before = *c.Before
			}
			after := "(unset)"
			if c.After != nil {
				after = *c.After
			}
			if SecretName(c.Name) {
				before, after = Redacted, Redacted
			}
			p("  %s", c.Name)
			p("    now %s", after)
			p("    was %s", before)
		}
	}

	var warns []string
	for _, l := range r.Log {
		if l.Level == "warn" || l.Level == "error" {
			warns = append(warns, l.Message)
		}
	}
	if len(warns) > 0 {
		p("")
		p("Warnings:")
		for _, w := range warns {
			p("  %s", w)
		}
	}

	p("")
	switch r.Outcome.Result {
	case ResultWouldStart:
		p("Verdict: would start the worker (exit 0)")
	default:
		p("Verdict: %s (exit %d): %s", r.Outcome.Result, r.Outcome.Code, r.Outcome.Reason)
	}
}

// WriteHeading writes a stage's part of the text: "name: state", the
// summary and the lines under it, indented.
func WriteHeading(w io.Writer, name, state, summary string, lines []string) {
	fmt.Fprintf(w, "%s: %s\n", name, state)
	if summary != "" {
		fmt.Fprintf(w, "  %s\n", summary)
	}
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// QuoteArgs prints argv so that it can be pasted into a shell.
func QuoteArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '=' || r == ',' || r == ':' || r == '+' ||
				(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
