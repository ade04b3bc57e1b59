package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/labstack/echo/v4"

	"sluice/platform/store"
	"sluice/platform/usage"
)

// maxBodyBytes bounds a request body, except those of maxBody's
// operations.
const maxBodyBytes = 1 << 20

// maxBody is the body limit of the operation named operationID.
func maxBody(operationID string) int64 {
	if operationID == "ingestUsage" {
		return usage.MaxBatchBytes
	}
	return maxBodyBytes
}

// Context keys set by guard.
const (
	ctxTokenID   = "sluice.admin-token-id"
	ctxGatewayID = "sluice.gateway-id"
)

// operation is one documented operation, found by echo's route.
type operation struct {
	route *routers.Route
	// auth is "admin", "gateway" or "" (none).
	auth string
	// maxBody bounds the request body, in bytes.
	maxBody int64
}

// indexOperations maps "METHOD echo-path" to the document's operations.
func indexOperations(spec *openapi3.T, base string) map[string]*operation {
	out := map[string]*operation{}
	for path, item := range spec.Paths.Map() {
		for method, op := range item.Operations() {
			sec := spec.Security
			if op.Security != nil {
				sec = *op.Security
			}
			auth := ""
			for _, req := range sec {
				for name := range req {
					switch name {
					case "adminToken":
						auth = "admin"
					case "gatewayToken":
						auth = "gateway"
					}
				}
			}
			echoPath := base + strings.NewReplacer("{", ":", "}", "").Replace(path)
			out[method+" "+echoPath] = &operation{
				route:   &routers.Route{Spec: spec, Path: path, PathItem: item, Method: method, Operation: op},
				auth:    auth,
				maxBody: maxBody(op.OperationID),
			}
		}
	}
	return out
}

// guard authenticates and validates every request before its handler: the
// token the operation's security names (401 without it), a body of at most
// the operation's maxBody, then the request against the OpenAPI document (422 with the
// JSON path of each problem; 400 for a body that is not JSON). Paths the
// document does not list still need an admin token before they get their 404.
func (s *Server) guard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		op := s.ops[req.Method+" "+c.Path()]
		auth := "admin"
		if op != nil {
			auth = op.auth
		}
		switch auth {
		case "admin":
			id, err := s.adminToken(req.Context(), bearer(req))
			if err != nil {
				return err
			}
			c.Set(ctxTokenID, id)
		case "gateway":
			id, err := s.gatewayToken(req.Context(), bearer(req))
			if err != nil {
				return err
			}
			c.Set(ctxGatewayID, id)
		}
		if op == nil {
			return next(c)
		}
		if req.Body != nil && req.Body != http.NoBody {
			body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, op.maxBody))
			if err != nil {
				return newError(http.StatusRequestEntityTooLarge, "request_too_large", "the body exceeds %d bytes", op.maxBody)
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
		params := map[string]string{}
		for i, name := range c.ParamNames() {
			params[name] = c.ParamValues()[i]
		}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: op.route,
			Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
			return validationError(err)
		}
		if req.GetBody != nil {
			req.Body, _ = req.GetBody()
		}
		return next(c)
	}
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// TokenHash is the stored form of an admin or gateway token.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (s *Server) adminToken(ctx context.Context, token string) (string, error) {
	if token == "" {
		return "", errUnauthorized
	}
	var id string
	err := s.store.Read(ctx, func(tx store.Tx) error {
		t, err := tx.AdminTokenByHash(ctx, TokenHash(token))
		if err != nil {
			return err
		}
		if t.RevokedAt != nil {
			return store.ErrNotFound
		}
		id = t.ID
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return "", errUnauthorized
	}
	return id, err
}

func (s *Server) gatewayToken(ctx context.Context, token string) (string, error) {
	if token == "" {
		return "", errUnauthorized
	}
	var id string
	err := s.store.Read(ctx, func(tx store.Tx) error {
		g, err := tx.GatewayByTokenHash(ctx, TokenHash(token))
		if err != nil {
			return err
		}
		if g.RevokedAt != nil {
			return store.ErrNotFound
		}
		id = g.ID
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return "", errUnauthorized
	}
	return id, err
}

// validationError turns the validator's errors into one 422 listing every
// problem with its JSON path ($.a.b[0] in the body; query.x, header.X,
// path.x for parameters), or a 400 when the body is not JSON at all.
func validationError(err error) error {
	var problems []Problem
	badJSON := ""
	var walk func(err error, prefix string)
	walk = func(err error, prefix string) {
		switch e := err.(type) {
		case openapi3.MultiError:
			for _, x := range e {
				walk(x, prefix)
			}
			return
		case *openapi3filter.RequestError:
			p := "$"
			if e.Parameter != nil {
				p = e.Parameter.In + "." + e.Parameter.Name
			}
			var pe *openapi3filter.ParseError
			if e.RequestBody != nil && errors.As(e.Err, &pe) {
				badJSON = "not valid JSON: " + pe.Error()
				return
			}
			if e.Err == nil {
				problems = append(problems, Problem{Path: p, Message: e.Reason})
				return
			}
			walk(e.Err, p)
			return
		case *openapi3.SchemaError:
			problems = append(problems, Problem{Path: jsonPath(prefix, e.JSONPointer()), Message: e.Reason})
			return
		}
		var se *openapi3.SchemaError
		if errors.As(err, &se) {
			problems = append(problems, Problem{Path: jsonPath(prefix, se.JSONPointer()), Message: se.Reason})
			return
		}
		problems = append(problems, Problem{Path: prefix, Message: err.Error()})
	}
	walk(err, "$")
	if badJSON != "" {
		return &apiError{status: http.StatusBadRequest, code: "bad_request", message: badJSON}
	}
	return invalid(dedupe(problems))
}

func dedupe(ps []Problem) []Problem {
	seen := map[Problem]bool{}
	out := ps[:0]
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// jsonPath writes a JSON pointer's segments as a JSON path: numeric
// segments are list indexes.
func jsonPath(prefix string, segs []string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, s := range segs {
		if _, err := strconv.Atoi(s); err == nil {
			b.WriteString("[" + s + "]")
			continue
		}
		b.WriteString("." + s)
	}
	return b.String()
}
