// Command sandbox runs a command as the entrypoint of a container-like
// environment built from Linux namespaces; see package sandbox.
package main

import (
	"os"

	"github.com/infera/infera-exec/internal/testsupport/sandbox"
)

func main() { os.Exit(sandbox.Main()) }
