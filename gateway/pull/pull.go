// Package pull is the gateway's platform deployment source: it takes
// deployments from a Feed (the platform's long-poll API, or the platform in
// the same process), applies each new version through a callback (the
// gateway's build-then-swap), reports the result and the keys' last use, and
// keeps the last good copy in a Cache so that a restart while the platform is
// down serves it. It imports the deployment document (deployment and
// deployment/yamlfile) and the policy contract; never the platform.
package pull

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"sluice/deployment"
	"sluice/deployment/yamlfile"
)

// Update is one deployment version.
type Update struct {
	Version int64
	// Document is the deployment as `sluice gateway --config` reads it
	// (the platform escapes ${, so nothing is expanded from the
	// environment).
	Document []byte
}

// Status is one check-in.
type Status struct {
	Version int64
	// Result is "applied" or "failed".
	Result       string
	Error        string
	KeysLastUsed map[string]time.Time
}

// Feed is where deployments come from.
type Feed interface {
	// Next returns the deployment when its version is above after, waiting
	// up to wait for one; nil (and no error) when none came.
	Next(ctx context.Context, after int64, wait time.Duration) (*Update, error)
	Report(ctx context.Context, s Status) error
}

// Parse reads an update's document (no environment expansion).
func Parse(u *Update, source string) (*deployment.Deployment, error) {
	return yamlfile.ParseRendered(u.Document, source)
}

// Source applies a Feed's deployments. Run it on one goroutine.
type Source struct {
	Feed Feed
	// Cache, when set, keeps the last applied deployment across restarts.
	Cache *Cache
	// Apply swaps in a deployment (the gateway's Apply); it must leave the
	// running one in place when it fails.
	Apply func(d *deployment.Deployment) error
	// Keys reports the keys' last use with each check-in (nil: none).
	Keys   *KeyUsage
	Logger *slog.Logger
	// Wait is the long-poll wait (default 30s); ReportEvery the check-in
	// period when nothing changes (default 10s); Backoff the first wait
	// after a failed poll, doubled up to 8 times its value (default 250ms,
	// so a platform that is back is polled again within 2s).
	Wait, ReportEvery, Backoff time.Duration

	mu sync.Mutex
	// version is the version being served; pollAfter the poll position: at
	// least version, and a refused version once seen (it is not fetched
	// again, the next poll waits for a newer one).
	version, pollAfter int64
	// last is the latest outcome, reported at once and with every heartbeat.
	last Status
	kick chan struct{}
}

func (s *Source) defaults() {
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Wait <= 0 {
		s.Wait = 30 * time.Second
	}
	if s.ReportEvery <= 0 {
		s.ReportEvery = 10 * time.Second
	}
	if s.Backoff <= 0 {
		s.Backoff = 250 * time.Millisecond
	}
	if s.kick == nil {
		s.kick = make(chan struct{}, 1)
	}
}

// Initial returns the first deployment: from the feed when it answers
// within timeout, else from the cache (cached is true). It does not apply
// it; call Started once it is applied.
func (s *Source) Initial(ctx context.Context, timeout time.Duration) (d *deployment.Deployment, u *Update, cached bool, err error) {
	s.defaults()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for wait := s.Backoff; ; wait = min(2*wait, 2*time.Second) {
		u, err := s.Feed.Next(tctx, 0, 0)
		if err == nil && u != nil {
			d, err := Parse(u, fmt.Sprintf("platform deployment v%d", u.Version))
			if err != nil {
				return nil, nil, false, fmt.Errorf("the platform's deployment v%d does not load: %w", u.Version, err)
			}
			return d, u, false, nil
		}
		if err == nil {
			err = errors.New("the platform has no deployment")
		}
		lastErr = err
		select {
		case <-tctx.Done():
		case <-time.After(wait):
			continue
		}
		break
	}
	if s.Cache == nil {
		return nil, nil, false, fmt.Errorf("platform unreachable (%v) and no cache", lastErr)
	}
	u, err = s.Cache.Load()
	if err != nil {
		return nil, nil, false, fmt.Errorf("platform unreachable (%v); cache: %w", lastErr, err)
	}
	d, err = Parse(u, fmt.Sprintf("cached deployment v%d (%s)", u.Version, s.Cache.Path))
	if err != nil {
		return nil, nil, false, fmt.Errorf("platform unreachable (%v); the cached deployment does not load: %w", lastErr, err)
	}
	s.Logger.Warn("platform unreachable: serving the cached deployment", "version", u.Version, "cache", s.Cache.Path, "error", lastErr)
	return d, u, true, nil
}

