package workerargs

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// KVConfig is vLLM's --kv-transfer-config, a JSON object.
type KVConfig struct {
	Raw string
	Err error          // not a JSON object; nothing below is set
	Doc map[string]any // the parsed object

	// Connectors are the connectors it configures: the top-level one and
	// every object with a kv_connector inside it (the children of a
	// MultiConnector in kv_connector_extra_config.connectors), depth
	// first, keys in sorted order.
	Connectors []Connector
}

// Connector is one kv_connector entry of the config.
type Connector struct {
	Name  string         // kv_connector: MooncakeConnector, NixlConnector, MultiConnector, ...
	Role  string         // kv_role as written (kv_producer, kv_consumer, kv_both); "" when absent
	Path  string         // where the entry is: "" at the top level, "kv_connector_extra_config.connectors[0]" inside
	Extra map[string]any // kv_connector_extra_config; nil when absent
}

// kvRoles maps vLLM's kv_role values to the worker's role.
var kvRoles = map[string]Role{"kv_producer": Prefill, "kv_consumer": Decode, "kv_both": Both}

func parseKVConfig(raw string) *KVConfig {
	k := &KVConfig{Raw: raw}
	var doc any
	if err := json.Unmarshal([]byte(raw), &doc); err != nil {
		k.Err = fmt.Errorf("--kv-transfer-config is not JSON: %w", err)
		return k
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		k.Err = errors.New("--kv-transfer-config is not a JSON object")
		return k
	}
	k.Doc = obj
	objects(obj, "", func(path string, m map[string]any) {
		if c, ok := connectorOf(m, path); ok {
			k.Connectors = append(k.Connectors, c)
		}
	})
	return k
}

// objects calls fn for v, if it is an object, and every object inside
// it, depth first (an object before what it holds), keys in sorted order.
func objects(v any, path string, fn func(path string, m map[string]any)) {
	switch t := v.(type) {
	case map[string]any:
		fn(path, t)
		for _, key := range sortedKeys(t) {
			objects(t[key], join(path, key), fn)
		}
	case []any:
		for i, e := range t {
			objects(e, fmt.Sprintf("%s[%d]", path, i), fn)
		}
	}
}

func connectorOf(m map[string]any, path string) (Connector, bool) {
	name, ok := m["kv_connector"].(string)
	if !ok {
		return Connector{}, false
	}
	c := Connector{Name: name, Path: path}
	c.Role, _ = m["kv_role"].(string)
	c.Extra, _ = m["kv_connector_extra_config"].(map[string]any)
	return c, true
}

// role is the worker's role: the first connector (the top level first)
// whose kv_role is a producer or a consumer; else kv_both if one says so.
// A MultiConnector child may carry its own role; one without it inherits
// the top level's, which is looked at first.
func (k *KVConfig) role() (Role, string) {
	var both string
	for _, c := range k.Connectors {
		from := "--kv-transfer-config "
		if c.Path != "" {
			from += c.Path + "."
		}
		from += "kv_role=" + c.Role + " (" + c.Name + ")"
		switch kvRoles[c.Role] {
		case Prefill, Decode:
			return kvRoles[c.Role], from
		case Both:
			if both == "" {
				both = from
			}
		}
	}
	if both != "" {
		return Both, both
	}
	return NoRole, ""
}

// Walk calls fn for every key of the config at any depth, depth first,
// keys in sorted order; path names the value, as in
// kv_connector_extra_config.connectors[0].kv_ip.
func (k *KVConfig) Walk(fn func(path, key string, val any)) {
	if k == nil || k.Doc == nil {
		return
	}
	walk(k.Doc, "", fn)
}

func walk(v any, path string, fn func(path, key string, val any)) {
	switch t := v.(type) {
	case map[string]any:
		for _, key := range sortedKeys(t) {
			p := join(path, key)
			fn(p, key, t[key])
			walk(t[key], p, fn)
		}
	case []any:
		for i, e := range t {
			walk(e, fmt.Sprintf("%s[%d]", path, i), fn)
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// RoleOf is the kv_role connector c acts in: its own, or, for a
// MultiConnector child that has none, the top level's.
func (k *KVConfig) RoleOf(c Connector) string {
	if c.Role != "" || c.Path == "" || len(k.Connectors) == 0 || k.Connectors[0].Path != "" {
		return c.Role
	}
	return k.Connectors[0].Role
}
