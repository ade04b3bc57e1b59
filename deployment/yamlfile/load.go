// Package yamlfile reads and writes the deployment document as YAML: the
// file `sluice gateway --config` and `sluice validate` read. Reading decodes
// strictly (unknown fields are errors), expands ${VAR} in values from an
// environment, records the file:line:col of every field so that every
// problem, including those found later by deployment.Validate and
// policies.Check, names the file, the line and the field, then fills the
// defaults and validates the structure. Writing renders a document so that
// reading it back gives the same document (YAML, and Loadable's JSON, which
// is YAML too).
//
// It imports the deployment document only: the policy chain check is handed
// in by the caller (LoadChecked), so the platform and the gateway use this
// package without the policies.
package yamlfile

import (
	"errors"
	"fmt"
	"os"
	"reflect"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"sluice/deployment"
)

// Load reads, parses and validates the deployment file at path, expanding
// ${VAR} from the process environment. Problems in the document are returned
// as deployment.Errors (all of them, in file order).
func Load(path string) (*deployment.Deployment, error) {
	return LoadChecked(path, nil)
}

// LoadChecked is Load followed by check (policies.Checker's CheckChains),
// except that it reports every problem at once: check runs even when other
// parts of the document are wrong, and its problems inside fields that failed
// to decode are dropped (they would repeat the decoding error). This is what
// `sluice validate` runs. check nil is Load.
func LoadChecked(path string, check func(*deployment.Deployment) error) (*deployment.Deployment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading deployment: %w", err)
	}
	return parse(data, path, os.LookupEnv, check)
}

// Parse is Load for a document already in memory; source names it in errors.
func Parse(data []byte, source string) (*deployment.Deployment, error) {
	return ParseEnv(data, source, os.LookupEnv)
}

// ParseEnv is Parse with ${VAR} resolved by lookup. It decodes strictly
// (unknown fields are errors), fills defaults and validates. On error it
// returns nil and deployment.Errors.
func ParseEnv(data []byte, source string, lookup LookupFunc) (*deployment.Deployment, error) {
	return parse(data, source, lookup, nil)
}

// ParseRendered reads a document that YAML or Loadable rendered (the
// platform's deployments): no ${VAR} is looked up in any environment, since
// the renderer wrote every literal "${" as "$${".
func ParseRendered(data []byte, source string) (*deployment.Deployment, error) {
	return ParseEnv(data, source, func(string) (string, bool) { return "", false })
}

// parse decodes, defaults and validates data; with check it also runs check
// on the decoded document and merges its problems.
func parse(data []byte, source string, lookup LookupFunc, check func(*deployment.Deployment) error) (*deployment.Deployment, error) {
	dep, dec, errs := decodeDocument(data, source, lookup)
	if errs != nil {
		return nil, errs
	}
	dep.Positions = dec.idx
	dep.Source = source
	deployment.ApplyDefaults(dep)
	found := problems(deployment.Validate(dep), source)
	if check != nil {
		found = append(found, problems(check(dep), source)...)
	}
	for _, e := range found {
		if !dec.insideFailed(e.Field) {
			dec.errs = append(dec.errs, e)
		}
	}
	if len(dec.errs) > 0 {
		return nil, dec.errs.Normalize()
	}
	return dep, nil
}

// problems lists err's deployment.Errors; any other error becomes one
// problem of the document source.
func problems(err error, source string) deployment.Errors {
	var es deployment.Errors
	switch {
	case err == nil:
		return nil
	case errors.As(err, &es):
		return es
	}
	return deployment.Errors{{File: source, Message: err.Error()}}
}

// decodeDocument parses data into a Deployment. errs is non-nil only when the
// document could not be parsed at all; decoding problems are in dec.errs.
func decodeDocument(data []byte, source string, lookup LookupFunc) (*deployment.Deployment, *decoder, deployment.Errors) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, nil, deployment.Errors{syntaxError(err, source)}
	}
	var docs []*ast.DocumentNode
	for _, doc := range f.Docs {
		if doc != nil && doc.Body != nil {
			docs = append(docs, doc)
		}
	}
	if len(docs) == 0 {
		return nil, nil, deployment.Errors{{File: source, Line: 1, Col: 1, Message: "the document is empty"}}
	}
	if len(docs) > 1 {
		p := nodePos(docs[1].Body)
		return nil, nil, deployment.Errors{{File: source, Line: p.Line, Col: p.Col, Message: "only one YAML document is allowed"}}
	}
	dec := newDecoder(source, lookup)
	dec.collectAnchors(docs[0])
	dep := &deployment.Deployment{}
	dec.decodeValue(docs[0].Body, reflect.ValueOf(dep).Elem(), "")
	return dep, dec, nil
}

func syntaxError(err error, source string) *deployment.Error {
	var ye yaml.Error
	if errors.As(err, &ye) {
		p := tokenPos(ye.GetToken())
		return &deployment.Error{File: source, Line: p.Line, Col: p.Col, Message: "invalid YAML: " + ye.GetMessage()}
	}
	return &deployment.Error{File: source, Message: "invalid YAML: " + err.Error()}
}

// insideFailed reports whether field is, or is inside, a field that failed
// to decode.
func (d *decoder) insideFailed(field string) bool {
	for f := field; f != ""; f = deployment.ParentField(f) {
		if d.failed[f] {
			return true
		}
	}
	return false
}
