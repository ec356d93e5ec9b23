package workerargs

import "strings"

// Option is any long option's value as argparse reads it (--name VALUE or
// --name=VALUE, the last one wins, "--" ends the options); Set is false
// when the command does not give it with a value.
func (a Args) Option(name string) Flag {
	f := map[string]*Flag{name: new(Flag)}
	scanFlags(a.Argv, f)
	return *f[name]
}

// Switch is a boolean option as the engines declare them (argparse's
// BooleanOptionalAction, or an option taking a boolean word): --name is
// on, --no-name off, --name=false or --name false off; the last one wins.
// from is the words that decided; ok is false when neither is given.
func (a Args) Switch(name string) (on bool, from string, ok bool) {
	neg := "--no-" + strings.TrimPrefix(name, "--")
	for i := 1; i < len(a.Argv); i++ {
		arg := a.Argv[i]
		if arg == "--" {
			break
		}
		switch {
		case arg == neg:
			on, from, ok = false, arg, true
		case arg == name:
			on, from, ok = true, arg, true
			if i+1 < len(a.Argv) {
				if b, isBool := boolWord(a.Argv[i+1]); isBool {
					on, from = b, arg+" "+a.Argv[i+1]
					i++
				}
			}
		case strings.HasPrefix(arg, name+"="):
			if b, isBool := boolWord(arg[len(name)+1:]); isBool {
				on, from, ok = b, arg, true
			}
		}
	}
	return on, from, ok
}

func boolWord(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "true", "1", "yes", "on":
		return true, true
	case "false", "0", "no", "off":
		return false, true
	}
	return false, false
}
