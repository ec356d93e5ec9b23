package report

import (
	"fmt"
	"io"
	"strings"
)

// WriteText prints r for a person: what was detected and why, which trees
// were picked, what the environment becomes, and the exact exec.
func WriteText(w io.Writer, r *Report) {
	r = redacted(r)
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("infera-exec %s: %s", r.Tool.Version, map[bool]string{true: "plan (nothing was changed)", false: "run"}[r.Mode == "explain"])

	if a := r.ABI; a != nil {
		p("")
		p("ABI family: %s", r.Family)
		if a.Override != "" {
			p("  set by INFERA_ABI_FAMILY=%s (detection skipped)", a.Override)
		} else {
			if a.ROCm.Found {
				p("  ROCm %d      %s", a.ROCm.Major, a.ROCm.DecidedBy)
				if len(a.ROCm.Chain) > 1 {
					p("               chain %s", strings.Join(a.ROCm.Chain, " -> "))
				}
			} else {
				p("  ROCm         none (no libamdhip64 in %s)", strings.Join(a.ROCm.Searched, ", "))
			}
			for _, n := range a.ROCm.Notes {
				p("               note: %s", n)
			}
			p("  CPython %s %s", pad(a.Python.Version(), 4), a.Python.DecidedBy)
			if a.Python.Path != "" {
				p("               interpreter %s", strings.Join(a.Python.Chain, " -> "))
			}
		}
	}

	if pl := r.Payload; pl != nil {
		p("")
		from := ""
		if r.Config != nil {
			from = " (" + r.Config.PayloadRootFrom + ")"
		}
		p("Payload: %s%s", pl.Root, from)
		p("  python trees present: %s", orNone(pl.PyTrees))
		var natives []string
		for _, t := range pl.NativeTrees {
			natives = append(natives, fmt.Sprintf("%s [%s]", t.Name, t.Caps))
		}
		p("  native trees present: %s", orNone(natives))
	}
	if t := r.Trees; t != nil {
		p("  python tree: %s", t.PyTree)
		if t.Native != nil {
			p("  native tree: %s", t.Native.Dir)
		} else {
			p("  native tree: none: %s", t.NoNativeWhy)
		}
		for _, w := range t.Warnings {
			p("  warning: %s", w)
		}
		if len(t.Considered) > 0 {
			p("  trees considered:")
		}
		for _, c := range t.Considered {
			mark := "  "
			switch {
			case c.Chosen:
				mark = "=>"
			case c.Matched:
				mark = " ~"
			}
			p("   %s %s (%s, %s): %s", mark, c.Name, c.Kind, c.Dir, c.Why)
		}
	}
	if c := r.Capabilities; c != nil {
		p("")
		p("Capabilities: provided %s; required %s (INFERA_REQUIRE_NATIVE=%q)", c.Provided, c.Required, c.Requirement.Raw)
		for _, e := range c.Evidence {
			state := "granted"
			if !e.Granted {
				state = "NOT granted, missing " + strings.Join(e.Missing, ", ")
			}
			var found []string
			for _, g := range e.Globs {
				if f, ok := e.Found[g]; ok {
					found = append(found, g+" -> "+strings.Join(f, " "))
				}
			}
			p("  %s: %s%s", e.Capability, state, map[bool]string{true: "; found " + strings.Join(found, ", "), false: ""}[len(found) > 0])
		}
		for _, i := range c.Implied {
			p("  implied by the worker's arguments: %s (%s)", i.Capability, i.Source)
		}
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
			p("  %s", c.Name)
			p("    now %s", after)
			p("    was %s", before)
		}
	}

	for _, s := range r.sections() {
		name, state, summary := s.Heading()
		p("")
		p("%s: %s", name, state)
		if summary != "" {
			p("  %s", summary)
		}
		for _, l := range s.TextLines() {
			p("  %s", l)
		}
	}

	if e := r.Exec; e != nil {
		p("")
		p("Exec:")
		p("  cwd    %s", e.Cwd)
		if e.Nofile.Hard == 0 {
			p("  nofile not read: the pass stopped before the limits step")
		} else {
			p("  nofile soft %d, hard %d", e.Nofile.Soft, e.Nofile.Hard)
		}
		if e.Path != "" {
			p("  path   %s", e.Path)
			p("  argv   %s", QuoteArgs(e.Argv))
		} else {
			p("  argv   %s", QuoteArgs(e.Command))
		}
		switch e.Init {
		case "":
			p("  start  exec: infera-exec is replaced by the worker")
		case "init-group":
			p("  start  init: infera-exec stays as PID 1 (or subreaper), forwards signals to the worker's process group, reaps zombies")
		default:
			p("  start  init: infera-exec stays as PID 1 (or subreaper), forwards signals to the worker, reaps zombies")
		}
		if len(e.Env) > 0 {
			p("  env")
			for _, kv := range e.Env {
				p("    %s", kv)
			}
		} else {
			p("  env    this environment with the changes above (--verbose or --json: in full)")
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
	case "would-start":
		p("Verdict: would start the worker (exit 0)")
	default:
		p("Verdict: %s (exit %d): %s", r.Outcome.Result, r.Outcome.Code, r.Outcome.Reason)
	}
}

func pad(s string, n int) string {
	if len(s) >= n {
		return s + " "
	}
	return s + strings.Repeat(" ", n-len(s)+1)
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
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