// Started records that u (from Initial) is applied: it is reported, and
// cached unless it came from the cache.
func (s *Source) Started(u *Update, cached bool) {
	s.defaults()
	s.record(Status{Version: u.Version, Result: "applied"}, true)
	if !cached && s.Cache != nil {
		if err := s.Cache.Save(u); err != nil {
			s.Logger.Warn("could not cache the deployment", "error", err)
		}
	}
}

// Version is the version being served.
func (s *Source) Version() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// record notes an outcome; served says the version is now the one served.
func (s *Source) record(st Status, served bool) {
	s.mu.Lock()
	if served {
		s.version = st.Version
	}
	s.pollAfter = max(s.pollAfter, st.Version)
	s.last = st
	s.mu.Unlock()
	s.kickReport()
}

func (s *Source) kickReport() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run polls and reports until ctx is done. A failed poll (platform down,
// token refused) keeps the running deployment and retries with backoff;
// the first poll after a failure asks for the full deployment (after=0)
// and applies it if its version differs from the one served, so a platform
// restored from an older database is followed too.
func (s *Source) Run(ctx context.Context) {
	s.defaults()
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		s.reportLoop(ctx)
	}()
	defer func() { <-reported }()
	backoff := s.Backoff
	resync := false
	failures := 0
	for ctx.Err() == nil {
		s.mu.Lock()
		after, refused := s.pollAfter, s.pollAfter > s.version
		s.mu.Unlock()
		if resync {
			after = 0
		}
		u, err := s.Feed.Next(ctx, after, s.Wait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if failures == 1 || failures%20 == 0 {
				s.Logger.Warn("platform unreachable; serving the last good deployment", "version", s.Version(), "error", err, "failures", failures)
			}
			resync = true
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 8*s.Backoff)
			continue
		}
		if failures > 0 {
			s.Logger.Info("platform reachable again", "after_failures", failures)
		}
		failures, backoff, resync = 0, s.Backoff, false
		if u == nil || u.Version == s.Version() || (refused && u.Version == after) {
			continue
		}
		s.apply(u)
	}
}

func (s *Source) apply(u *Update) {
	d, err := Parse(u, fmt.Sprintf("platform deployment v%d", u.Version))
	if err == nil {
		err = s.Apply(d)
	}
	if err != nil {
		s.Logger.Error("the platform's deployment was not applied; keeping the running one", "version", u.Version, "running", s.Version(), "error", err)
		s.record(Status{Version: u.Version, Result: "failed", Error: err.Error()}, false)
		return
	}
	s.Logger.Info("deployment applied", "version", u.Version, "routes", len(d.Routes))
	// Cached before it is recorded: once Version (and the platform's
	// report) says u is served, a restart without the platform serves u too.
	if s.Cache != nil {
		if err := s.Cache.Save(u); err != nil {
			s.Logger.Warn("could not cache the deployment", "error", err)
		}
	}
	s.record(Status{Version: u.Version, Result: "applied"}, true)
}

// reportLoop sends a check-in after each outcome and every ReportEvery, with
// the keys used since the last successful one.
func (s *Source) reportLoop(ctx context.Context) {
	t := time.NewTicker(s.ReportEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.report(context.Background(), 2*time.Second) // last key uses
			return
		case <-t.C:
		case <-s.kick:
		}
		s.report(ctx, 10*time.Second)
	}
}

func (s *Source) report(ctx context.Context, timeout time.Duration) {
	// A heartbeat repeats the last outcome (a refused version stays
	// reported as failed until a newer one is applied).
	s.mu.Lock()
	st := s.last
	s.mu.Unlock()
	if st.Version == 0 {
		return
	}
	if s.Keys != nil {
		st.KeysLastUsed = s.Keys.Drain()
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.Feed.Report(rctx, st); err != nil && s.Keys != nil {
		s.Keys.Restore(st.KeysLastUsed)
	}
}
