// Package environ holds the worker's environment as an ordered list, so
// the pass can compose it step by step and report exactly what changed.
package environ

import (
	"sort"
	"strings"
)

// Env is an environment in execve order. The first occurrence of a name wins,
// as it does for getenv(3) and Go's os.Getenv; later duplicates are dropped.
type Env struct {
	keys []string
	vals map[string]string
}

// New builds an Env from KEY=VALUE strings such as os.Environ().
// Entries without '=' are dropped: execve passes them but no program can
// read them by name.
func New(kv []string) *Env {
	e := &Env{vals: make(map[string]string, len(kv))}
	for _, s := range kv {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			continue
		}
		if _, dup := e.vals[k]; dup {
			continue
		}
		e.keys = append(e.keys, k)
		e.vals[k] = v
	}
	return e
}

// Clone returns an independent copy.
func (e *Env) Clone() *Env {
	c := &Env{keys: append([]string(nil), e.keys...), vals: make(map[string]string, len(e.vals))}
	for k, v := range e.vals {
		c.vals[k] = v
	}
	return c
}

// Get returns the value of name and whether it is set.
func (e *Env) Get(name string) (string, bool) {
	v, ok := e.vals[name]
	return v, ok
}

// Value returns the value of name, or "" when it is unset.
func (e *Env) Value(name string) string { return e.vals[name] }

// Set sets name to value, keeping its position when it already exists.
func (e *Env) Set(name, value string) {
	if _, ok := e.vals[name]; !ok {
		e.keys = append(e.keys, name)
	}
	e.vals[name] = value
}

// Names returns the names, in execve order.
func (e *Env) Names() []string { return append([]string(nil), e.keys...) }

// Slice returns KEY=VALUE strings for execve.
func (e *Env) Slice() []string {
	out := make([]string, 0, len(e.keys))
	for _, k := range e.keys {
		out = append(out, k+"="+e.vals[k])
	}
	return out
}

// SplitList splits a colon-separated search path, dropping empty elements:
// to the dynamic loader and to Python an empty element means the current
// directory, which is never what a composed path should contain.
func SplitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ":") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// PrependPaths puts dirs in front of the search path held in name and
// keeps the existing elements after them, in their order. Empty elements
// are dropped (to the loader and to Python they mean the current
// directory), and an existing element equal to one of dirs is dropped so
// that running the shim inside a shim does not grow the path.
func (e *Env) PrependPaths(name string, dirs ...string) {
	old, set := e.Get(name)
	merged := make([]string, 0, len(dirs)+8)
	ours := make(map[string]bool)
	for _, d := range dirs {
		if d != "" && !ours[d] {
			ours[d] = true
			merged = append(merged, d)
		}
	}
	for _, d := range SplitList(old) {
		if !ours[d] {
			merged = append(merged, d)
		}
	}
	if len(merged) == 0 && !set {
		return
	}
	e.Set(name, strings.Join(merged, ":"))
}

// Change is one variable that differs between two environments.
type Change struct {
	Name   string  `json:"name"`
	Before *string `json:"before"` // nil: was unset
	After  *string `json:"after"`  // nil: is unset
}

// Diff lists the variables whose value differs from base to e, by name.
func Diff(base, e *Env) []Change {
	var out []Change
	names := make(map[string]bool)
	for _, k := range base.keys {
		names[k] = true
	}
	for _, k := range e.keys {
		names[k] = true
	}
	sorted := make([]string, 0, len(names))
	for k := range names {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		b, bok := base.vals[k]
		a, aok := e.vals[k]
		if bok == aok && b == a {
			continue
		}
		c := Change{Name: k}
		if bok {
			c.Before = &b
		}
		if aok {
			c.After = &a
		}
		out = append(out, c)
	}
	return out
}

// Edit is one change a step of the pass asks for in the worker's
// environment; steps return edits and the pass applies them, so every
// change is visible in one place. Make them with Set, SetDefault and
// Prepend.
type Edit struct {
	Name    string
	Value   string   // for a set
	Prepend []string // for a prepend, as PrependPaths
	op      editOp
}

type editOp int

const (
	opSet editOp = iota
	opDefault
	opPrepend
)

// Set sets name to value.
func Set(name, value string) Edit { return Edit{Name: name, Value: value, op: opSet} }

// SetDefault sets name to value only when it is not set at all.
func SetDefault(name, value string) Edit { return Edit{Name: name, Value: value, op: opDefault} }

// Prepend puts dirs first in the list variable name (see PrependPaths).
func Prepend(name string, dirs ...string) Edit { return Edit{Name: name, Prepend: dirs, op: opPrepend} }

// Apply makes the edits in order.
func (e *Env) Apply(edits ...Edit) {
	for _, ed := range edits {
		switch ed.op {
		case opPrepend:
			e.PrependPaths(ed.Name, ed.Prepend...)
		case opDefault:
			if _, set := e.Get(ed.Name); !set {
				e.Set(ed.Name, ed.Value)
			}
		default:
			e.Set(ed.Name, ed.Value)
		}
	}
}
