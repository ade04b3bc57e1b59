package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/go-viper/mapstructure/v2"
	"github.com/invopop/jsonschema"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"sluice/deployment"
)

// ParamError is one problem with a policy's params. Path is the location inside
// the params object (e.g. ["totalTokenLimits", "0", "duration"]); the chain
// check maps it to the field's file:line.
type ParamError struct {
	Path    []string
	Message string
	// Kind says whether the problem is a value, or a param name itself (an
	// unknown or a missing param, reported at its key).
	Kind ParamErrorKind
}

// ParamErrorKind classifies a ParamError.
type ParamErrorKind uint8

const (
	// BadValue: the value at Path is wrong (Message says why).
	BadValue ParamErrorKind = iota
	// UnknownParam: Path names a param the policy does not have.
	UnknownParam
	// MissingParam: Path names a required param that is absent.
	MissingParam
)

func (e *ParamError) Error() string {
	if len(e.Path) == 0 {
		return e.Message
	}
	return strings.Join(e.Path, ".") + ": " + e.Message
}

// ParamErrors is a list of ParamError.
type ParamErrors []*ParamError

func (es ParamErrors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// ParamRef is one application id named in a policy's params. Path locates it
// inside the params object as ParamError.Path does (a map key's path ends in
// the key, a list element's in its index).
type ParamRef struct {
	Path []string
	ID   string
}

// ApplicationReferrer is implemented by params structs whose values name
// application ids (per-application lists, overrides). The deployment check,
// which `sluice validate` and the gateway's load both run, reports every id
// that no applications[].id defines at its param's file:line: a restriction
// or an override for a mistyped id would otherwise never apply, and the
// application would silently get the defaults. The id
// sharedctx.DefaultApplicationID ("default", the consumer scope of requests
// without an application) is always accepted; a policy for which it means
// nothing rejects it in its own Validate.
type ApplicationReferrer interface {
	ApplicationRefs() []ParamRef
}

// Reflector returns the reflector that turns params structs into JSON Schema.
// Fields are optional unless tagged `jsonschema:"required"`; unknown keys are
// rejected (additionalProperties: false).
func Reflector() *jsonschema.Reflector {
	return &jsonschema.Reflector{
		RequiredFromJSONSchemaTags: true,
		DoNotReference:             true,
		ExpandedStruct:             true,
		Anonymous:                  true,
		Mapper:                     durationSchema,
	}
}

// durationSchema is the schema of a Duration: a string of its syntax.
func durationSchema(t reflect.Type) *jsonschema.Schema {
	if t != durationType {
		return nil
	}
	return &jsonschema.Schema{Type: "string", Pattern: deployment.DurationPattern,
		Description: `A positive duration: "30s", "1m", "1h", "24h", or whole days "1d".`}
}

// SchemaJSON returns the params JSON Schema for d. comments, when non-nil,
// supplies doc comments (policydefs generation); runtime validation passes nil.
func SchemaJSON(d *Definition, comments map[string]string) ([]byte, error) {
	r := Reflector()
	r.CommentMap = comments
	s := r.Reflect(d.NewParams())
	s.Version = ""
	s.Title = d.Name
	if s.Description == "" {
		s.Description = d.Description
	}
	return json.MarshalIndent(s, "", "  ")
}

// compiledSchemas caches compiled validators per definition. It lives in the
// Registry (not package state), created lazily.
type compiledSchemas struct {
	mu sync.Mutex
	m  map[string]*sjs.Schema
}

func (r *Registry) schema(d *Definition) (*sjs.Schema, error) {
	r.compiled.mu.Lock()
	defer r.compiled.mu.Unlock()
	if s, ok := r.compiled.m[d.ID()]; ok {
		return s, nil
	}
	raw, err := SchemaJSON(d, nil)
	if err != nil {
		return nil, err
	}
	doc, err := sjs.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := sjs.NewCompiler()
	url := "mem:///" + d.Name + "-" + d.Version + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("policies: schema of %s does not compile: %w", d.ID(), err)
	}
	if r.compiled.m == nil {
		r.compiled.m = map[string]*sjs.Schema{}
	}
	r.compiled.m[d.ID()] = s
	return s, nil
}

