// Package statedir answers where infera-exec keeps its own files: the
// package probe's cached answer, the report, and a provider directory
// when the library directory is read-only. They live in the container's
// own filesystem, so they are exactly as old as the files they describe.
package statedir

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Defaults are tried in order: /run is a tmpfs on most hosts and in most
// pods; /tmp is writable for a non-root user.
var Defaults = []string{"/run/infera-exec", "/tmp/infera-exec"}

// Candidates are the directories to try: the one the operator named, or
// the defaults.
func Candidates(explicit string) []string {
	if explicit != "" {
		return []string{explicit}
	}
	return Defaults
}

// Pick returns the first candidate that exists or can be made and is
// writable, or "" when none is.
func Pick(explicit string) string {
	for _, d := range Candidates(explicit) {
		if os.MkdirAll(d, 0o755) == nil && unix.Access(d, unix.W_OK|unix.X_OK) == nil {
			return d
		}
	}
	return ""
}

// Sub is dir/name for every candidate, e.g. the report file or the
// fallback provider directory in each.
func Sub(explicit, name string) []string {
	var out []string
	for _, d := range Candidates(explicit) {
		out = append(out, filepath.Join(d, name))
	}
	return out
}
