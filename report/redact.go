package report

import (
	"encoding/json"
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

// Argv is a command line as the report holds it: written with every
// secret option's value redacted (RedactArgs), in JSON and in text.
type Argv []string

func (a Argv) MarshalJSON() ([]byte, error) { return json.Marshal(RedactArgs(a)) }

// Env is NAME=VALUE entries as the report holds them: written with the
// values of secret variables redacted (RedactEnv).
type Env []string

func (e Env) MarshalJSON() ([]byte, error) { return json.Marshal(RedactEnv(e)) }

// Changes are the environment changes as the report holds them: written
// with the values of secret variables redacted.
type Changes []environ.Change

func (cs Changes) MarshalJSON() ([]byte, error) {
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
	return json.Marshal(out)
}
