// Package sample holds types that exercise every rule jsongen follows,
// beyond what the shim's own types need (promotion conflicts, every
// integer width, floats, marshaler methods, dynamic values), so that the
// generator is checked against encoding/json on all of them. Tests only.
package sample

import (
	"errors"
	"time"
)

//go:generate go run .. -encode All,Decodable -decode Decodable

// All is encoded only.
type All struct {
	Base               // promoted: Tagged conflicts with Other.Tagged at the same depth and vanishes
	Other              // Shared, untagged, loses to Base's tagged "Shared"
	inner              // unexported, its exported fields promoted
	Label              // an embedded non-struct: a member named Label
	Count      string  `json:"count"` // at depth 0: hides Base.Count
	Skipped    string  `json:"-"`
	Dash       string  `json:"-,"`
	BadTag     string  `json:"a\"b"` // not a valid name: the Go name is used
	NoName     int     `json:",omitempty"`
	I8         int8    `json:"i8"`
	I16        int16   `json:"i16,omitempty"`
	I32        int32   `json:"i32"`
	I64        int64   `json:"i64,omitempty"`
	U          uint    `json:"u"`
	U8         uint8   `json:"u8,omitempty"`
	U16        uint16  `json:"u16"`
	U32        uint32  `json:"u32"`
	U64        uint64  `json:"u64,omitempty"`
	Uptr       uintptr `json:"uptr"`
	F32        float32 `json:"f32"`
	F64        float64 `json:"f64,omitempty"`
	Dur        time.Duration
	When       time.Time  `json:"when"`
	WhenPtr    *time.Time `json:"when_ptr,omitempty"`
	WhenPtrNil *time.Time `json:"when_ptr_nil"`
	Upper      Upper      `json:"upper"`
	UpperPtr   *Upper     `json:"upper_ptr"`
	Text       Text       `json:"text"`
	Texts      []Text     `json:"texts,omitempty"`
	Kind       Kind       `json:"kind,omitempty"`
	Kinds      map[Kind][]*Base
	Any        any            `json:"any"`
	Anys       []any          `json:"anys,omitempty"`
	AnyMap     map[string]any `json:"any_map"`
	Nested     [][]string     `json:"nested"`
	PtrPtr     **int          `json:"ptr_ptr"`
	Struct     *Base          `json:"struct,omitempty"`
	Structs    []Base         `json:"structs"`
	ByValue    map[string]Base
	Empty      struct{} `json:"empty"`
}

// Base is embedded and used on its own.
type Base struct {
	Name   string `json:"name"`
	Tagged string
	Count  int    `json:"count,omitempty"`
	Own    string `json:"Shared,omitempty"`
}

// Other is embedded next to Base.
type Other struct {
	Tagged string
	Shared string
	Extra  bool `json:"extra"`
}

type inner struct {
	Deep   string `json:"deep"`
	hidden string
}

// Label is a named string embedded in All.
type Label string

// Kind is a named string used as a map key.
type Kind string

// Upper has MarshalJSON on its value, with spacing and HTML to compact
// and escape.
type Upper struct{ V string }

func (u Upper) MarshalJSON() ([]byte, error) {
	if u.V == "fail" {
		return nil, errors.New("refused")
	}
	return []byte(`{ "v" : "` + u.V + `<&>" , "n" : [ 1 , 2 ] }`), nil
}

// Text has MarshalText.
type Text int

func (t Text) MarshalText() ([]byte, error) {
	return []byte("text<" + string(rune('a'+t%26)) + ">"), nil
}

// Decodable is encoded and decoded.
type Decodable struct {
	Base
	S     string             `json:"s"`
	K     Kind               `json:"k,omitempty"`
	B     bool               `json:"b"`
	I8    int8               `json:"i8"`
	I16   int16              `json:"i16"`
	I32   int32              `json:"i32,omitempty"`
	I     int                `json:"i"`
	U8    uint8              `json:"u8"`
	U32   uint32             `json:"u32"`
	U64   uint64             `json:"u64"`
	P     *string            `json:"p"`
	PS    *Base              `json:"ps,omitempty"`
	L     []string           `json:"l"`
	LL    [][]int            `json:"ll,omitempty"`
	M     map[string][]int64 `json:"m"`
	MK    map[Kind]Base      `json:"mk"`
	Items []Base             `json:"items"`
	Ptrs  []*Base            `json:"ptrs"`
}
