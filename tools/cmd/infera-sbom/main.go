// Command infera-sbom writes a CycloneDX 1.5 JSON bill of materials of Go
// binaries from their build information (package sbom):
//
//	infera-sbom [-name NAME] [-version V] [-o FILE] [-deb NAME=VERSION=ARCH=FILE=WHERE] BINARY...
//
// The timestamp is SOURCE_DATE_EPOCH's when it is set, else there is none,
// so the same binaries give the same bill. make release writes
// dist/sbom.cdx.json with it.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/infera/infera-exec/tools/outdir"
	"github.com/infera/infera-exec/tools/sbom"
)

var version = "dev" // -X main.version

func main() { os.Exit(run(os.Args[1:], os.Getenv("SOURCE_DATE_EPOCH"), os.Stdout, os.Stderr)) }

func run(args []string, epoch string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("infera-sbom", flag.ContinueOnError)
	fl.SetOutput(stderr)
	o := sbom.Options{Tool: "infera-sbom", ToolVer: version}
	fl.StringVar(&o.Name, "name", "infera-exec", "the bill's subject `NAME`")
	fl.StringVar(&o.Version, "version", "dev", "the release `VERSION` (also of the project's own modules)")
	out := fl.String("o", "-", "write the bill to `FILE` (- for stdout)")
	fl.Func("deb", "a Debian package's file the release ships, `NAME=VERSION=ARCH=FILE=WHERE` (repeatable)", func(s string) error {
		p, err := sbom.ParsePackage(s)
		if err == nil {
			o.Packages = append(o.Packages, p)
		}
		return err
	})
	if err := fl.Parse(args); err != nil {
		return 64
	}
	o.Binaries = fl.Args()
	if epoch != "" {
		n, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil || n < 0 {
			fmt.Fprintf(stderr, "infera-sbom: SOURCE_DATE_EPOCH=%q: want seconds since the epoch\n", epoch)
			return 64
		}
		o.Created = time.Unix(n, 0)
	}
	b, err := sbom.Build(o)
	if err != nil {
		fmt.Fprintln(stderr, "infera-sbom:", err)
		return 1
	}
	var buf bytes.Buffer
	if err := b.Write(&buf); err != nil {
		fmt.Fprintln(stderr, "infera-sbom:", err)
		return 1
	}
	if *out == "-" {
		_, err = stdout.Write(buf.Bytes())
	} else {
		err = outdir.WriteFile(*out, func(w io.Writer) error {
			_, err := w.Write(buf.Bytes())
			return err
		})
	}
	if err != nil {
		fmt.Fprintln(stderr, "infera-sbom:", err)
		return 1
	}
	return 0
}
