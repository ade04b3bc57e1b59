package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/invopop/jsonschema"
	sjs "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// ParamError is one problem with a policy's params. Path is the location inside
// the params object (e.g. ["totalTokenLimits", "0", "duration"]); the deployment
// loader maps it to a file line.
type ParamError struct {
	Path    []string
	Message string
}

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
	}
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
	var md mapstructure.Metadata
	mdec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		TagName:     "json",
		ErrorUnused: true,
		Metadata:    &md,
		Result:      out,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			durationHook,
			mapstructure.TextUnmarshallerHookFunc(),
		),
	})
	if err != nil {
		return nil, err
	}
	if err := mdec.Decode(generic); err != nil {
		return nil, decodeErrors(err)
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

func validationErrors(ve *sjs.ValidationError) ParamErrors {
	var out ParamErrors
	seen := map[string]bool{}
	var walk func(u *sjs.OutputUnit)
	walk = func(u *sjs.OutputUnit) {
		if u.Error != nil && len(u.Errors) == 0 {
			if ap, ok := u.Error.Kind.(*kind.AdditionalProperties); ok {
				for _, prop := range ap.Properties {
					out = append(out, &ParamError{Path: append(pointerPath(u.InstanceLocation), prop), Message: "unknown parameter"})
				}
				return
			}
			msg := u.Error.String()
			key := u.InstanceLocation + "|" + msg
			if !seen[key] {
				seen[key] = true
				out = append(out, &ParamError{Path: pointerPath(u.InstanceLocation), Message: msg})
			}
		}
		for i := range u.Errors {
			walk(&u.Errors[i])
		}
	}
	walk(ve.BasicOutput())
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

// decodeErrors turns mapstructure's messages ("'a[0].b' expected type ...",
// "” has invalid keys: x") into ParamErrors with paths.
func decodeErrors(err error) ParamErrors {
	var out ParamErrors
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		if line == "" || strings.HasPrefix(line, "decoding failed") || strings.HasSuffix(line, "error(s) decoding:") {
			continue
		}
		var path []string
		if strings.HasPrefix(line, "'") {
			if end := strings.Index(line[1:], "'"); end >= 0 {
				path = fieldPath(line[1 : 1+end])
				line = strings.TrimSpace(line[end+2:])
			}
		}
		if i := strings.Index(line, "has invalid keys: "); i >= 0 {
			for _, k := range strings.Split(line[i+len("has invalid keys: "):], ", ") {
				out = append(out, &ParamError{Path: append(append([]string(nil), path...), k), Message: "unknown parameter"})
			}
			continue
		}
		out = append(out, &ParamError{Path: path, Message: line})
	}
	if len(out) == 0 {
		out = append(out, &ParamError{Message: err.Error()})
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

// Duration is a params duration: Go syntax ("90s", "1h30m") or whole days
// ("1d", "30d"). It is a string in the JSON Schema.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ParseDuration parses a params duration; it must be positive.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" && !strings.ContainsAny(n, "hmsuµn") {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 {
			return 0, fmt.Errorf("invalid duration %q: want a positive whole number of days like \"1d\"", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want Go syntax like \"1m\", \"1h\" or days like \"1d\"", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("invalid duration %q: must be positive", s)
	}
	return d, nil
}

// DurationPattern is the schema pattern of Duration strings.
const DurationPattern = `^([0-9]+d|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$`

// JSONSchema implements jsonschema's custom schema hook.
func (Duration) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Pattern: DurationPattern,
		Description: `A positive duration: "30s", "1m", "1h", "24h", or whole days "1d".`}
}

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts the params syntax.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

var durationType = reflect.TypeOf(Duration(0))

func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	s, ok := data.(string)
	if !ok {
		return nil, fmt.Errorf("expected a duration string like \"1h\", got %v", data)
	}
	v, err := ParseDuration(s)
	if err != nil {
		return nil, err
	}
	return Duration(v), nil
}
