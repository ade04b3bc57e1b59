// Package platform is Sluice's control plane service: it opens the store
// (SQLite in the data directory, or PostgreSQL), the secrets box and the
// admin token, and serves the REST API (platform/api), deployment delivery
// (platform/delivery) and usage ingest (platform/usage) over HTTP. Below it:
// store (SQLite and PostgreSQL), api (spec-first REST API), generate (Rate
// Limit settings and guardrails to a deployment document), delivery
// (long-poll hub), usage (ingest, rollups, retention), budgets (remaining
// budgets peeked from the counters), alerts (budget alerts and their
// webhook outbox), secrets.
//
// Import rule (docs/architecture.md, checked by internal/layout): the
// platform imports its own subpackages, the deployment document
// (deployment, deployment/yamlfile), the policy registry and its dry-run
// check (policies), the usage record (meter), counter/counterconfig (to
// compare and describe the counters setting) and the leaves; never the
// gateway: gateways meet it at the deployment document, fetched over HTTP
// or, in `sluice serve`, through Platform's methods. The wiring
// (internal/app) assembles it.
package platform

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"sluice/counter"
	"sluice/counter/counterconfig"
	"sluice/deployment"
	"sluice/platform/alerts"
	"sluice/platform/api"
	"sluice/platform/budgets"
	"sluice/platform/delivery"
	"sluice/platform/secrets"
	"sluice/platform/store"
	"sluice/platform/usage"
	"sluice/policies"
)

// DefaultDataDir is the data directory on a fresh machine.
const DefaultDataDir = "sluice-data"

// AdminTokenPrefix starts every generated admin token.
const AdminTokenPrefix = "sluice-admin-"

// Options configure a Platform.
type Options struct {
	// DataDir holds the SQLite file and the secret key file (default
	// DefaultDataDir).
	DataDir string
	// DatabaseURL, when set (postgres://...), is used instead of SQLite.
	DatabaseURL string
	// AdminToken is SLUICE_ADMIN_TOKEN: the admin token to accept (stored
	// hashed, replacing the previous one from the environment). Empty: a
	// token is generated at the first start and written once to Announce.
	AdminToken string
	// SecretKey is SLUICE_SECRET_KEY (see platform/secrets).
	SecretKey string
	// Announce receives the one-time admin token message (default io.Discard).
	Announce io.Writer
	Registry *policies.Registry
	Logger   *slog.Logger
	Now      func() time.Time
	// WatchEvery is how often the store's version is polled for changes made
	// by other platform replicas (default 1s).
	WatchEvery time.Duration
	// Console, when set, serves every GET the API and /healthz do not (the
	// web console, package webui).
	Console http.Handler
	// UsageRetention is how long raw usage records are kept (default
	// usage.DefaultRetention, 30 days; negative: forever). Rollups are kept
	// forever.
	UsageRetention time.Duration
	// RetainEvery is how often retention runs (default 1h; also at start).
	RetainEvery time.Duration
	// Counters is the counters section of every generated deployment: the
	// zero value (or backend memory) leaves it out, and each gateway counts
	// in memory; a Redis store makes every limit one counter across all the
	// gateways. It must pass CountersProblems. A value that differs from the
	// stored one (the previous start's) is stored and is a new deployment
	// version (counters.go).
	Counters deployment.Counters
	// CounterStore is the counter store the platform reads budgets from
	// (peeks only; it stays the caller's): in `sluice serve`, the in-process
	// gateway's. Nil: with a Redis Counters setting the platform opens its
	// own store on it (same keys, closed by Close); with memory counters
	// budgets are not available.
	CounterStore counter.Store
	// Alerts tunes the budget alerts' delivery (tests); Store, Box,
	// Budgets, Now, Logger and Metrics are the platform's.
	Alerts alerts.Options
}

