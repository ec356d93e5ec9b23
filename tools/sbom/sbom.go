// Package sbom writes a CycloneDX 1.5 JSON bill of materials of Go
// binaries from what the toolchain recorded in them (debug/buildinfo, as
// `go version -m` prints it): each binary a component with its SHA-256,
// its Go toolchain and build settings, and the modules it links, each a
// library component with a pkg:golang package URL, its version and the
// go.sum hash the build checked it against; the dependencies say which
// binary links which. Nothing else is consulted, so the bill is exactly
// what was linked, and the same binaries give the same bytes.
//
// The project's own modules (the main module of a binary, or a module
// replaced by a local directory, which buildinfo records as "(devel)")
// get the release version given.
package sbom

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// Options are the inputs of one bill.
type Options struct {
	Name     string    // the bill's subject, e.g. infera-exec
	Version  string    // the release version, e.g. v0.3.0
	Tool     string    // the generator's name and
	ToolVer  string    // version, recorded in metadata.tools
	Created  time.Time // metadata.timestamp; zero: none (the bill then depends on the binaries alone)
	Binaries []string  // paths of the Go binaries
	Packages []Package // Debian packages whose files the release ships (busybox-static in the overlay image)
}

// Package is a file of a Debian package that the release ships: a
// component of its own, with the package's URL, version and the file's
// SHA-256.
type Package struct {
	Name, Version, Arch string
	File                string // the file shipped, as it is on this machine
	Where               string // where the release has it, e.g. infera-overlay.tar:/usr/bin/busybox
}

// ParsePackage reads NAME=VERSION=ARCH=FILE=WHERE, the -deb flag's value.
func ParsePackage(s string) (Package, error) {
	f := strings.SplitN(s, "=", 5)
	if len(f) != 5 || f[0] == "" || f[1] == "" || f[2] == "" || f[3] == "" {
		return Package{}, fmt.Errorf("-deb %q: want NAME=VERSION=ARCH=FILE=WHERE, e.g. busybox-static=1:1.35.0-4=amd64=/bin/busybox=infera-overlay.tar:/usr/bin/busybox", s)
	}
	return Package{Name: f[0], Version: f[1], Arch: f[2], File: f[3], Where: f[4]}, nil
}

// BOM is the part of CycloneDX 1.5 written here.
type BOM struct {
	Format       string       `json:"bomFormat"`
	SpecVersion  string       `json:"specVersion"`
	Version      int          `json:"version"`
	Metadata     Metadata     `json:"metadata"`
	Components   []Component  `json:"components"`
	Dependencies []Dependency `json:"dependencies"`
}

type Metadata struct {
	Timestamp string     `json:"timestamp,omitempty"`
	Tools     *Tools     `json:"tools,omitempty"`
	Component *Component `json:"component,omitempty"`
}

type Tools struct {
	Components []Component `json:"components"`
}

type Component struct {
	Type       string     `json:"type"` // application, library
	BOMRef     string     `json:"bom-ref,omitempty"`
	Name       string     `json:"name"`
	Version    string     `json:"version,omitempty"`
	PURL       string     `json:"purl,omitempty"`
	Hashes     []Hash     `json:"hashes,omitempty"`
	Properties []Property `json:"properties,omitempty"`
}

type Hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type Dependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

