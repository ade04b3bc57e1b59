package admissionprom

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"sluice/admission"
	"sluice/internal/clock"
)

func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			default:
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func TestMetrics(t *testing.T) {
	clk := clock.NewManual(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC))
	ev := NewEvents()
	s, err := admission.New(admission.Config{
		Targets: map[string]admission.Capacity{"up": {MaxConcurrent: 2, MaxTokensInFlight: 1000}},
		Classes: map[string]admission.Class{"priority": {ReservedShare: 0.5}, "standard": {MaxQueuedWork: 100}},
	}, admission.Options{Clock: clk, Observer: ev})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(ev, NewState(s))
	ctx := context.Background()

	g1, _ := s.Admit(ctx, admission.Ticket{Target: "up", App: "a", InputTokens: 100})
	g2, _ := s.Admit(ctx, admission.Ticket{Target: "up", App: "a", InputTokens: 100})
	done := make(chan error, 1)
	go func() {
		g, err := s.Admit(ctx, admission.Ticket{Target: "up", App: "b", InputTokens: 50})
		g.Done(-1, -1)
		done <- err
	}()
	for start := time.Now(); ; time.Sleep(time.Millisecond) { // waiting for the goroutine to queue, not measuring
		if n, _ := value(t, reg, "sluice_admission_queued_requests", map[string]string{"class": "standard"}); n == 1 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the third request never queued")
		}
	}
	if _, err := s.Admit(ctx, admission.Ticket{Target: "up", App: "b", InputTokens: 100}); !errors.As(err, new(*admission.Refusal)) {
		t.Fatalf("want a queue-full refusal, got %v", err)
	}
	clk.Advance(2 * time.Second)
	for name, want := range map[string]float64{
		"sluice_admission_in_flight_requests":  2,
		"sluice_admission_in_flight_tokens":    200,
		"sluice_admission_oldest_wait_seconds": 2,
		"sluice_admission_queued_work":         50,
		"sluice_admission_admitted_total":      2,
	} {
		if got, _ := value(t, reg, name, map[string]string{"target": "up", "class": "standard"}); got != want {
			t.Errorf("%s = %v; want %v", name, got, want)
		}
	}
	if got, _ := value(t, reg, "sluice_admission_stranded_requests", map[string]string{"class": "priority"}); got != 1 {
		t.Errorf("stranded priority requests = %v; want 1", got)
	}
	if got, _ := value(t, reg, "sluice_admission_reserved_tokens", map[string]string{"class": "priority"}); got != 500 {
		t.Errorf("reserved priority tokens = %v; want 500", got)
	}
	if got, _ := value(t, reg, "sluice_admission_capacity_tokens", map[string]string{"target": "up"}); got != 1000 {
		t.Errorf("capacity tokens = %v", got)
	}
	if got, _ := value(t, reg, "sluice_admission_refusals_total", map[string]string{"reason": "queue_full"}); got != 1 {
		t.Errorf("queue_full refusals = %v; want 1", got)
	}
	g1.Done(-1, -1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	g2.Done(-1, -1)
	if got, _ := value(t, reg, "sluice_admission_queue_wait_seconds", map[string]string{"outcome": "admitted"}); got != 1 {
		t.Errorf("queue wait observations = %v; want 1", got)
	}
	if got, _ := value(t, reg, "sluice_admission_queue_position", nil); got != 1 {
		t.Errorf("position observations = %v; want 1", got)
	}
}

// fixedLedger grants the same lease to every renewal.
type fixedLedger struct{ l admission.Lease }

func (f fixedLedger) Renew(context.Context, admission.LeaseRequest) (admission.Lease, error) {
	return f.l, nil
}

func (fixedLedger) Release(context.Context, string) error { return nil }

func TestLeaseMetrics(t *testing.T) {
	clk := clock.NewManual(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC))
	led := fixedLedger{admission.Lease{Granted: admission.Amount{Requests: 3, Tokens: 400},
		Entitlement: admission.Amount{Requests: 4, Tokens: 500}, Replicas: 2}}
	s, err := admission.New(admission.Config{Targets: map[string]admission.Capacity{"up": {MaxConcurrent: 8, MaxTokensInFlight: 1000}}},
		admission.Options{Clock: clk, Ledger: led})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewState(s))
	for start := time.Now(); ; time.Sleep(time.Millisecond) { // waiting for the first renewal, not measuring
		if n, _ := value(t, reg, "sluice_admission_lease_renewals_total", nil); n == 1 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("no renewal")
		}
	}
	for name, want := range map[string]float64{
		"sluice_admission_lease_requests":           3,
		"sluice_admission_lease_tokens":             400,
		"sluice_admission_entitlement_requests":     4,
		"sluice_admission_entitlement_tokens":       500,
		"sluice_admission_lease_replicas":           2,
		"sluice_admission_lease_valid":              1,
		"sluice_admission_lease_renew_errors_total": 0,
	} {
		if got, _ := value(t, reg, name, map[string]string{"target": "up"}); got != want {
			t.Errorf("%s = %v; want %v", name, got, want)
		}
	}
}
