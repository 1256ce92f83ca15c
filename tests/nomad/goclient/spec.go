package main

// hclspec.Spec -> hcldec.Spec, by the rules Nomad's client follows (protocol.md §3.1):
// an Object's key is its child's implied name, Default.primary gets none, Attr.type
// and Literal.value are HCL expressions. The config is then decoded as Nomad does,
// from HCL or through its JSON path, and encoded with cty's msgpack.

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"
)

// seen counts what the schemas use: spec kinds, attribute types, defaults.
type seen map[string]int

func asMap(v interface{}) map[string]interface{} {
	m, _ := v.(map[string]interface{})
	return m
}

func str(m map[string]interface{}, k string) string {
	s, _ := m[k].(string)
	return s
}

func num(m map[string]interface{}, k string) int {
	switch v := m[k].(type) {
	case string: // protojson writes 64-bit integers as strings
		var n int
		fmt.Sscan(v, &n)
		return n
	case float64:
		return int(v)
	}
	return 0
}

func named(m map[string]interface{}, implied string) (string, error) {
	if n := str(m, "name"); n != "" {
		return n, nil
	}
	if implied == "" {
		return "", fmt.Errorf("no name and none implied: %v", m)
	}
	return implied, nil
}

func hclType(expr string) (cty.Type, error) {
	e, diags := hclsyntax.ParseExpression([]byte(expr), "type", hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilType, diags
	}
	t, diags := typeexpr.TypeConstraint(e)
	if diags.HasErrors() {
		return cty.NilType, diags
	}
	return t, nil
}

func convertSpec(spec map[string]interface{}, implied string, s seen) (hcldec.Spec, error) {
	if len(spec) != 1 {
		return nil, fmt.Errorf("a Spec sets exactly one of its oneof, got %v", spec)
	}
	for kind, raw := range spec {
		s["kind:"+kind]++
		m := asMap(raw)
		switch kind {
		case "object":
			out := hcldec.ObjectSpec{}
			for k, v := range asMap(m["attributes"]) {
				c, err := convertSpec(asMap(v), k, s)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", k, err)
				}
				out[k] = c
			}
			return out, nil
		case "array":
			out := hcldec.TupleSpec{}
			vals, _ := m["values"].([]interface{})
			for _, v := range vals {
				c, err := convertSpec(asMap(v), "", s)
				if err != nil {
					return nil, err
				}
				out = append(out, c)
			}
			return out, nil
		case "Attr":
			name, err := named(m, implied)
			if err != nil {
				return nil, err
			}
			t, err := hclType(str(m, "type"))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			s["type:"+str(m, "type")]++
			if m["required"] == true {
				s["required"]++
			}
			return &hcldec.AttrSpec{Name: name, Type: t, Required: m["required"] == true}, nil
		case "block_value":
			name, err := named(m, implied)
			if err != nil {
				return nil, err
			}
			nested, err := convertSpec(asMap(m["nested"]), "", s)
			if err != nil {
				return nil, err
			}
			return &hcldec.BlockSpec{TypeName: name, Nested: nested, Required: m["required"] == true}, nil
		case "block_attrs":
			name, err := named(m, implied)
			if err != nil {
				return nil, err
			}
			t, err := hclType(str(m, "type"))
			if err != nil {
				return nil, err
			}
			return &hcldec.BlockAttrsSpec{TypeName: name, ElementType: t, Required: m["required"] == true}, nil
		case "block_list", "block_set":
			name, err := named(m, implied)
			if err != nil {
				return nil, err
			}
			nested, err := convertSpec(asMap(m["nested"]), "", s)
			if err != nil {
				return nil, err
			}
			if kind == "block_set" {
				return &hcldec.BlockSetSpec{TypeName: name, Nested: nested, MinItems: num(m, "min_items"), MaxItems: num(m, "max_items")}, nil
			}
			return &hcldec.BlockListSpec{TypeName: name, Nested: nested, MinItems: num(m, "min_items"), MaxItems: num(m, "max_items")}, nil
		case "block_map":
			name, err := named(m, implied)
			if err != nil {
				return nil, err
			}
			var labels []string
			ls, _ := m["labels"].([]interface{})
			for _, l := range ls {
				labels = append(labels, l.(string))
			}
			if len(labels) == 0 {
				return nil, fmt.Errorf("%s: a block_map needs a label", name)
			}
			nested, err := convertSpec(asMap(m["nested"]), "", s)
			if err != nil {
				return nil, err
			}
			return &hcldec.BlockMapSpec{TypeName: name, LabelNames: labels, Nested: nested}, nil
		case "default":
			primary, err := convertSpec(asMap(m["primary"]), "", s)
			if err != nil {
				return nil, fmt.Errorf("%s: default primary: %w", implied, err)
			}
			def, err := convertSpec(asMap(m["default"]), "", s)
			if err != nil {
				return nil, err
			}
			return &hcldec.DefaultSpec{Primary: primary, Default: def}, nil
		case "literal":
			e, diags := hclsyntax.ParseExpression([]byte(str(m, "value")), "literal", hcl.InitialPos)
			if diags.HasErrors() {
				return nil, diags
			}
			v, diags := e.Value(nil)
			if diags.HasErrors() {
				return nil, diags
			}
			return &hcldec.LiteralSpec{Value: v}, nil
		}
		return nil, fmt.Errorf("unknown spec kind %q", kind)
	}
	return nil, nil
}