// Platform is a running control plane.
type Platform struct {
	store store.Store
	hub   *delivery.Hub
	api   *api.Server
	usage *usage.Service
	// budgets reads the counters; closers are what the platform opened for
	// it (its own Redis store).
	budgets *budgets.Reader
	closers []func() error
	echo    *echo.Echo
	now     func() time.Time
	stop    context.CancelFunc
	// done counts the background loops (version watch, usage retention).
	done sync.WaitGroup
}

// Open opens the store (applying migrations), the secrets and the admin
// token, and builds the API.
func Open(ctx context.Context, o Options) (*Platform, error) {
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Announce == nil {
		o.Announce = io.Discard
	}
	if o.WatchEvery <= 0 {
		o.WatchEvery = time.Second
	}
	if o.RetainEvery <= 0 {
		o.RetainEvery = time.Hour
	}
	if o.Registry == nil {
		return nil, errors.New("platform: Options.Registry is required")
	}
	if ps := CountersProblems(o.Counters); len(ps) > 0 {
		return nil, fmt.Errorf("platform: Options.Counters: %w", ps)
	}
	dsn := o.DatabaseURL
	if dsn == "" {
		dsn = filepath.Join(o.DataDir, store.SQLiteFile)
	}
	st, err := store.Open(ctx, dsn, o.Logger)
	if err != nil {
		return nil, err
	}
	p, err := build(ctx, st, o)
	if err != nil {
		st.Close()
		return nil, err
	}
	return p, nil
}

func build(ctx context.Context, st store.Store, o Options) (*Platform, error) {
	box, err := secrets.Load(o.SecretKey, o.DataDir)
	if err != nil {
		return nil, err
	}
	if err := bootstrapAdmin(ctx, st, o); err != nil {
		return nil, err
	}
	if err := syncCounters(ctx, st, box, o); err != nil {
		return nil, err
	}
	hub, err := delivery.NewHub(ctx, st, box, o.Now, o.Logger)
	if err != nil {
		return nil, err
	}
	counters, closers, reason, err := budgetCounters(o)
	if err != nil {
		return nil, err
	}
	closeAll := func() {
		for _, c := range closers {
			_ = c()
		}
	}
	reader, err := budgets.New(budgets.Options{Store: st, Box: box, Registry: o.Registry, Counters: counters, Unavailable: reason,
		Version: hub.Version, Now: o.Now, Logger: o.Logger})
	if err != nil {
		closeAll()
		return nil, err
	}
	reg := prometheus.NewRegistry()
	ao := o.Alerts
	ao.Store, ao.Box, ao.Budgets, ao.Now, ao.Logger, ao.Metrics = st, box, reader, o.Now, o.Logger, reg
	alertSvc, err := alerts.New(ao)
	if err != nil {
		closeAll()
		return nil, err
	}
	usageSvc, err := usage.New(usage.Options{Store: st, Retention: o.UsageRetention, Now: o.Now, Logger: o.Logger,
		Stored: alertSvc.Observe})
	if err != nil {
		closeAll()
		return nil, err
	}
	srv, err := api.New(api.Options{Store: st, Box: box, Hub: hub, Registry: o.Registry, Usage: usageSvc, Budgets: reader,
		Logger: o.Logger, Now: o.Now})
	if err != nil {
		closeAll()
		return nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") })
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	srv.Register(e)
	if o.Console != nil {
		e.Match([]string{http.MethodGet, http.MethodHead}, "/*", echo.WrapHandler(o.Console))
	}
	wctx, stop := context.WithCancel(context.Background())
	p := &Platform{store: st, hub: hub, api: srv, usage: usageSvc, budgets: reader, closers: closers, echo: e, now: o.Now, stop: stop}
	p.done.Add(3)
	go func() {
		defer p.done.Done()
		alertSvc.Run(wctx)
	}()
	go func() {
		defer p.done.Done()
		hub.Watch(wctx, o.WatchEvery)
	}()
	go func() {
		defer p.done.Done()
		usageSvc.Maintain(wctx, o.RetainEvery)
	}()
	return p, nil
}

// bootstrapAdmin installs the environment's admin token, or generates one
// when the store has none.
func bootstrapAdmin(ctx context.Context, st store.Store, o Options) error {
	return st.Write(ctx, func(tx store.Tx) error {
		if o.AdminToken != "" {
			return tx.SetAdminTokenHash(ctx, store.AdminToken{ID: "env", Name: "SLUICE_ADMIN_TOKEN",
				Hash: api.TokenHash(o.AdminToken), CreatedAt: o.Now()})
		}
		n, err := tx.CountAdminTokens(ctx)
		if err != nil || n > 0 {
			return err
		}
		token := AdminTokenPrefix + randomHex(20)
		if err := tx.InsertAdminToken(ctx, store.AdminToken{ID: "adm-" + randomHex(6), Name: "generated at first start",
			Hash: api.TokenHash(token), CreatedAt: o.Now()}); err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.Announce, "sluice platform: admin token (shown once, stored hashed): %s\n", token)
		return err
	})
}

