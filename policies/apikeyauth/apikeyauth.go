// Package apikeyauth is the api-key-auth policy: it reads an API key from a
// request header (or a query parameter), resolves it to an application through
// the injected key index, and removes the credential before the request goes
// upstream.
package apikeyauth

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"sluice/gwerror"
	"sluice/policies"
	"sluice/sharedctx"
)

// Name and Version identify the definition.
const (
	Name    = "api-key-auth"
	Version = "v1"
)

// AuthMethod is the AuthContext.Method this policy writes.
const AuthMethod = "api-key"

// Params configures api-key-auth. With no params the key is read from the
// Authorization header ("Bearer <key>"), else from x-api-key. The key is
// looked up by its SHA-256 hash among the applications' keys; on success the
// request carries the application id, on failure it is answered 401. A
// credential sent twice (the header repeated, under any letter case of its
// name, or the query parameter repeated) is answered 401 too, whatever its
// values: which one counts would depend on who reads it. Every header and
// query parameter the key may come from is removed before the request goes
// upstream.
type Params struct {
	// The request header that carries the API key.
	Header string `json:"header,omitempty" jsonschema:"minLength=1,default=Authorization"`
	// Stripped from the header value when present, compared without regard to
	// case ("bearer <key>" works too). Set "" when the header carries the bare
	// key. Does not apply to alternateHeaders or queryParam.
	Prefix *string `json:"prefix,omitempty" jsonschema:"default=Bearer "`
	// Headers consulted in order when header is absent; each carries the bare
	// key. The default accepts Anthropic clients' x-api-key. Set [] to accept
	// only header.
	AlternateHeaders []string `json:"alternateHeaders,omitempty" jsonschema:"default=x-api-key"`
	// A query parameter that carries the key when no header does (unset: keys
	// in the query are not accepted).
	QueryParam string `json:"queryParam,omitempty"`
	// The application ids allowed on this route: a valid key of any other
	// application is answered 403 application_not_allowed. Unset: every
	// application; [] : none.
	Applications *[]string `json:"applications,omitempty" jsonschema:"uniqueItems=true"`
}

