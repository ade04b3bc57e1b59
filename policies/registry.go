package policies

import (
	"fmt"
	"reflect"
	"sort"
)

// Phase names a chain phase for metadata declarations.
type Phase uint8

const (
	PhaseRequest Phase = iota + 1
	PhaseResponse
	PhaseFinal
)

func (p Phase) String() string {
	switch p {
	case PhaseRequest:
		return "request"
	case PhaseResponse:
		return "response"
	case PhaseFinal:
		return "final"
	}
	return "unknown"
}

// MetaKey declares a metadata key a policy reads or writes in a phase. Optional
// reads are not checked at load (the policy copes when the key is absent, e.g. a
// consumer limit falling back to the "default" application).
type MetaKey struct {
	Key      string
	Phase    Phase
	Optional bool
}

// Definition describes a policy type: the catalog entry and its constructor.
type Definition struct {
	Name        string
	Version     string
	Description string
	// NewParams returns a pointer to a zero params struct. Its json tags name the
	// params, its jsonschema tags constrain them, its doc comments document them.
	NewParams func() any
	// Build constructs an instance from decoded params (the value NewParams made).
	Build  func(params any, route RouteInfo, svc *Services) (Policy, error)
	Reads  []MetaKey
	Writes []MetaKey
}

// Define builds a Definition with a typed constructor.
func Define[P any](name, version, description string, build func(p *P, route RouteInfo, svc *Services) (Policy, error)) Definition {
	return Definition{
		Name: name, Version: version, Description: description,
		NewParams: func() any { return new(P) },
		Build: func(params any, route RouteInfo, svc *Services) (Policy, error) {
			return build(params.(*P), route, svc)
		},
	}
}

// ID is "name/version".
func (d *Definition) ID() string { return d.Name + "/" + d.Version }

// Registry holds definitions by name and major version. It is built once at
// startup and read-only afterwards.
type Registry struct {
	defs     map[string]*Definition
	compiled compiledSchemas
}

// NewRegistry returns a registry holding defs. A duplicate name/version panics:
// that is a programming error in the built-in list.
func NewRegistry(defs ...Definition) *Registry {
	r := &Registry{defs: make(map[string]*Definition, len(defs))}
	for i := range defs {
		d := defs[i]
		if d.Name == "" || d.Version == "" || d.NewParams == nil || d.Build == nil {
			panic(fmt.Sprintf("policies: incomplete definition %q", d.ID()))
		}
		if reflect.TypeOf(d.NewParams()).Kind() != reflect.Pointer {
			panic(fmt.Sprintf("policies: %s NewParams must return a pointer", d.ID()))
		}
		if _, dup := r.defs[d.ID()]; dup {
			panic(fmt.Sprintf("policies: duplicate definition %s", d.ID()))
		}
		r.defs[d.ID()] = &d
	}
	return r
}

// Lookup returns the definition for name and version.
func (r *Registry) Lookup(name, version string) (*Definition, bool) {
	d, ok := r.defs[name+"/"+version]
	return d, ok
}

// Names returns the registered policy names (without versions), sorted, for
// error hints.
func (r *Registry) Names() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range r.defs {
		if !seen[d.Name] {
			seen[d.Name] = true
			out = append(out, d.Name)
		}
	}
	sort.Strings(out)
	return out
}

// All returns every definition sorted by name, then version.
func (r *Registry) All() []*Definition {
	out := make([]*Definition, 0, len(r.defs))
	for _, d := range r.defs {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out
}
