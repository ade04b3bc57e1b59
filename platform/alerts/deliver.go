package alerts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/platform/store"
)

// PostFunc sends body to url with headers; a nil error means a 2xx answer.
type PostFunc func(ctx context.Context, url string, header http.Header, body []byte) error

// HTTPPost is a PostFunc over HTTP with a timeout per attempt. Redirects are
// not followed: a webhook answers where it was configured.
func HTTPPost(timeout time.Duration) PostFunc {
	client := &http.Client{Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return func(ctx context.Context, url string, header http.Header, body []byte) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header = header
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("the webhook answered %s", resp.Status)
		}
		return nil
	}
}

func (s *Service) deliverLoop(ctx context.Context) {
	t := time.NewTicker(s.o.PollEvery)
	defer t.Stop()
	for {
		for s.deliverDue(ctx) {
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.deliver:
		}
	}
}

// deliverDue claims a batch of due events and attempts each; it reports
// whether the batch was full (more may be due).
func (s *Service) deliverDue(ctx context.Context) bool {
	url, secret, ok, err := s.webhook(ctx)
	if err != nil || !ok {
		if err != nil && ctx.Err() == nil {
			s.o.Logger.Warn("reading the alerts webhook failed", "error", err)
		}
		return false
	}
	now := s.o.Now()
	var due []store.AlertEvent
	err = s.o.Store.Write(ctx, func(tx store.Tx) (err error) {
		due, err = tx.ClaimAlertEvents(ctx, now, now.Add(claimFor), claimBatch)
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			s.o.Logger.Warn("claiming alert deliveries failed", "error", err)
		}
		return false
	}
	for i := range due {
		s.attempt(ctx, url, secret, &due[i])
	}
	return len(due) == claimBatch
}

// webhook reads the webhook and opens its secret; ok is false when none is
// set.
func (s *Service) webhook(ctx context.Context) (url string, secret []byte, ok bool, err error) {
	var w store.AlertWebhook
	err = s.o.Store.Read(ctx, func(tx store.Tx) (err error) {
		w, err = tx.AlertWebhook(ctx)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	if w.SecretSealed != nil {
		if secret, err = s.o.Box.Open(w.SecretSealed, SecretAAD); err != nil {
			return "", nil, false, fmt.Errorf("opening the webhook secret: %w", err)
		}
	}
	return w.URL, secret, true, nil
}

// attempt posts e once and records the result.
func (s *Service) attempt(ctx context.Context, url string, secret []byte, e *store.AlertEvent) {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "sluice-alerts")
	h.Set("X-Sluice-Event-Id", e.ID)
	sent := s.o.Now()
	if secret != nil {
		h.Set("X-Sluice-Signature", Sign(secret, sent, e.Payload))
	}
	perr := s.o.Post(ctx, url, h, e.Payload)
	if perr != nil && ctx.Err() != nil {
		// Shutting down: release the claim so that the next start (or
		// another replica) attempts the event at once; should that fail,
		// the claim expires.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = s.o.Store.Write(rctx, func(tx store.Tx) error {
			return tx.FinishAlertEvent(rctx, e.ID, store.AlertResult{State: store.AlertPending, Attempts: e.Attempts,
				LastError: e.LastError, NextAt: e.NextAt, DeliveredAt: e.DeliveredAt})
		})
		return
	}
	now := s.o.Now()
	// A delivery keeps the error of the attempt before it, if any.
	r := store.AlertResult{Attempts: e.Attempts + 1, NextAt: now, LastError: e.LastError}
	switch {
	case perr == nil:
		r.State, r.DeliveredAt = store.AlertDelivered, &now
	case r.Attempts >= s.o.MaxAttempts || now.Sub(e.At) >= s.o.GiveUpAfter:
		r.State, r.LastError = store.AlertFailed, perr.Error()
	default:
		r.State, r.LastError, r.NextAt = store.AlertPending, perr.Error(), now.Add(s.backoff(r.Attempts))
	}
	s.m.deliveries.WithLabelValues(result(r.State)).Inc()
	err := s.o.Store.Write(ctx, func(tx store.Tx) error { return tx.FinishAlertEvent(ctx, e.ID, r) })
	if err != nil && ctx.Err() == nil {
		s.o.Logger.Warn("recording an alert delivery failed", "id", e.ID, "error", err)
	}
	if perr != nil {
		s.o.Logger.Warn("alert delivery failed", "id", e.ID, "attempt", r.Attempts, "state", r.State, "error", perr)
	}
}

// backoff is the wait after the n-th failed attempt.
func (s *Service) backoff(n int) time.Duration {
	d := s.o.FirstRetry
	for i := 1; i < n && d < s.o.MaxRetry; i++ {
		d *= 2
	}
	return min(d, s.o.MaxRetry)
}

func result(state string) string {
	if state == store.AlertPending {
		return "retry"
	}
	return state
}

type metrics struct {
	events       *prometheus.CounterVec
	deliveries   *prometheus.CounterVec
	detectErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (metrics, error) {
	m := metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_alert_events_total",
			Help: "Budget alert events created, by trigger (threshold, denied)."}, []string{"trigger"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_alert_deliveries_total",
			Help: "Budget alert delivery attempts, by result (delivered, retry, failed)."}, []string{"result"}),
		detectErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_alert_detection_errors_total",
			Help: "Budget alert checks that failed (the ingest they followed is not affected)."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.events, m.deliveries, m.detectErrors} {
		if err := reg.Register(c); err != nil {
			return m, err
		}
	}
	return m, nil
}
