package ociimage

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/infera/infera-exec/internal/boundedread"
	"github.com/infera/infera-exec/overlay"
)

// The v0.2.2 overlay image's contract, kept beside the new one: its
// payload was at /payload and it had a shell, so the seed's manifests
// fill the overlay volume with an init container
//
//	command: ["sh", "-c", "cp -a /payload/. /overlay/"]
//
// The image therefore holds the payload a second time at /payload (hard
// links in the layer: the bytes once) and, given Options.Busybox, a
// static busybox as sh and cp on PATH, with its copyright file, which
// its licence (GPL-2) asks to ship with the binary. --install stays the
// entrypoint and the documented way.
const (
	// PayloadDir is where the v0.2.2 command line copies from.
	PayloadDir = "payload"
	// BusyboxPath is the busybox executable in the image; CompatApplets
	// are links to it in the same directory, on the image's PATH.
	BusyboxPath = "usr/bin/busybox"
	// BusyboxCopyrightPath is where busybox's copyright file goes, as
	// Debian ships it.
	BusyboxCopyrightPath = "usr/share/doc/busybox-static/copyright"
)

// CompatApplets are the commands of the v0.2.2 init container line.
var CompatApplets = []string{"cp", "sh"}

// Size bounds of what -busybox and -busybox-copyright name.
const (
	maxBusybox   = 16 << 20
	maxCopyright = 1 << 20
)

// extraEntry is a layer entry that is not part of the payload: a
// directory, a symlink (target) or a file held in memory (data).
type extraEntry struct {
	name   string
	mode   fs.FileMode
	dir    bool
	target string
	data   []byte
}

// compatFiles are the entries Options.Busybox adds to the layer, in
// layer order: the parent directories, busybox, its applet links and
// its copyright file, each read once and checked in the bytes shipped.
// A payload whose top-level names would collide with /payload or /usr
// is refused: the image could not hold both.
func compatFiles(o Options) ([]extraEntry, error) {
	ix, _, err := overlay.ReadIndex(o.Payload)
	if err != nil {
		return nil, err
	}
	for _, e := range ix.Entries {
		top, _, _ := strings.Cut(e.Path, "/")
		if top == PayloadDir || (o.Busybox != "" && top == "usr") {
			return nil, fmt.Errorf("payload %s: %s: the image keeps /%s for the v0.2.2 contract; rename it in the payload", o.Payload, e.Path, top)
		}
	}
	if o.Busybox == "" {
		if o.BusyboxCopyright != "" {
			return nil, fmt.Errorf("-busybox-copyright %s without -busybox: name the busybox it belongs to", o.BusyboxCopyright)
		}
		return nil, nil
	}
	if o.BusyboxCopyright == "" {
		return nil, fmt.Errorf("-busybox %s: -busybox-copyright FILE is required with it (Debian ships it at /usr/share/doc/busybox-static/copyright): its licence goes into the image beside it", o.Busybox)
	}
	bin, err := boundedread.File(o.Busybox, maxBusybox)
	if err != nil {
		return nil, fmt.Errorf("-busybox %s: %w (apt-get install busybox-static)", o.Busybox, err)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return nil, fmt.Errorf("-busybox %s: %w (want a static busybox: apt-get install busybox-static)", o.Busybox, err)
	}
	if err := checkStatic(o.Busybox, f, o.Arch, "use Debian's busybox-static, not busybox"); err != nil {
		return nil, err
	}
	copyright, err := boundedread.File(o.BusyboxCopyright, maxCopyright)
	if err != nil {
		return nil, fmt.Errorf("-busybox-copyright %s: %w", o.BusyboxCopyright, err)
	}
	if len(bytes.TrimSpace(copyright)) == 0 {
		return nil, fmt.Errorf("-busybox-copyright %s is empty: name busybox's copyright file", o.BusyboxCopyright)
	}

	var out []extraEntry
	dirs := map[string]bool{}
	addDirs := func(p string) {
		var parts []string
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			parts = append([]string{d}, parts...)
		}
		for _, d := range parts {
			if !dirs[d] {
				dirs[d] = true
				out = append(out, extraEntry{name: d, mode: 0o755, dir: true})
			}
		}
	}
	addDirs(BusyboxPath)
	out = append(out, extraEntry{name: BusyboxPath, mode: 0o755, data: bin})
	for _, a := range CompatApplets {
		out = append(out, extraEntry{name: path.Join(path.Dir(BusyboxPath), a), target: path.Base(BusyboxPath)})
	}
	addDirs(BusyboxCopyrightPath)
	out = append(out, extraEntry{name: BusyboxCopyrightPath, mode: 0o644, data: copyright})
	return out, nil
}
