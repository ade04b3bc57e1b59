package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"sluice/policies"
)

// APIVersion is the only document version this gateway reads.
const APIVersion = "sluice/v1"

// Defaults applied to fields left empty.
const (
	DefaultMaxRequestBytes = 10 << 20
	DefaultShutdownGrace   = Duration(30 * time.Second)
	// DefaultReadHeaderTimeout, DefaultReadTimeout and DefaultWriteTimeout
	// bound a client's headers, its body, and each write to it.
	DefaultReadHeaderTimeout = Duration(10 * time.Second)
	DefaultReadTimeout       = Duration(30 * time.Second)
	DefaultWriteTimeout      = Duration(30 * time.Second)
	DefaultProviderTimeout   = Duration(60 * time.Second)
	DefaultProviderRetries   = 2
	DefaultRedisKeyPrefix    = "sluice:"
	DefaultPolicyVersion     = "v1"
)

// Load reads, parses and validates the deployment file at path, expanding
// ${VAR} from the process environment. Problems in the document are returned
// as Errors (all of them, in file order).
func Load(path string) (*Deployment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading deployment: %w", err)
	}
	return Parse(data, path)
}

// Parse is Load for a document already in memory; source names it in errors.
func Parse(data []byte, source string) (*Deployment, error) {
	return ParseEnv(data, source, os.LookupEnv)
}

// ParseEnv is Parse with ${VAR} resolved by lookup. It decodes strictly
// (unknown fields are errors), fills defaults and validates. On error it
// returns nil and Errors.
func ParseEnv(data []byte, source string, lookup LookupFunc) (*Deployment, error) {
	return parse(data, source, lookup, nil)
}

// LoadAndCheck is Load followed by Check against reg, except that it reports
// every problem at once: policy chains are checked even when other parts of
// the document are wrong. This is what `sluice validate` runs.
func LoadAndCheck(path string, reg *policies.Registry) (*Deployment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading deployment: %w", err)
	}
	return parse(data, path, os.LookupEnv, reg)
}

// parse decodes, defaults and validates data; with a registry it also builds
// the chains as Check does.
func parse(data []byte, source string, lookup LookupFunc, reg *policies.Registry) (*Deployment, error) {
	dep, dec, errs := decodeDocument(data, source, lookup)
	if errs != nil {
		return nil, errs
	}
	dep.positions = dec.idx
	dep.Source = source
	applyDefaults(dep)
	found := validate(dep)
	if reg != nil {
		if _, err := BuildChains(dep, reg, checkServices(dep)); err != nil {
			var ce Errors
			if errors.As(err, &ce) {
				found = append(found, ce...)
			} else {
				found = append(found, &Error{File: source, Message: err.Error()})
			}
		}
	}
	for _, e := range found {
		if !dec.insideFailed(e.Field) {
			dec.errs = append(dec.errs, e)
		}
	}
	if len(dec.errs) > 0 {
		return nil, dec.errs.normalize()
	}
	return dep, nil
}

// decodeDocument parses data into a Deployment. errs is non-nil only when the
// document could not be parsed at all; decoding problems are in dec.errs.
func decodeDocument(data []byte, source string, lookup LookupFunc) (*Deployment, *decoder, Errors) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, nil, Errors{syntaxError(err, source)}
	}
	var docs []*ast.DocumentNode
	for _, doc := range f.Docs {
		if doc != nil && doc.Body != nil {
			docs = append(docs, doc)
		}
	}
	if len(docs) == 0 {
		return nil, nil, Errors{{File: source, Line: 1, Col: 1, Message: "the document is empty"}}
	}
	if len(docs) > 1 {
		p := nodePos(docs[1].Body)
		return nil, nil, Errors{{File: source, Line: p.line, Col: p.col, Message: "only one YAML document is allowed"}}
	}
	dec := newDecoder(source, lookup)
	dec.collectAnchors(docs[0])
	dep := &Deployment{}
	dec.decodeValue(docs[0].Body, reflect.ValueOf(dep).Elem(), "")
	return dep, dec, nil
}

func syntaxError(err error, source string) *Error {
	var ye yaml.Error
	if errors.As(err, &ye) {
		p := tokenPos(ye.GetToken())
		return &Error{File: source, Line: p.line, Col: p.col, Message: "invalid YAML: " + ye.GetMessage()}
	}
	return &Error{File: source, Message: "invalid YAML: " + err.Error()}
}

// insideFailed reports whether field is, or is inside, a field that failed
// to decode.
func (d *decoder) insideFailed(field string) bool {
	for f := field; f != ""; f = parentPath(f) {
		if d.failed[f] {
			return true
		}
	}
	return false
}

// applyDefaults fills the documented defaults into empty fields.
func applyDefaults(d *Deployment) {
	if d.Server.MaxRequestBytes == 0 {
		d.Server.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if d.Server.ShutdownGrace == 0 {
		d.Server.ShutdownGrace = DefaultShutdownGrace
	}
	if d.Server.ReadHeaderTimeout == 0 {
		d.Server.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if d.Server.ReadTimeout == 0 {
		d.Server.ReadTimeout = DefaultReadTimeout
	}
	if d.Server.WriteTimeout == 0 {
		d.Server.WriteTimeout = DefaultWriteTimeout
	}
	if d.Counters.Backend == "" {
		d.Counters.Backend = "memory"
	}
	if d.Counters.Redis.FailureMode == "" {
		d.Counters.Redis.FailureMode = "open"
	}
	if d.Counters.Redis.KeyPrefix == "" {
		d.Counters.Redis.KeyPrefix = DefaultRedisKeyPrefix
	}
	for i := range d.Providers {
		p := &d.Providers[i]
		if p.Timeout == 0 {
			p.Timeout = DefaultProviderTimeout
		}
		if p.Retries == nil {
			r := DefaultProviderRetries
			p.Retries = &r
		}
	}
	for i := range d.Applications {
		a := &d.Applications[i]
		if a.Name == "" {
			a.Name = a.ID
		}
	}
	for i := range d.Routes {
		for j := range d.Routes[i].Policies {
			if d.Routes[i].Policies[j].Version == "" {
				d.Routes[i].Policies[j].Version = DefaultPolicyVersion
			}
		}
	}
}

// errorAt builds an Error for field in d, positioned from the parse (if any).
func (d *Deployment) errorAt(field string, wantKey bool, format string, args ...any) *Error {
	p := d.positions.at(field, wantKey)
	return &Error{File: d.Source, Line: p.line, Col: p.col, Field: field, Message: fmt.Sprintf(format, args...)}
}

// has reports whether field was written in the file.
func (d *Deployment) has(field string) bool {
	_, ok := d.positions[field]
	return ok
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}
