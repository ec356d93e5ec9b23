package report

import (
	"strings"

	"github.com/infera/infera-exec/internal/environ"
)

// Redacted replaces a secret value in logs and reports.
const Redacted = "<redacted>"

// secretWords are the words of an option or variable name that make its
// value a secret: --api-key, --hf-token, HF_TOKEN, OPENAI_API_KEY,
// AWS_SECRET_ACCESS_KEY, --db-password. Names are split into words at
// '-', '_' and '.', so --tokenizer, --max-num-batched-tokens and
// --ssl-keyfile (a path) are not secrets.
var secretWords = map[string]bool{
	"key": true, "apikey": true, "token": true, "secret": true,
	"password": true, "passwd": true, "credential": true, "credentials": true,
}

// SecretName reports whether an option (--api-key) or environment
// variable (HF_TOKEN) holds a secret.
func SecretName(name string) bool {
	name = strings.ToLower(strings.TrimLeft(name, "-"))
	for _, w := range strings.FieldsFunc(name, func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
		if secretWords[w] || strings.Contains(w, "secret") || strings.Contains(w, "password") {
			return true
		}
	}
	return false
}

// RedactArgs returns argv with the value of every secret option replaced
// (--api-key VALUE and --api-key=VALUE); argv itself is not changed. The
// worker still gets the real values: this is for logs and reports.
func RedactArgs(argv []string) []string {
	out := append([]string(nil), argv...)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") || a == "--" {
			continue
		}
		if name, _, ok := strings.Cut(a, "="); ok {
			if SecretName(name) {
				out[i] = name + "=" + Redacted
			}
			continue
		}
		if SecretName(a) && i+1 < len(out) {
			out[i+1] = Redacted
			i++
		}
	}
	return out
}

// RedactEnv returns NAME=VALUE entries with the values of secret
// variables replaced.
func RedactEnv(env []string) []string {
	if env == nil {
		return nil
	}
	out := make([]string, len(env))
	for i, kv := range env {
		if name, _, ok := strings.Cut(kv, "="); ok && SecretName(name) {
			kv = name + "=" + Redacted
		}
		out[i] = kv
	}
	return out
}

func redactChanges(cs []environ.Change) []environ.Change {
	if cs == nil {
		return nil
	}
	out := make([]environ.Change, len(cs))
	red := Redacted
	for i, c := range cs {
		if SecretName(c.Name) {
			if c.Before != nil {
				c.Before = &red
			}
			if c.After != nil {
				c.After = &red
			}
		}
		out[i] = c
	}
	return out
}

// redacted is r as it may be shown or stored: secret option values in
// every argv and secret variables' values replaced. r is not changed.
func redacted(r *Report) *Report {
	cp := *r
	cp.Args = RedactArgs(r.Args)
	cp.EnvChanges = redactChanges(r.EnvChanges)
	if r.Exec != nil {
		e := *r.Exec
		e.Command = RedactArgs(e.Command)
		e.Argv = RedactArgs(e.Argv)
		e.Env = RedactEnv(e.Env)
		cp.Exec = &e
	}
	return &cp
}
