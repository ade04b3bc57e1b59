// Package api is the platform's REST API under /api/v1. openapi.yaml is the
// source of truth: the types and echo routes in api.gen.go are generated from
// it (go generate; a test fails when they are stale), every request is
// validated against it before its handler runs, and it is served at
// /api/v1/openapi.json. Handlers here implement the generated
// ServerInterface over the store, the generator, the delivery hub and the
// usage service. It imports the platform's store, secrets, generate,
// delivery and usage packages, the deployment document and the policy
// catalog (its chain check); never the gateway.
package api

//go:generate go tool oapi-codegen -config oapi-codegen.yaml openapi.yaml

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/labstack/echo/v4"

	"sluice/platform/budgets"
	"sluice/platform/delivery"
	"sluice/platform/secrets"
	"sluice/platform/store"
	"sluice/platform/usage"
	"sluice/policies"
)

//go:embed openapi.yaml
var specYAML []byte

// BasePath is where the API is served.
const BasePath = "/api/v1"

// Spec loads and validates the embedded OpenAPI document.
func Spec() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	spec, err := loader.LoadFromData(specYAML)
	if err != nil {
		return nil, fmt.Errorf("api: openapi.yaml: %w", err)
	}
	if err := spec.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("api: openapi.yaml is invalid: %w", err)
	}
	return spec, nil
}

// Options configure a Server.
type Options struct {
	Store store.Store
	// Box seals upstream keys (required).
	Box *secrets.Box
	// Hub delivers deployments (required).
	Hub *delivery.Hub
	// Registry checks guardrails and generated chains (required).
	Registry *policies.Registry
	// Usage ingests the gateways' usage records (required).
	Usage *usage.Service
	// Budgets reads the counters (required).
	Budgets *budgets.Reader
	Logger  *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// HTTPClient fetches the providers' usage reports (default: a client
	// of its own with net/http's default transport settings).
	HTTPClient *http.Client
}

// Server implements ServerInterface. Safe for concurrent use.
type Server struct {
	store    store.Store
	box      *secrets.Box
	hub      *delivery.Hub
	reg      *policies.Registry
	usage    *usage.Service
	budgets  *budgets.Reader
	log      *slog.Logger
	now      func() time.Time
	ops      map[string]*operation
	specJSON []byte
	checker  *policies.Checker
	// httpClient fetches provider usage reports.
	httpClient *http.Client
}

var _ ServerInterface = (*Server)(nil)

// New builds a Server.
func New(o Options) (*Server, error) {
	if o.Store == nil || o.Box == nil || o.Hub == nil || o.Registry == nil || o.Usage == nil || o.Budgets == nil {
		return nil, errors.New("api: Store, Box, Hub, Registry, Usage and Budgets are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	spec, err := Spec()
	if err != nil {
		return nil, err
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return &Server{store: o.Store, box: o.Box, hub: o.Hub, reg: o.Registry, usage: o.Usage, budgets: o.Budgets, log: o.Logger, now: o.Now,
		ops: indexOperations(spec, BasePath), specJSON: specJSON, checker: policies.NewChecker(o.Registry),
		httpClient: o.HTTPClient}, nil
}

// Register adds the API's routes under BasePath to e, behind guard, and
// makes e render errors as the API does.
func (s *Server) Register(e *echo.Echo) {
	e.HTTPErrorHandler = errorHandler(s.log)
	g := e.Group(BasePath, s.guard)
	RegisterHandlers(g, s)
	// Unknown paths under the base still go through guard (401 before 404).
	g.Any("/*", func(c echo.Context) error { return echo.ErrNotFound })
}

// Handler returns an http.Handler serving only the API.
func (s *Server) Handler() http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	s.Register(e)
	return e
}

func (s *Server) GetOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, s.specJSON)
}

// --- helpers

// newID is prefix-<12 hex digits>: ids go into counter keys and logs, so
// they are short and plain.
func newID(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

// newSecret is prefix and 160 random bits in hex.
func newSecret(prefix string) string {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// bind decodes the (already validated) JSON body into v.
func bind(c echo.Context, v any) error {
	dec := json.NewDecoder(c.Request().Body)
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return newError(http.StatusBadRequest, "bad_request", "the body is not valid JSON for this operation: %v", err)
	}
	return nil
}

// bindOptional is bind for an optional body: an empty one leaves v alone.
func bindOptional(c echo.Context, v any) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	c.Request().Body = io.NopCloser(bytes.NewReader(body))
	return bind(c, v)
}

// write runs fn in a write transaction and, when it bumped the deployment
// version, tells the hub after the commit.
func (s *Server) write(ctx context.Context, fn func(tx store.Tx) (version int64, err error)) error {
	var v int64
	err := s.store.Write(ctx, func(tx store.Tx) error {
		var err error
		v, err = fn(tx)
		return err
	})
	if err == nil && v > 0 {
		s.hub.Notify(v)
	}
	return err
}

// audit records an admin change in tx. before and after are the API
// representations (never secrets); nil when absent.
func (s *Server) audit(ctx context.Context, c echo.Context, tx store.Tx, action, typ, id string, before, after any) error {
	enc := func(v any) ([]byte, error) {
		if v == nil {
			return nil, nil
		}
		return json.Marshal(v)
	}
	b, err := enc(before)
	if err != nil {
		return err
	}
	a, err := enc(after)
	if err != nil {
		return err
	}
	tokenID, _ := c.Get(ctxTokenID).(string)
	_, err = tx.InsertAudit(ctx, store.AuditEntry{At: s.now(), TokenID: tokenID, Action: action, ResourceType: typ,
		ResourceID: id, Before: b, After: a})
	return err
}

func etag(rev int64) string { return `"` + strconv.FormatInt(rev, 10) + `"` }

// ifMatch reads an If-Match header: the revision it names, or -1 for "*".
func ifMatch(h *string) (int64, error) {
	if h == nil || strings.TrimSpace(*h) == "" {
		return 0, errPreconditionRequired
	}
	v := strings.TrimSpace(*h)
	if v == "*" {
		return -1, nil
	}
	v = strings.Trim(strings.TrimPrefix(v, "W/"), `"`)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errStale
	}
	return n, nil
}

func ptr[T any](v T) *T { return &v }

func timePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