// Build reads every binary's build information and returns the bill.
func Build(o Options) (*BOM, error) {
	if len(o.Binaries) == 0 {
		return nil, fmt.Errorf("no binaries: name the Go binaries the bill is of")
	}
	b := &BOM{Format: "CycloneDX", SpecVersion: "1.5", Version: 1}
	if !o.Created.IsZero() {
		b.Metadata.Timestamp = o.Created.UTC().Format(time.RFC3339)
	}
	if o.Tool != "" {
		b.Metadata.Tools = &Tools{Components: []Component{{Type: "application", Name: o.Tool, Version: o.ToolVer}}}
	}
	if o.Name != "" {
		b.Metadata.Component = &Component{Type: "application", BOMRef: "release:" + o.Name, Name: o.Name, Version: o.Version}
	}
	libs := map[string]Component{}
	var apps []Component
	for _, p := range o.Binaries {
		app, deps, err := binary(p, o.Version)
		if err != nil {
			return nil, err
		}
		var refs []string
		for _, d := range deps {
			libs[d.BOMRef] = d
			refs = append(refs, d.BOMRef)
		}
		sort.Strings(refs)
		apps = append(apps, app)
		b.Dependencies = append(b.Dependencies, Dependency{Ref: app.BOMRef, DependsOn: refs})
	}
	for _, pk := range o.Packages {
		data, err := os.ReadFile(pk.File)
		if err != nil {
			return nil, fmt.Errorf("-deb %s: %w", pk.Name, err)
		}
		sum := sha256.Sum256(data)
		// A purl's version is percent-encoded: a Debian epoch's colon
		// and the "+" of a binNMU or security upload among it.
		purl := "pkg:deb/debian/" + pk.Name + "@" + url.QueryEscape(pk.Version) + "?arch=" + url.QueryEscape(pk.Arch)
		c := Component{Type: "application", BOMRef: purl, Name: pk.Name, Version: pk.Version, PURL: purl,
			Hashes: []Hash{{Alg: "SHA-256", Content: hex.EncodeToString(sum[:])}}}
		if pk.Where != "" {
			c.Properties = []Property{{Name: "infera:shipped-as", Value: pk.Where}}
		}
		apps = append(apps, c)
		b.Dependencies = append(b.Dependencies, Dependency{Ref: purl, DependsOn: []string{}})
	}
	if b.Metadata.Component != nil {
		var refs []string
		for _, a := range apps {
			refs = append(refs, a.BOMRef)
		}
		b.Dependencies = append([]Dependency{{Ref: b.Metadata.Component.BOMRef, DependsOn: refs}}, b.Dependencies...)
	}
	refs := make([]string, 0, len(libs))
	for r := range libs {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	b.Components = apps
	for _, r := range refs {
		b.Components = append(b.Components, libs[r])
	}
	for _, r := range refs {
		b.Dependencies = append(b.Dependencies, Dependency{Ref: r, DependsOn: []string{}})
	}
	return b, nil
}

// Write writes the bill as indented JSON with a final newline.
func (b *BOM) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(b)
}

// binary is the component of one Go binary and the modules it links.
func binary(p, release string) (Component, []Component, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return Component{}, nil, err
	}
	bi, err := buildinfo.ReadFile(p)
	if err != nil {
		return Component{}, nil, fmt.Errorf("%s: %w (not a Go binary, or built without module information)", p, err)
	}
	sum := sha256.Sum256(data)
	name := filepath.Base(p)
	app := Component{
		Type: "application", BOMRef: "binary:" + name, Name: name, Version: release,
		Hashes: []Hash{{Alg: "SHA-256", Content: hex.EncodeToString(sum[:])}},
		Properties: []Property{
			{Name: "go:toolchain", Value: bi.GoVersion},
			{Name: "go:path", Value: bi.Path},
			{Name: "go:main", Value: bi.Main.Path},
		},
	}
	for _, s := range bi.Settings {
		app.Properties = append(app.Properties, Property{Name: "go:build:" + s.Key, Value: s.Value})
	}
	deps := []Component{module(&bi.Main, release)}
	for _, m := range bi.Deps {
		deps = append(deps, module(m, release))
	}
	std := strings.TrimPrefix(bi.GoVersion, "go")
	deps = append(deps, Component{Type: "library", BOMRef: "pkg:golang/stdlib@" + std, Name: "stdlib", Version: std, PURL: "pkg:golang/stdlib@" + std})
	return app, deps, nil
}

// module is the component of a module a binary links: the module that
// replaces it when there is one, the release version for a local one.
func module(m *debug.Module, release string) Component {
	path, version, sum := m.Path, m.Version, m.Sum
	local := false
	if r := m.Replace; r != nil {
		if r.Version == "" || r.Version == "(devel)" || strings.HasPrefix(r.Path, ".") || filepath.IsAbs(r.Path) { // a directory on disk
			local = true
		} else {
			path, version, sum = r.Path, r.Version, r.Sum
		}
	}
	if version == "(devel)" || version == "" {
		local = true
	}
	if local {
		version = release
	}
	purl := "pkg:golang/" + path
	if version != "" {
		purl += "@" + version
	}
	c := Component{Type: "library", BOMRef: purl, Name: path, Version: version, PURL: purl}
	if sum != "" {
		c.Properties = append(c.Properties, Property{Name: "go:sum", Value: sum})
	}
	if m.Replace != nil {
		c.Properties = append(c.Properties, Property{Name: "go:replaces", Value: m.Path})
	}
	return c
}