// Validate checks header names (policies.DecodeParams calls it).
func (p *Params) Validate() error {
	var errs policies.ParamErrors
	if p.Header != "" && !validHeaderName(p.Header) {
		errs = append(errs, &policies.ParamError{Path: []string{"header"}, Message: "not a valid HTTP header name"})
	}
	for i, h := range p.AlternateHeaders {
		if !validHeaderName(h) {
			errs = append(errs, &policies.ParamError{Path: []string{"alternateHeaders", strconv.Itoa(i)}, Message: "not a valid HTTP header name"})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// Definition returns the api-key-auth v1 definition.
func Definition() policies.Definition {
	d := policies.Define(Name, Version,
		"Authenticates requests by API key (looked up by SHA-256 hash), writes the application id and strips the key before the request goes upstream.",
		build)
	d.Writes = []policies.MetaKey{{Key: sharedctx.KeyApplicationID, Phase: policies.PhaseRequest}}
	return d
}

var _ policies.Identifier = (*policy)(nil)

// policy is immutable after build and safe for concurrent use.
type policy struct {
	keys policies.KeyIndex
	// headers holds canonical header names in lookup order: the configured
	// header first, then the alternates. Only headers[0] has the prefix.
	headers []string
	prefix  string
	// bareScheme is prefix without trailing spaces ("Bearer").
	bareScheme string
	queryParam string
	missingMsg string
	// allowed is nil when every application may use the route.
	allowed map[string]bool
}

func build(p *Params, _ policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
	if svc == nil || svc.Keys == nil {
		return nil, errors.New("api-key-auth needs a key index (Services.Keys is nil)")
	}
	header := p.Header
	if header == "" {
		header = "Authorization"
	}
	prefix := "Bearer "
	if p.Prefix != nil {
		prefix = *p.Prefix
	}
	alternates := p.AlternateHeaders
	if alternates == nil {
		alternates = []string{"x-api-key"}
	}
	pol := &policy{keys: svc.Keys, prefix: prefix, bareScheme: strings.TrimRight(prefix, " "), queryParam: p.QueryParam}
	seen := map[string]bool{}
	for _, h := range append([]string{header}, alternates...) {
		c := textproto.CanonicalMIMEHeaderKey(h)
		if !seen[c] {
			seen[c] = true
			pol.headers = append(pol.headers, c)
		}
	}
	pol.missingMsg = missingMessage(pol.headers, prefix, p.QueryParam)
	if p.Applications != nil {
		pol.allowed = make(map[string]bool, len(*p.Applications))
		for _, id := range *p.Applications {
			pol.allowed[id] = true
		}
	}
	return pol, nil
}

func missingMessage(headers []string, prefix, query string) string {
	var b strings.Builder
	b.WriteString("missing API key: send it in the ")
	b.WriteString(headers[0])
	b.WriteString(" header")
	if prefix != "" {
		b.WriteString(` as "` + prefix + `<key>"`)
	}
	for _, h := range headers[1:] {
		b.WriteString(", or in the " + h + " header")
	}
	if query != "" {
		b.WriteString(", or in the " + query + " query parameter")
	}
	return b.String()
}

// OnRequest authenticates the request (Identify, unless the gateway already
// did: Call.Identified) and then strips every credential source, whether or
// not the key was valid.
func (p *policy) OnRequest(c *policies.Call) *gwerror.Error {
	var gerr *gwerror.Error
	if !c.Identified {
		gerr = p.Identify(c)
	}
	p.strip(c.Request)
	return gerr
}

// Identify looks the key up, checks that its application may use the route
// and, on success, writes the application id into Metadata and the
// AuthContext (policies.Identifier). It leaves the request
// untouched. The key is looked up by its SHA-256 digest, so the index never
// compares secret bytes: the lookup's timing depends on the digest, which
// reveals nothing usable about any stored key.
func (p *policy) Identify(c *policies.Call) *gwerror.Error {
	key, found, dup := p.extract(c.Request)
	if dup != "" {
		return unauthorized("ambiguous credentials: the " + dup + " is sent more than once; send one key")
	}
	if !found {
		return unauthorized(p.missingMsg)
	}
	if key == "" {
		return unauthorized("missing API key: the credential is empty")
	}
	cred, ok := p.keys.Lookup(sha256.Sum256([]byte(key)))
	if !ok {
		return unauthorized("invalid API key")
	}
	if p.allowed != nil && !p.allowed[cred.ApplicationID] {
		return gwerror.New(http.StatusForbidden, gwerror.TypePermission, gwerror.CodeApplicationNotAllowed,
			"this application may not use this route")
	}
	sh := c.Shared
	app := any(cred.ApplicationID) // boxed once for both maps
	sh.Metadata[sharedctx.KeyApplicationID] = app
	sh.Auth.Authenticated = true
	sh.Auth.ApplicationID = cred.ApplicationID
	sh.Auth.CredentialID = cred.KeyID
	sh.Auth.Method = AuthMethod
	if sh.Analytics != nil {
		sh.Analytics["application_id"] = app
	}
	return nil
}

// extract returns the key from the first credential source present: the
// configured header (prefix stripped), the alternate headers, the query
// parameter. found is false when none is present. A source present more
// than once (a repeated header, whatever the letter case of its names, or a
// repeated query parameter) is ambiguous: which value counts would depend on
// who reads it, so dup names it ("Authorization header", "key query
// parameter") and the request is refused.
func (p *policy) extract(r *policies.Request) (key string, found bool, dup string) {
	if r == nil {
		return "", false, ""
	}
	for i, h := range p.headers {
		vs := r.Header[h]
		if len(vs) == 0 {
			continue
		}
		if len(vs) > 1 {
			return "", true, h + " header"
		}
		v := strings.TrimSpace(vs[0])
		if i == 0 && p.prefix != "" {
			switch {
			case len(v) >= len(p.prefix) && strings.EqualFold(v[:len(p.prefix)], p.prefix):
				v = strings.TrimSpace(v[len(p.prefix):])
			case strings.EqualFold(v, p.bareScheme):
				// "Bearer" alone: the trailing space went with TrimSpace.
				v = ""
			}
		}
		return v, true, ""
	}
	if p.queryParam != "" {
		if vs, ok := r.Query[p.queryParam]; ok && len(vs) > 0 {
			if len(vs) > 1 {
				return "", true, p.queryParam + " query parameter"
			}
			return strings.TrimSpace(vs[0]), true, ""
		}
	}
	return "", false, ""
}

// strip removes every credential source this policy reads, whichever carried
// the key, so no client credential reaches the provider.
func (p *policy) strip(r *policies.Request) {
	if r == nil {
		return
	}
	for _, h := range p.headers {
		delete(r.Header, h)
	}
	if p.queryParam != "" && r.Query != nil {
		r.Query.Del(p.queryParam)
	}
}

func unauthorized(msg string) *gwerror.Error {
	e := gwerror.New(http.StatusUnauthorized, gwerror.TypeAuthentication, gwerror.CodeInvalidAPIKey, msg)
	e.Header = http.Header{"Www-Authenticate": {`Bearer realm="sluice"`}}
	return e
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
