// Package alerts is the platform's budget alerts (docs/platform.md, "Budget
// alerts"): after usage records are stored it peeks the budgets of the
// (application, provider) pairs they name (platform/budgets) and stores an
// event for each alert threshold reached, once per window (the store's
// unique key), then delivers the events from the store (an outbox) to the
// webhook, signed, with retries. Detection runs on a goroutine of its own,
// so it never slows or fails an ingest; delivery claims rows so that
// platform replicas sharing the database do not deliver one event twice.
//
// It imports the platform's store, secrets and budgets packages and the
// usage record (meter); never the API, the gateway or the usage service.
package alerts

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/meter"
	"sluice/platform/budgets"
	"sluice/platform/secrets"
	"sluice/platform/store"
)

// SecretAAD binds a sealed webhook secret to its use.
const SecretAAD = "alerts.webhook.secret"

// Triggers of an event.
const (
	TriggerThreshold = "threshold"
	TriggerDenied    = "denied"
)

// Delivery defaults.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultFirstRetry  = time.Second
	DefaultMaxRetry    = 5 * time.Minute
	DefaultGiveUpAfter = 24 * time.Hour
	DefaultMaxAttempts = 50
	DefaultPollEvery   = time.Second
	// claimFor is how long a replica holds the events it is delivering:
	// longer than a batch of attempts takes.
	claimFor = 2 * time.Minute
	// claimBatch is how many events one claim takes.
	claimBatch = 10
)

// Budgets reads an application's budgets on a provider (budgets.Reader).
type Budgets interface {
	Application(ctx context.Context, appID, provider string) (budgets.Report, error)
	// Limits lists the limits without reading the counters.
	Limits(ctx context.Context, appID, provider string) ([]budgets.Line, error)
}

// Options configure a Service.
type Options struct {
	Store   store.Store
	Box     *secrets.Box
	Budgets Budgets
	Now     func() time.Time
	Logger  *slog.Logger
	// Metrics registers the alert metrics (nil: none).
	Metrics prometheus.Registerer
	// Post sends one delivery (nil: an HTTP POST with DefaultTimeout).
	Post PostFunc
	// Retry schedule: the n-th retry waits FirstRetry * 2^(n-1), at most
	// MaxRetry; an event still undelivered GiveUpAfter after it was
	// created, or after MaxAttempts attempts, is failed.
	FirstRetry, MaxRetry, GiveUpAfter time.Duration
	MaxAttempts                       int
	// PollEvery is how often due deliveries are looked for (also woken at
	// once by a new event of this process).
	PollEvery time.Duration
}

// Service detects and delivers alerts. Safe for concurrent use.
type Service struct {
	o Options
	m metrics

	mu sync.Mutex
	// pending are the pairs to check, with the limit policies that denied
	// a record of the pair since the last check.
	pending map[pair]map[string]bool
	wake    chan struct{}
	deliver chan struct{}
}

type pair struct{ app, provider string }

// New builds a Service.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Box == nil || o.Budgets == nil {
		return nil, errors.New("alerts: Store, Box and Budgets are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Post == nil {
		o.Post = HTTPPost(DefaultTimeout)
	}
	if o.FirstRetry <= 0 {
		o.FirstRetry = DefaultFirstRetry
	}
	if o.MaxRetry <= 0 {
		o.MaxRetry = DefaultMaxRetry
	}
	if o.GiveUpAfter <= 0 {
		o.GiveUpAfter = DefaultGiveUpAfter
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.PollEvery <= 0 {
		o.PollEvery = DefaultPollEvery
	}
	m, err := newMetrics(o.Metrics)
	if err != nil {
		return nil, err
	}
	return &Service{o: o, m: m, pending: map[pair]map[string]bool{}, wake: make(chan struct{}, 1),
		deliver: make(chan struct{}, 1)}, nil
}

// deniedCodes are the error codes of a record denied by a limit.
var deniedCodes = map[string]bool{"rate_limit_exceeded": true, "budget_exceeded": true}

// Observe notes the pairs of stored records for the detector; it never
// blocks. Records without an application or provider are skipped.
func (s *Service) Observe(recs []meter.Record) {
	if len(recs) == 0 {
		return
	}
	s.mu.Lock()
	for i := range recs {
		r := &recs[i]
		if r.Application == "" || r.Provider == "" {
			continue
		}
		p := pair{r.Application, r.Provider}
		d := s.pending[p]
		if d == nil {
			d = map[string]bool{}
			s.pending[p] = d
		}
		if r.Resolution == meter.Denied && deniedCodes[r.ErrorCode] && r.DeniedBy != "" {
			d[r.DeniedBy] = true
		}
	}
	s.mu.Unlock()
	signal(s.wake)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run detects and delivers until ctx is done.
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.detectLoop(ctx) })
	wg.Go(func() { s.deliverLoop(ctx) })
	wg.Wait()
}

func (s *Service) detectLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		batch := s.pending
		s.pending = map[pair]map[string]bool{}
		s.mu.Unlock()
		for p, denied := range batch {
			if err := s.detect(ctx, p, denied); err != nil && ctx.Err() == nil {
				s.m.detectErrors.Inc()
				s.o.Logger.Warn("budget alert detection failed", "application", p.app, "provider", p.provider, "error", err)
			}
		}
	}
}