// source is a config as a job or agent file gives it: HCL text or Nomad's JSON form.
type source struct {
	HCL  string                 `json:"hcl"`
	JSON map[string]interface{} `json:"json"`
}

type diag struct {
	Summary string `json:"summary"`
	Detail  string `json:"detail"`
}

func diagList(diags hcl.Diagnostics) []diag {
	var out []diag
	for _, d := range diags {
		out = append(out, diag{d.Summary, d.Detail})
	}
	return out
}

// decode runs hcldec on one form of the config (Nomad's ParseHclInterface for the JSON one).
func decode(spec hcldec.Spec, src source, vars map[string]cty.Value) (cty.Value, hcl.Diagnostics) {
	var file *hcl.File
	var diags hcl.Diagnostics
	if src.JSON != nil {
		raw, _ := json.Marshal(src.JSON)
		file, diags = hcljson.Parse(raw, "config.json")
	} else {
		file, diags = hclsyntax.ParseConfig([]byte(src.HCL), "config.hcl", hcl.InitialPos)
	}
	if diags.HasErrors() {
		return cty.NilVal, diags
	}
	ctx := &hcl.EvalContext{Variables: vars}
	val, diags := hcldec.Decode(file.Body, spec, ctx)
	if diags.HasErrors() {
		return cty.NilVal, diags
	}
	return val, nil
}

func encode(val cty.Value) ([]byte, error) {
	return ctymsgpack.Marshal(val, val.Type())
}

// override replaces values at dotted paths ("mount.0.source") in a decoded value, to
// build the payload hcldec would never produce: a null where it requires a value, a
// value of the wrong type. JSON null is a null of the old type; anything else is the
// value as cty gives JSON (a string stays a string).
func override(val cty.Value, path []string, with interface{}) (cty.Value, error) {
	if len(path) == 0 {
		if with == nil {
			return cty.NullVal(val.Type()), nil
		}
		raw, _ := json.Marshal(with)
		var v interface{}
		_ = json.Unmarshal(raw, &v)
		switch x := v.(type) {
		case string:
			return cty.StringVal(x), nil
		case bool:
			return cty.BoolVal(x), nil
		case float64:
			return cty.NumberFloatVal(x), nil
		}
		return cty.NilVal, fmt.Errorf("unsupported override %v", with)
	}
	switch {
	case val.Type().IsObjectType():
		attrs := val.AsValueMap()
		cur, ok := attrs[path[0]]
		if !ok {
			return cty.NilVal, fmt.Errorf("no attribute %q", path[0])
		}
		nv, err := override(cur, path[1:], with)
		if err != nil {
			return cty.NilVal, err
		}
		attrs[path[0]] = nv
		return cty.ObjectVal(attrs), nil
	case val.Type().IsListType() || val.Type().IsTupleType():
		elems := val.AsValueSlice()
		var i int
		if _, err := fmt.Sscan(path[0], &i); err != nil || i >= len(elems) {
			return cty.NilVal, fmt.Errorf("no element %q", path[0])
		}
		nv, err := override(elems[i], path[1:], with)
		if err != nil {
			return cty.NilVal, err
		}
		elems[i] = nv
		return cty.TupleVal(elems), nil // the element's type may have changed
	}
	return cty.NilVal, fmt.Errorf("cannot descend into %s", val.Type().FriendlyName())
}

func seenList(s seen) []string {
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