// Handler serves /healthz, the API under /api/v1 and the console at /.
func (p *Platform) Handler() http.Handler { return p.echo }

// Close stops the version watch and the usage retention and closes the
// store.
func (p *Platform) Close() error {
	p.stop()
	p.done.Wait()
	p.budgets.Close()
	var errs []error
	for _, c := range p.closers {
		errs = append(errs, c())
	}
	return errors.Join(append(errs, p.store.Close())...)
}

// MemoryCountersReason is why a platform without a counter store of its
// own cannot report budgets.
const MemoryCountersReason = "counters are kept in each gateway's memory, which the platform cannot read: " +
	"run the platform with --counters-redis (every gateway then counts in that Redis), or use sluice serve, " +
	"whose platform reads its in-process gateway's counters"

// budgetCounters is the counter store budgets are read from (see
// Options.CounterStore), what to close with the platform, and the reason
// when there is none.
func budgetCounters(o Options) (counter.Store, []func() error, string, error) {
	if o.CounterStore != nil {
		return o.CounterStore, nil, "", nil
	}
	c := normalCounters(o.Counters)
	if c.Backend != counterconfig.Redis {
		return nil, nil, MemoryCountersReason, nil
	}
	st, err := counterconfig.New(c, counterconfig.Options{Logger: o.Logger, Now: o.Now})
	if err != nil {
		return nil, nil, "", fmt.Errorf("platform: opening the counters to read budgets: %w", err)
	}
	return st, []func() error{st.Close}, "", nil
}

// Deployment waits up to wait for a deployment newer than after and returns
// it (nil when none came): the in-process equivalent of GET
// /api/v1/gateway/deployment.
func (p *Platform) Deployment(ctx context.Context, after int64, wait time.Duration) (*delivery.Document, error) {
	if _, ok := p.hub.Wait(ctx, after, wait); !ok {
		return nil, ctx.Err()
	}
	doc, err := p.hub.Current(ctx)
	if err != nil || doc.Version <= after {
		return nil, err
	}
	return doc, nil
}

// RegisterLocalGateway records the in-process gateway of `sluice serve`
// (a gateway without a token) so that its state shows in the API.
func (p *Platform) RegisterLocalGateway(ctx context.Context, id, name string) error {
	return p.store.Write(ctx, func(tx store.Tx) error {
		if _, err := tx.GetGateway(ctx, id); err == nil {
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return tx.InsertGateway(ctx, store.Gateway{ID: id, Name: name, CreatedAt: p.now()})
	})
}

// IngestUsage stores a batch of usage records (JSON lines) of the gateway
// id, as POST /api/v1/gateway/usage does: the in-process gateway of
// `sluice serve` ships its spool through it.
func (p *Platform) IngestUsage(ctx context.Context, id string, body []byte) error {
	recs, err := usage.DecodeBatch(body)
	if err != nil {
		return err
	}
	_, err = p.usage.Ingest(ctx, id, recs)
	return err
}

// Report records a check-in of the gateway id.
func (p *Platform) Report(ctx context.Context, id string, st delivery.Status) error {
	return p.hub.Report(ctx, id, st)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b)
}