// Event is an alert as the webhook receives it and the API lists it
// (without its delivery).
type Event struct {
	Type          string    `json:"type"`
	ID            string    `json:"id"`
	At            time.Time `json:"at"`
	Threshold     int       `json:"threshold"`
	Trigger       string    `json:"trigger"`
	ApplicationID string    `json:"applicationId"`
	Provider      string    `json:"provider"`
	Route         string    `json:"route"`
	Policy        string    `json:"policy"`
	Origin        string    `json:"origin"`
	Scope         string    `json:"scope"`
	Resource      string    `json:"resource"`
	Dimension     string    `json:"dimension"`
	Period        string    `json:"period"`
	Unit          string    `json:"unit"`
	Limit         string    `json:"limit"`
	// Used and UsedPercent are "" and 0 when the counters could not be read
	// (a denial on a platform without them).
	Used           string    `json:"used"`
	UsedPercent    float64   `json:"usedPercent"`
	WindowResetsAt time.Time `json:"windowResetsAt"`
}

// EventType is Event.Type.
const EventType = "budget.alert"

// detect peeks p's budgets and stores the events they reach.
func (s *Service) detect(ctx context.Context, p pair, denied map[string]bool) error {
	rep, err := s.o.Budgets.Application(ctx, p.app, p.provider)
	if errors.Is(err, budgets.ErrUnknownApplication) {
		return nil
	}
	if err != nil {
		return err
	}
	var events []Event
	lines := rep.Lines
	if !rep.Available {
		// Without the counters only a denial says a limit was reached.
		if len(denied) == 0 {
			return nil
		}
		if lines, err = s.o.Budgets.Limits(ctx, p.app, p.provider); err != nil {
			return err
		}
	}
	for i := range lines {
		l := &lines[i]
		for _, t := range l.AlertAt {
			if !l.Unread && l.UsedPercent() >= float64(t) {
				events = append(events, s.event(l, t, TriggerThreshold))
			}
		}
	}
	// A denial fires the 100 % event of the denying policy's tightest
	// limit that has one (the record names the policy, not its entry).
	for policy := range denied {
		var tight *budgets.Line
		for i := range lines {
			l := &lines[i]
			if l.Policy == policy && slices.Contains(l.AlertAt, 100) && (tight == nil || l.UsedPercent() > tight.UsedPercent()) {
				tight = l
			}
		}
		if tight != nil {
			events = append(events, s.event(tight, 100, TriggerDenied))
		}
	}
	if len(events) == 0 {
		return nil
	}
	return s.store(ctx, events)
}

func (s *Service) event(l *budgets.Line, threshold int, trigger string) Event {
	e := Event{
		Type: EventType, ID: newID(), At: l.At.UTC(), Threshold: threshold, Trigger: trigger,
		ApplicationID: l.AppID, Provider: l.Provider, Route: l.Route, Policy: l.Policy, Origin: l.Origin,
		Scope: l.Scope, Resource: l.Resource, Dimension: l.Dimension, Period: l.Period, Unit: l.Unit,
		Limit: budgets.Amount(l.Unit, l.Limit), Used: budgets.Amount(l.Unit, l.Used()), UsedPercent: l.UsedPercent(),
		WindowResetsAt: l.WindowEnd(),
	}
	if l.Unread {
		e.Used, e.UsedPercent = "", 0
	}
	return e
}

// dedupe is the once-per-window key of e: the provider, the limit (its
// origin, else its chain entry), the application for a consumer limit
// (a backend limit is one counter for all), the resource, the window and
// the threshold.
func dedupe(e *Event, l string) string {
	app := e.ApplicationID
	if e.Scope != "consumer" {
		app = ""
	}
	return fmt.Sprintf("%s|%s|%s|%s|%d|%d", e.Provider, l, app, e.Resource, e.WindowResetsAt.Unix(), e.Threshold)
}

// store inserts events (a key already stored is skipped), in state none
// when no webhook is set.
func (s *Service) store(ctx context.Context, events []Event) error {
	var fresh []Event
	err := s.o.Store.Write(ctx, func(tx store.Tx) error {
		fresh = fresh[:0]
		state := store.AlertPending
		if _, err := tx.AlertWebhook(ctx); errors.Is(err, store.ErrNotFound) {
			state = store.AlertNone
		} else if err != nil {
			return err
		}
		for i := range events {
			e := &events[i]
			body, err := json.Marshal(e)
			if err != nil {
				return err
			}
			limitRef := e.Origin
			if limitRef == "" {
				limitRef = e.Policy + "@" + e.Route
			}
			ok, err := tx.InsertAlertEvent(ctx, store.AlertEvent{ID: e.ID, At: e.At, Dedupe: dedupe(e, limitRef),
				ApplicationID: e.ApplicationID, Provider: e.Provider, Payload: body, State: state, NextAt: e.At})
			if err != nil {
				return err
			}
			if ok {
				fresh = append(fresh, *e)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range fresh {
		s.m.events.WithLabelValues(e.Trigger).Inc()
		s.o.Logger.Info("budget alert", "id", e.ID, "application", e.ApplicationID, "provider", e.Provider,
			"origin", e.Origin, "threshold", e.Threshold, "trigger", e.Trigger, "used", e.Used, "limit", e.Limit)
	}
	if len(fresh) > 0 {
		signal(s.deliver)
	}
	return nil
}

// newID is "alr_" and 16 random hex digits.
func newID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return "alr_" + hex.EncodeToString(b[:])
}

// Sign is the X-Sluice-Signature value of body sent at t with secret:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}
