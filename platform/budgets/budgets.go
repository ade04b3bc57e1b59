// Package budgets reads the remaining budgets of an application from the
// counters the gateways charge, without charging them: it builds the
// current deployment's route chains with the policy registry over a counter
// store and asks every policies.QuotaReporter of each chain, as the gateway
// answers GET {route}/v1/quota, for a call identified as the application.
// Counter keys are never derived here: they are the chains' own.
//
// It imports the platform's store, secrets, delivery and generate packages,
// the deployment document and the policy registry; never the gateway or HTTP.
package budgets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"sluice/counter"
	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/platform/delivery"
	"sluice/platform/generate"
	"sluice/platform/secrets"
	"sluice/platform/store"
	"sluice/policies"
	"sluice/policies/apikeyauth"
	"sluice/sharedctx"
)

// ErrUnknownApplication is returned for an application the store does not
// hold.
var ErrUnknownApplication = errors.New("budgets: unknown application")

// Options configure a Reader.
type Options struct {
	Store    store.Store
	Box      *secrets.Box
	Registry *policies.Registry
	// Counters is the store the gateways charge (the same instance in
	// `sluice serve`, or a Redis store on the same keys); nil: budgets are
	// not available, for Unavailable's reason.
	Counters    counter.Store
	Unavailable string
	// Version, when set, is the current deployment version as the platform
	// knows it (delivery.Hub.Version), read instead of the store's on every
	// call; nil: the store's.
	Version func() int64
	Now     func() time.Time
	Logger  *slog.Logger
}

// Reader peeks budgets. Safe for concurrent use.
type Reader struct {
	o Options

	mu  sync.Mutex
	cur *snapshot
}

