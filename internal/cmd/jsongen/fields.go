package main

import (
	"fmt"
	"go/types"
	"reflect"
	"slices"
	"strings"
	"unicode"
)

// field is one member of a struct's JSON object, as encoding/json's
// typeFields finds it: promoted through embedded structs, tags obeyed,
// conflicts at one depth dropped.
type field struct {
	name      string
	tagged    bool
	index     []int
	path      []string // Go field names along index
	typ       types.Type
	omitEmpty bool
}

// jsonFields lists t's members in encoding/json's order (the order of
// their index sequences).
func jsonFields(t types.Type) ([]field, error) {
	type embedded struct {
		typ   types.Type
		index []int
		path  []string
	}
	var current []embedded
	next := []embedded{{typ: t}}
	var count map[string]int
	nextCount := map[string]int{}
	visited := map[string]bool{}
	var fields []field
	for len(next) > 0 {
		current, next = next, nil
		count, nextCount = nextCount, map[string]int{}
		for _, f := range current {
			key := types.TypeString(f.typ, nil)
			if visited[key] {
				continue
			}
			visited[key] = true
			st := f.typ.Underlying().(*types.Struct)
			for i := 0; i < st.NumFields(); i++ {
				sf := st.Field(i)
				if sf.Embedded() {
					et := sf.Type()
					if p, ok := types.Unalias(et).(*types.Pointer); ok {
						et = p.Elem()
					}
					if !sf.Exported() && !isStruct(et) {
						continue
					}
				} else if !sf.Exported() {
					continue
				}
				tag := reflect.StructTag(st.Tag(i)).Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !validTag(name) {
					name = ""
				}
				for _, o := range strings.Split(opts, ",") {
					switch o {
					case "", "omitempty":
					default:
						return nil, fmt.Errorf("%s.%s: tag option %q is not supported", types.TypeString(f.typ, nil), sf.Name(), o)
					}
				}
				index := append(slices.Clone(f.index), i)
				path := append(slices.Clone(f.path), sf.Name())
				ft := sf.Type()
				if p, ok := types.Unalias(ft).(*types.Pointer); ok && !isNamed(ft) {
					ft = p.Elem()
				}
				if name != "" || !sf.Embedded() || !isStruct(ft) {
					tagged := name != ""
					if name == "" {
						name = sf.Name()
					}
					fields = append(fields, field{name: name, tagged: tagged, index: index, path: path, typ: sf.Type(),
						omitEmpty: slices.Contains(strings.Split(opts, ","), "omitempty")})
					if count[key] > 1 {
						// Two copies at this depth annihilate each other,
						// as in encoding/json.
						fields = append(fields, fields[len(fields)-1])
					}
					continue
				}
				if _, ok := types.Unalias(sf.Type()).(*types.Pointer); ok {
					return nil, fmt.Errorf("%s.%s: an embedded pointer is not supported", types.TypeString(f.typ, nil), sf.Name())
				}
				fk := types.TypeString(ft, nil)
				nextCount[fk]++
				if nextCount[fk] == 1 {
					next = append(next, embedded{typ: ft, index: index, path: path})
				}
			}
		}
	}
	slices.SortFunc(fields, func(a, b field) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if c := len(a.index) - len(b.index); c != 0 {
			return c
		}
		if a.tagged != b.tagged {
			if a.tagged {
				return -1
			}
			return 1
		}
		return slices.Compare(a.index, b.index)
	})
	out := fields[:0]
	for advance, i := 0, 0; i < len(fields); i += advance {
		fi := fields[i]
		for advance = 1; i+advance < len(fields); advance++ {
			if fields[i+advance].name != fi.name {
				break
			}
		}
		if advance == 1 {
			out = append(out, fi)
			continue
		}
		// The dominant field: the shallowest, tagged before untagged; a
		// tie hides the name altogether.
		if len(fields[i].index) == len(fields[i+1].index) && fields[i].tagged == fields[i+1].tagged {
			continue
		}
		out = append(out, fi)
	}
	slices.SortFunc(out, func(a, b field) int { return slices.Compare(a.index, b.index) })
	return out, nil
}

// validTag is encoding/json's rule for a usable tag name.
func validTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

func isStruct(t types.Type) bool {
	_, ok := t.Underlying().(*types.Struct)
	return ok
}

func isNamed(t types.Type) bool {
	_, ok := types.Unalias(t).(*types.Named)
	return ok
}