// DecodeParams validates raw (a YAML- or JSON-decoded object; nil means {})
// against d's schema, then decodes it strictly into a new params struct. All
// errors are ParamErrors.
func (r *Registry) DecodeParams(d *Definition, raw map[string]any) (any, error) {
	if raw == nil {
		raw = map[string]any{}
	}
	// Normalise to JSON values (YAML gives uint64, map[string]any, time strings...).
	js, err := json.Marshal(raw)
	if err != nil {
		return nil, ParamErrors{{Message: "params are not representable as JSON: " + err.Error()}}
	}
	inst, err := sjs.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		return nil, ParamErrors{{Message: err.Error()}}
	}
	sch, err := r.schema(d)
	if err != nil {
		return nil, err
	}
	if err := sch.Validate(inst); err != nil {
		var ve *sjs.ValidationError
		if ok := asValidationError(err, &ve); ok {
			return nil, validationErrors(ve)
		}
		return nil, ParamErrors{{Message: err.Error()}}
	}
	var generic map[string]any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return nil, ParamErrors{{Message: err.Error()}}
	}
	out := d.NewParams()
	// Unknown keys are collected in md.Unused (with their paths), not
	// reported as an error whose text would have to be parsed.
	var md mapstructure.Metadata
	mdec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		TagName:  "json",
		Metadata: &md,
		Result:   out,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			durationHook,
			mapstructure.TextUnmarshallerHookFunc(),
		),
	})
	if err != nil {
		return nil, err
	}
	if errs := decodeErrors(mdec.Decode(generic), md.Unused); len(errs) > 0 {
		return nil, errs
	}
	if v, ok := out.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			var pe ParamErrors
			if asParamErrors(err, &pe) {
				return nil, pe
			}
			var one *ParamError
			if asParamError(err, &one) {
				return nil, ParamErrors{one}
			}
			return nil, ParamErrors{{Message: err.Error()}}
		}
	}
	return out, nil
}

// validationErrors lists the schema's leaf problems. Unknown and missing
// properties become one UnknownParam or MissingParam per name, a Duration
// that does not match its pattern says why in ParseDuration's words, and the
// containers' "validation failed" are left out when a leaf says more.
func validationErrors(ve *sjs.ValidationError) ParamErrors {
	var out, containers ParamErrors
	seen := map[string]bool{}
	var walk func(u *sjs.OutputUnit)
	walk = func(u *sjs.OutputUnit) {
		if u.Error != nil && len(u.Errors) == 0 {
			at := pointerPath(u.InstanceLocation)
			switch k := u.Error.Kind.(type) {
			case *kind.AdditionalProperties:
				for _, prop := range k.Properties {
					out = append(out, &ParamError{Path: append(slices.Clip(at), prop), Message: "unknown parameter", Kind: UnknownParam})
				}
				return
			case *kind.Required:
				for _, prop := range k.Missing {
					out = append(out, &ParamError{Path: append(slices.Clip(at), prop), Message: "required parameter", Kind: MissingParam})
				}
				return
			}
			msg := u.Error.String()
			if p, ok := u.Error.Kind.(*kind.Pattern); ok && p.Want == deployment.DurationPattern {
				if _, err := deployment.ParseDuration(p.Got); err != nil {
					msg = err.Error()
				}
			}
			key := u.InstanceLocation + "|" + msg
			if !seen[key] {
				seen[key] = true
				pe := &ParamError{Path: at, Message: msg}
				switch u.Error.Kind.(type) {
				case *kind.Group, *kind.Reference:
					containers = append(containers, pe)
				default:
					out = append(out, pe)
				}
			}
		}
		for i := range u.Errors {
			walk(&u.Errors[i])
		}
	}
	walk(ve.BasicOutput())
	if len(out) == 0 {
		out = containers
	}
	if len(out) == 0 {
		out = append(out, &ParamError{Message: ve.Error()})
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Path) > len(out[j].Path) })
	return out
}

func pointerPath(ptr string) []string {
	ptr = strings.TrimPrefix(ptr, "/")
	if ptr == "" {
		return nil
	}
	parts := strings.Split(ptr, "/")
	for i, p := range parts {
		parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(p)
	}
	return parts
}

// decodeErrors lists mapstructure's problems: each *mapstructure.DecodeError
// in err's tree at its field name ("a[0].b"), and each unused (unknown) key
// of its metadata. mapstructure records a struct's unused keys only when its
// values decoded; the schema, which rejects unknown keys of every params
// struct (additionalProperties: false) but those with a custom schema, has
// reported them before.
func decodeErrors(err error, unused []string) ParamErrors {
	var out ParamErrors
	var walk func(error)
	walk = func(err error) {
		if de, ok := err.(*mapstructure.DecodeError); ok {
			msg := de.Error()
			if inner := de.Unwrap(); inner != nil {
				msg = inner.Error()
			}
			out = append(out, &ParamError{Path: fieldPath(de.Name()), Message: msg})
			return
		}
		switch x := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		default:
			out = append(out, &ParamError{Message: err.Error()})
		}
	}
	walk(err)
	sort.Strings(unused)
	for _, k := range unused {
		out = append(out, &ParamError{Path: fieldPath(k), Message: "unknown parameter", Kind: UnknownParam})
	}
	return out
}

// fieldPath splits mapstructure's "a[0].b" into ["a","0","b"].
func fieldPath(s string) []string {
	if s == "" {
		return nil
	}
	s = strings.NewReplacer("[", ".", "]", "").Replace(s)
	return strings.Split(s, ".")
}

// Duration is the duration of params: deployment.Duration, the one duration
// type of the document, so a params struct and the document read "1d" alike.
// It is a string in the JSON Schema (Reflector).
type Duration = deployment.Duration

var durationType = reflect.TypeOf(Duration(0))

func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	s, ok := data.(string)
	if !ok {
		return nil, fmt.Errorf("expected a duration string like \"1h\", got %v", data)
	}
	v, err := deployment.ParseDuration(s)
	if err != nil {
		return nil, err
	}
	return Duration(v), nil
}
