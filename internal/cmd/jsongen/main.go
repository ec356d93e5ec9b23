// Command jsongen writes json_gen.go: encoders (and, where asked,
// decoders) for a package's root types that do what encoding/json does
// for them, without reflection at run time. It runs from a //go:generate
// line in the package:
//
//	//go:generate go run ../internal/cmd/jsongen -encode Report
//	//go:generate go run ../internal/cmd/jsongen -encode record,cacheEntry -decode record,cacheEntry
//
// For each root T it writes appendJSONT(b []byte, v *T) ([]byte, error),
// which appends what json.Marshal(v) returns, and, for -decode roots,
// decodeJSONT(data []byte, v *T) error, which reads what the encoder
// writes (see the package's generated comment for the rules).
//
// The package is type-checked from source without its json_gen.go, so
// a stale generated file (a field renamed or removed) never stops its
// own regeneration.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	encode := flag.String("encode", "", "comma-separated root types to write encoders for")
	decode := flag.String("decode", "", "comma-separated root types to write decoders for")
	out := flag.String("o", OutputName, "output file (relative: in the package directory)")
	flag.Parse()
	dir := "."
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	src, err := Generate(dir, split(*encode), split(*decode))
	if err != nil {
		fmt.Fprintln(os.Stderr, "jsongen:", err)
		os.Exit(1)
	}
	path := *out
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	if err := os.WriteFile(path, src, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "jsongen:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
