package policies_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/invopop/jsonschema"

	"sluice/gwerror"
	"sluice/policies"
)

// looseParams has a schema that admits anything, so that the strict
// decoder, not the schema, finds its problems.
type looseParams struct {
	Count  int `json:"count"`
	Limits []struct {
		Duration policies.Duration `json:"duration"`
	} `json:"limits"`
}

func (looseParams) JSONSchema() *jsonschema.Schema { return &jsonschema.Schema{Type: "object"} }

type nopPolicy struct{}

func (nopPolicy) OnRequest(*policies.Call) *gwerror.Error { return nil }

// TestDecodeErrorsTyped: the strict decoder's problems come with their path
// and kind from mapstructure's typed errors and metadata, not from its
// message text: bad values at the value (every one, at any depth), unknown
// keys (at any depth) as UnknownParam.
func TestDecodeErrorsTyped(t *testing.T) {
	def := policies.Define("loose", "v1", "a permissive schema",
		func(*looseParams, policies.RouteInfo, *policies.Services) (policies.Policy, error) {
			return nopPolicy{}, nil
		})
	reg := policies.NewRegistry(def)
	d, _ := reg.Lookup("loose", "v1")
	type got struct {
		path string
		kind policies.ParamErrorKind
		msg  string
	}
	decode := func(raw map[string]any) []got {
		t.Helper()
		_, err := reg.DecodeParams(d, raw)
		var pe policies.ParamErrors
		if !errors.As(err, &pe) {
			t.Fatalf("got %v", err)
		}
		var all []got
		for _, e := range pe {
			all = append(all, got{strings.Join(e.Path, "."), e.Kind, e.Message})
		}
		slices.SortFunc(all, func(a, b got) int { return strings.Compare(a.path, b.path) })
		return all
	}
	values := decode(map[string]any{"count": "ten", "limits": []any{map[string]any{"duration": "0s"}}})
	if want := []got{
		{"count", policies.BadValue, "expected type 'int', got unconvertible type 'string'"},
		{"limits.0.duration", policies.BadValue, `invalid duration "0s": must be positive`},
	}; !slices.Equal(values, want) {
		t.Errorf("bad values:\n got  %v\n want %v", values, want)
	}
	unknown := decode(map[string]any{"bogus": true, "limits": []any{map[string]any{"duration": "1h", "extra": 1}}})
	if want := []got{
		{"bogus", policies.UnknownParam, "unknown parameter"},
		{"limits.0.extra", policies.UnknownParam, "unknown parameter"},
	}; !slices.Equal(unknown, want) {
		t.Errorf("unknown keys:\n got  %v\n want %v", unknown, want)
	}
}
