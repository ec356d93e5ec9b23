package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseArgs(t *testing.T) {
	cases := []struct {
		args []string
		want Options
	}{
		{[]string{"python3", "-m", "infera.engine.vllm", "--model", "/m"}, Options{Command: []string{"python3", "-m", "infera.engine.vllm", "--model", "/m"}}},
		{[]string{"--explain", "--json", "python3", "--explain"}, Options{Explain: true, JSON: true, Command: []string{"python3", "--explain"}}},
		{[]string{"--verbose", "--", "--weird"}, Options{Verbose: true, Command: []string{"--weird"}}},
		{[]string{"--check", "/img"}, Options{Check: "/img"}},
		{[]string{"--check=/img", "--json"}, Options{Check: "/img", JSON: true}},
		{[]string{"--check", "--json", "/img"}, Options{Check: "/img", JSON: true}}, // switches between an option and its value
		{[]string{"--install", "--verbose", "/overlay"}, Options{Install: "/overlay", Verbose: true}},
		{[]string{"--install", "/overlay"}, Options{Install: "/overlay"}},
		{[]string{"--install=/overlay"}, Options{Install: "/overlay"}},
		{[]string{"--doctor", "--json", "python3", "-m", "x"}, Options{Doctor: true, JSON: true, Command: []string{"python3", "-m", "x"}}},
		{[]string{"-"}, Options{Command: []string{"-"}}},
		{[]string{"install", "/overlay"}, Options{Command: []string{"install", "/overlay"}}}, // a command named like a mode is a command
		{[]string{"--explain"}, Options{Explain: true}},                                      // the plan says "no command given"
		{[]string{"--help"}, Options{Help: true}},
		{[]string{"--apply", "--json", "/img"}, Options{Apply: "/img", JSON: true}},
		{[]string{"apply", "/img"}, Options{Command: []string{"apply", "/img"}}}, // a command named like a mode is a command
		{[]string{"--user", "1000:1000", "--init", "python3", "--user", "x"}, Options{Flags: Flags{Init: true, User: "1000:1000"}, Command: []string{"python3", "--user", "x"}}},
		{[]string{"--user=app", "python3"}, Options{Flags: Flags{User: "app"}, Command: []string{"python3"}}},
	}
	for _, c := range cases {
		got, err := ParseArgs(c.args)
		require.NoError(t, err, "%q", c.args)
		assert.Equal(t, c.want, got, "%q", c.args)
	}
}

func TestParseArgsErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "no command given"},
		{[]string{"--verbose"}, "no command given"},
		{[]string{"--frob", "x"}, "unknown option --frob"},
		{[]string{"--json", "x"}, "--json goes with --explain, --doctor, --check, --apply or --report"},
		{[]string{"--doctor", "--explain", "x"}, "--doctor runs the preflight checks"},
		{[]string{"--check"}, "--check needs a directory"},
		{[]string{"--check="}, "--check needs a directory"},
		{[]string{"--install"}, "--install needs the directory"},
		{[]string{"--check", "/a", "true"}, "--check evaluates patches"},
		{[]string{"--report", "true"}, "--report prints the last report and runs no command"},
		{[]string{"--report", "--explain"}, "--report prints the last report"},
		{[]string{"--init", "--report"}, "--report prints the last report"},
		{[]string{"--install", "/a", "--explain"}, "--install copies the payload and runs no command"},
		{[]string{"--install", "/a", "python3"}, "--install copies the payload and runs no command"},
		{[]string{"--apply"}, "--apply needs a directory"},
		{[]string{"--apply", "/a", "--check", "/b"}, "--check evaluates patches against a directory and runs no command"},
		{[]string{"--apply", "/a", "true"}, "--apply writes the patches"},
		{[]string{"--user"}, "--user needs the user to run the worker as"},
		{[]string{"--user", "1000:", "x"}, `--user "1000:": nothing after the colon`},
		{[]string{"--user=-1", "x"}, `--user "-1": "-1" is not an id`},
		{[]string{"--user", "1000", "--check", "/a"}, "--user says whom the worker runs as"},
		{[]string{"--user", "1000", "--apply", "/a"}, "--user says whom the worker runs as"},
		{[]string{"--init", "--apply", "/a"}, "--init starts a worker"},
	}
	for _, c := range cases {
		_, err := ParseArgs(c.args)
		require.Error(t, err, "%q", c.args)
		var ue *UsageError
		assert.ErrorAs(t, err, &ue)
		assert.Contains(t, err.Error(), c.want, "%q", c.args)
	}
}

func FuzzParseArgs(f *testing.F) {
	f.Add("--explain\x00python3\x00-m\x00x")
	f.Add("--check=/a\x00--json")
	f.Fuzz(func(t *testing.T, joined string) {
		args := splitNUL(joined)
		o, err := ParseArgs(args)
		if err != nil {
			return
		}
		// The command is always a suffix of the arguments, untouched.
		if len(o.Command) > len(args) {
			t.Fatalf("command longer than the arguments")
		}
		for i := range o.Command {
			if o.Command[len(o.Command)-1-i] != args[len(args)-1-i] {
				t.Fatalf("command %q is not a suffix of %q", o.Command, args)
			}
		}
	})
}

func splitNUL(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