// New builds a Reader.
func New(o Options) (*Reader, error) {
	if o.Store == nil || o.Registry == nil {
		return nil, errors.New("budgets: Store and Registry are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Counters == nil && o.Unavailable == "" {
		o.Unavailable = "the platform has no counter store to read"
	}
	return &Reader{o: o}, nil
}

// Available reports whether budgets can be read, and why not.
func (r *Reader) Available() (bool, string) {
	if r.o.Counters == nil {
		return false, r.o.Unavailable
	}
	return true, ""
}

// Line is one counter of one limit that applies to the application.
type Line struct {
	// AppID is the application the line was read for.
	AppID string
	// Provider is the provider's name, Route the route's (the same in
	// generated deployments).
	Provider, Route string
	// Entry is the chain position of the limit policy, Policy its name.
	Entry  int
	Policy string
	// Origin is the chain entry's origin reference: the Rate Limit row's
	// JSON path ("$.consumer.global.token"), a guardrail id, or "".
	Origin string
	// Scope is "consumer" (the application's own counter) or "backend"
	// (shared by every application).
	Scope string
	// Resource is "" for a counter across every resource, else the
	// resource ("/chat/completions").
	Resource string
	// Dimension is "requests", "tokens" or "cost"; Counter the policy's own
	// dimension name ("total", "requests", "cost", ...).
	Dimension, Counter string
	// Period is the human text of the reset period ("1 hour"), Label the
	// policy's ("bucket-1h", "window-1d", "month").
	Period, Label string
	// Unit is "requests", "tokens" or "usd"; Limit and Remaining are in
	// the counter's unit (micro-USD for usd), Remaining negative in debt.
	Unit             string
	Limit, Remaining int64
	ResetAfter       time.Duration
	// At is when the counter was read.
	At time.Time
	// AlertAt are the Rate Limit row's thresholds (percent), Reset its
	// period (zero for a line without a row).
	AlertAt []int
	Reset   generate.Reset
	// Unread is set on a line the counters were not read for (Limits):
	// Remaining and ResetAfter are then unknown (zero).
	Unread bool
}

// Used is the part of the limit used, Limit - Remaining.
func (l *Line) Used() int64 { return l.Limit - l.Remaining }

// UsedPercent is Used as a percent of Limit (above 100 in debt).
func (l *Line) UsedPercent() float64 {
	if l.Limit <= 0 {
		return 0
	}
	return float64(l.Used()) * 100 / float64(l.Limit)
}

// ResetsAt is At + ResetAfter, rounded up to the second, UTC.
func (l *Line) ResetsAt() time.Time {
	t := l.At.Add(max(l.ResetAfter, 0)).UTC()
	if tr := t.Truncate(time.Second); !tr.Equal(t) {
		return tr.Add(time.Second)
	}
	return t
}

// WindowEnd names the window the line's counter is in at At, stably
// across reads of one window (alerts fire once per window): for a fixed or
// calendar window its end; for a token bucket, which has no window, the
// end of the period-long slot, aligned on the Unix epoch, that At falls in.
// From the Rate Limit row's period when the line has one, else from the
// counter (At + ResetAfter rounded to the minute; windows start on whole
// minutes).
func (l *Line) WindowEnd() time.Time {
	if d, alg, err := l.Reset.Period(); err == nil {
		switch {
		case alg == "token-bucket":
			return l.At.Truncate(d).Add(d).UTC()
		case l.Reset.Unit == generate.Month:
			_, end := counter.WindowBounds(counter.CalendarMonth, d, l.At.UnixMicro())
			return time.UnixMicro(end).UTC()
		default:
			_, end := counter.WindowBounds(counter.FixedWindow, d, l.At.UnixMicro())
			return time.UnixMicro(end).UTC()
		}
	}
	if p, ok := bucketPeriod(l.Label); ok {
		return l.At.Truncate(p).Add(p).UTC()
	}
	return l.At.Add(max(l.ResetAfter, 0)).Round(time.Minute).UTC()
}

// bucketPeriod reads a token bucket's period from its label ("bucket-1h").
func bucketPeriod(label string) (time.Duration, bool) {
	s, ok := strings.CutPrefix(label, "bucket-")
	if !ok || s == "" {
		return 0, false
	}
	unit := map[byte]time.Duration{'d': 24 * time.Hour, 'h': time.Hour, 'm': time.Minute, 's': time.Second}[s[len(s)-1]]
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	if unit == 0 || err != nil || n <= 0 {
		d, err := time.ParseDuration(s)
		return d, err == nil && d > 0
	}
	return time.Duration(n) * unit, true
}

// Report is the budgets of one application.
type Report struct {
	Available bool
	Reason    string
	Lines     []Line
}

// Application peeks every limit that applies to application appID on each
// provider it is granted (only provider, a provider name, when not "").
// Lines come in provider order, then chain order, then resource order.
// Nothing is charged and no counter state is created. ErrUnknownApplication
// when the store does not hold appID.
func (r *Reader) Application(ctx context.Context, appID, provider string) (Report, error) {
	s, err := r.acquire(ctx)
	if err != nil {
		return Report{}, err
	}
	defer r.release(s)
	app, ok := s.apps[appID]
	if !ok {
		return Report{}, ErrUnknownApplication
	}
	avail, reason := r.Available()
	rep := Report{Available: avail, Reason: reason, Lines: []Line{}}
	if !avail {
		return rep, nil
	}
	for _, rt := range s.routes {
		if !app[rt.providerID] || (provider != "" && rt.provider != provider) {
			continue
		}
		rep.Lines = append(rep.Lines, r.peek(ctx, s, rt, appID)...)
	}
	return rep, nil
}

// Limits lists the Rate Limit rows that apply to application appID on
// provider (a name), as lines whose counters were not read (Unread): what
// the alerts of a denial need when the counters cannot be read. A
// per-resource row attached to one resource names it; one attached to
// several (a default) has resource "".
func (r *Reader) Limits(ctx context.Context, appID, provider string) ([]Line, error) {
	s, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer r.release(s)
	app, ok := s.apps[appID]
	if !ok {
		return nil, ErrUnknownApplication
	}
	var out []Line
	for _, rt := range s.routes {
		if !app[rt.providerID] || rt.provider != provider {
			continue
		}
		for i, o := range rt.origins {
			row, ok := rt.rows[o.Ref]
			if o.Kind != generate.OriginRateLimit || !ok || i >= len(rt.doc.Policies) {
				continue
			}
			e := rt.doc.Policies[i]
			l := Line{AppID: appID, Provider: rt.provider, Route: rt.name, Entry: i, Policy: e.Name, Origin: o.Ref,
				Scope: "backend", Period: row.Reset.Text(), Limit: row.Limit, At: r.o.Now(), AlertAt: row.AlertAt,
				Reset: row.Reset, Unread: true}
			if strings.HasPrefix(o.Ref, "$.consumer") {
				l.Scope = "consumer"
			}
			if e.Resources != nil && len(e.Resources.Include) == 1 {
				l.Resource = e.Resources.Include[0]
			}
			switch {
			case strings.HasSuffix(o.Ref, ".request"):
				l.Dimension, l.Unit = "requests", "requests"
			case strings.HasSuffix(o.Ref, ".cost"):
				l.Dimension, l.Unit = "cost", "usd"
			default:
				l.Dimension, l.Unit = "tokens", "tokens"
			}
			out = append(out, l)
		}
	}
	return out, nil
}

// peek reports rt's counters for appID: the chain is asked once per
// resource (entries may be attached to some, and per-resource limits keep
// one counter each); a counter seen for several resources is one line.
func (r *Reader) peek(ctx context.Context, s *snapshot, rt *route, appID string) []Line {
	type seenKey struct {
		entry            int
		scope, dimension string
	}
	seen := map[seenKey]bool{}
	var out []Line
	filtered := false
	for _, e := range rt.chain.Entries() {
		filtered = filtered || e.Resources != nil
	}
	for k, res := range deployment.ResourceNames {
		if k > 0 && !filtered && !slices.ContainsFunc(out, func(l Line) bool { return l.Resource != "" }) {
			break // every entry runs for every resource, and no counter is per resource
		}
		call := identified(ctx, rt, appID, res, r.o.Now())
		for _, e := range rt.chain.EntriesFor(call) {
			qr, ok := e.Policy.(policies.QuotaReporter)
			if !ok {
				continue
			}
			at := r.o.Now()
			for _, q := range qr.Quota(call) {
				k := seenKey{e.Route.Position, q.Scope, q.Dimension}
				if seen[k] {
					continue
				}
				seen[k] = true
				out = append(out, rt.line(e, q, appID, res, at))
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Line) int { return a.Entry - b.Entry })
	return out
}

// identified is a call on rt's resource res identified as appID the way
// api-key-auth identifies a caller, without a key.
func identified(ctx context.Context, rt *route, appID, res string, now time.Time) *policies.Call {
	sh := sharedctx.New("budgets", rt.name, rt.name, rt.provider)
	sh.Metadata[sharedctx.KeyApplicationID] = appID
	sh.Auth = sharedctx.AuthContext{Authenticated: true, ApplicationID: appID, Method: apikeyauth.AuthMethod}
	sh.Analytics["application_id"] = appID
	return &policies.Call{
		Ctx: ctx, Shared: sh,
		Request:      &policies.Request{Method: http.MethodPost, Path: "/v1" + res, Header: http.Header{}},
		ClientHeader: http.Header{},
		Started:      now,
		Identified:   true,
	}
}

func (rt *route) line(e *policies.Entry, q policies.QuotaLine, appID, res string, at time.Time) Line {
	l := Line{
		AppID: appID, Provider: rt.provider, Route: rt.name, Entry: e.Route.Position, Policy: q.Policy,
		Scope: "backend", Counter: q.Dimension, Label: q.Period, Period: q.Period,
		Unit: string(q.Unit), Limit: q.Limit, Remaining: q.Remaining, ResetAfter: q.ResetAfter, At: at,
	}
	if strings.HasSuffix(q.Scope, ":"+appID) {
		l.Scope = "consumer"
	}
	// Route names hold no "/": a per-resource counter's scope is the route
	// name followed by the resource.
	if strings.HasPrefix(q.Scope, rt.name+"/") {
		l.Resource = res
	}
	switch q.Unit {
	case policies.UnitUSDMicros:
		l.Unit, l.Dimension = "usd", "cost"
	case policies.UnitRequests:
		l.Dimension = "requests"
	default:
		l.Dimension = "tokens"
	}
	if e.Route.Position < len(rt.origins) {
		o := rt.origins[e.Route.Position]
		l.Origin = o.Ref
		if row, ok := rt.rows[o.Ref]; ok && o.Kind == generate.OriginRateLimit {
			l.Period, l.AlertAt, l.Reset = row.Reset.Text(), row.AlertAt, row.Reset
		}
	}
	return l
}

// snapshot is one deployment version's chains, built over the counter
// store. refs counts the reads using it; a retired snapshot's chains are
// closed when the last one ends.
type snapshot struct {
	version int64
	routes  []*route
	// apps holds each application's granted provider ids.
	apps    map[string]map[string]bool
	refs    int
	retired bool
}

type route struct {
	name, provider, providerID string
	// chain is nil without a counter store.
	chain   *policies.Chain
	doc     *deployment.Route
	origins []generate.Origin
	rows    map[string]generate.Row
}

// acquire returns the current version's snapshot, built when the version
// changed; the caller releases it.
func (r *Reader) acquire(ctx context.Context) (*snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var v int64
	if r.o.Version != nil {
		v = r.o.Version()
	} else if err := r.o.Store.Read(ctx, func(tx store.Tx) (err error) {
		v, err = tx.Version(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	if r.cur == nil || r.cur.version < v || (r.o.Version == nil && r.cur.version != v) {
		s, err := r.build(ctx)
		if err != nil {
			return nil, err
		}
		if old := r.cur; old != nil {
			old.retired = true
			if old.refs == 0 {
				r.close(old)
			}
		}
		r.cur = s
	}
	r.cur.refs++
	return r.cur, nil
}

func (r *Reader) release(s *snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.refs--
	if s.retired && s.refs == 0 {
		r.close(s)
	}
}

func (r *Reader) close(s *snapshot) {
	for _, rt := range s.routes {
		if rt.chain == nil {
			continue
		}
		if err := rt.chain.Close(); err != nil {
			r.o.Logger.Warn("closing a budgets chain", "route", rt.name, "error", err)
		}
	}
}

// Close closes the current snapshot's chains once no read uses them.
func (r *Reader) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.cur; s != nil {
		r.cur = nil
		s.retired = true
		if s.refs == 0 {
			r.close(s)
		}
	}
}

// build renders the current deployment as gateways receive it (generated,
// rendered and parsed again, so that every params value is what the
// gateway's chain is built from) and builds its chains over the counter
// store.
func (r *Reader) build(ctx context.Context) (*snapshot, error) {
	var set generate.Settings
	var v int64
	err := r.o.Store.Read(ctx, func(tx store.Tx) (err error) {
		if v, err = tx.Version(ctx); err != nil {
			return err
		}
		set, err = delivery.LoadSettings(ctx, tx, delivery.Secrets{Box: r.o.Box, Redact: true}, r.o.Now())
		return err
	})
	if err != nil {
		return nil, err
	}
	s := &snapshot{version: v, apps: map[string]map[string]bool{}}
	for _, a := range set.Applications {
		g := map[string]bool{}
		for _, p := range a.Providers {
			g[p] = true
		}
		s.apps[a.ID] = g
	}
	res, err := generate.Generate(set)
	if err != nil {
		return nil, fmt.Errorf("budgets: generating deployment version %d: %w", v, err)
	}
	text, err := yamlfile.Loadable(res.Deployment)
	if err != nil {
		return nil, err
	}
	d, err := yamlfile.ParseRendered(text, fmt.Sprintf("deployment version %d", v))
	if err != nil {
		return nil, err
	}
	svc := policies.StandInServices()
	svc.Counters, svc.Now, svc.Logger = r.o.Counters, r.o.Now, r.o.Logger
	for i, rt := range d.Routes {
		p := set.Providers[i]
		x := &route{name: rt.Name, provider: rt.Provider, providerID: p.ID, doc: &d.Routes[i],
			origins: res.Origins[rt.Name], rows: p.RateLimits.Rows()}
		if r.o.Counters != nil {
			if x.chain, err = r.o.Registry.BuildRoute(d, i, svc); err != nil {
				r.close(s)
				return nil, fmt.Errorf("budgets: building route %q: %w", rt.Name, err)
			}
		}
		s.routes = append(s.routes, x)
	}
	return s, nil
}

// Amount writes a counter amount in unit: micro-USD ("usd") as a decimal
// number of dollars, else the integer.
func Amount(unit string, n int64) string {
	if unit == "usd" {
		return policies.USDMicrosDecimal(n)
	}
	return strconv.FormatInt(n, 10)
}
