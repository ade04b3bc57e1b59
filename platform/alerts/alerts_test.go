package alerts_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"sluice/meter"
	"sluice/platform/alerts"
	"sluice/platform/budgets"
	"sluice/platform/generate"
	"sluice/platform/secrets"
	"sluice/platform/store"
	"sluice/platform/store/storetest"
)

// fakeBudgets serves the lines the test sets.
type fakeBudgets struct {
	mu    sync.Mutex
	lines []budgets.Line
	// unavailable: the counters cannot be read; Limits serves lines.
	unavailable bool
}

func (f *fakeBudgets) set(lines ...budgets.Line) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lines = lines
}

func (f *fakeBudgets) Application(_ context.Context, app, provider string) (budgets.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []budgets.Line
	for _, l := range f.lines {
		if l.AppID == app && l.Provider == provider {
			out = append(out, l)
		}
	}
	if f.unavailable {
		return budgets.Report{Reason: "memory counters"}, nil
	}
	return budgets.Report{Available: true, Lines: out}, nil
}

func (f *fakeBudgets) Limits(_ context.Context, app, provider string) ([]budgets.Line, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []budgets.Line
	for _, l := range f.lines {
		if l.AppID == app && l.Provider == provider {
			l.Remaining, l.ResetAfter, l.Unread = 0, 0, true
			out = append(out, l)
		}
	}
	return out, nil
}

var day = time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)

// line is a consumer daily token limit of 1000 with used tokens used.
func line(policy, origin string, used int64, at time.Time, alertAt ...int) budgets.Line {
	return budgets.Line{AppID: "app-1", Provider: "openai", Route: "openai", Policy: policy, Origin: origin,
		Scope: "consumer", Dimension: "tokens", Counter: "total", Period: "1 day", Label: "window-1d", Unit: "tokens",
		Limit: 1000, Remaining: 1000 - used, At: at, ResetAfter: day.Add(14 * time.Hour).Sub(at), AlertAt: alertAt,
		Reset: generate.Reset{Duration: 1, Unit: generate.Day}}
}

func box(t *testing.T) *secrets.Box {
	b, err := secrets.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type env struct {
	t   *testing.T
	st  store.Store
	svc *alerts.Service
	bud *fakeBudgets
	// stop ends the service's Run (also at cleanup).
	stop func()
}

func start(t *testing.T, st store.Store, o alerts.Options) *env {
	t.Helper()
	e := &env{t: t, st: st, bud: &fakeBudgets{}}
	o.Store, o.Box, o.Budgets = st, box(t), e.bud
	svc, err := alerts.New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	var once sync.Once
	e.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(e.stop)
	return e
}

func (e *env) events() []store.AlertEvent {
	e.t.Helper()
	var out []store.AlertEvent
	err := e.st.Read(context.Background(), func(tx store.Tx) (err error) {
		out, err = tx.ListAlertEvents(context.Background(), store.AlertQuery{Limit: 100})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// waitEvents waits until n events are stored and returns them, oldest
// first.
func (e *env) waitEvents(n int, cond func([]store.AlertEvent) bool) []store.AlertEvent {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		es := e.events()
		if len(es) == n && (cond == nil || cond(es)) {
			for i, j := 0, len(es)-1; i < j; i, j = i+1, j-1 {
				es[i], es[j] = es[j], es[i]
			}
			return es
		}
		if len(es) > n || time.Now().After(deadline) {
			e.t.Fatalf("%d events, want %d: %+v", len(es), n, es)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func payload(t *testing.T, e store.AlertEvent) alerts.Event {
	var ev alerts.Event
	if err := json.Unmarshal(e.Payload, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func record(id string) meter.Record {
	return meter.Record{ID: id, Application: "app-1", Provider: "openai"}
}

func TestThresholdsFireOncePerWindow(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, st store.Store) {
		e := start(t, st, alerts.Options{})
		e.bud.set(line("token-based-ratelimit", "$.consumer.global.token", 600, day, 50, 80, 100))
		e.svc.Observe([]meter.Record{record("r1")})
		es := e.waitEvents(1, nil)
		if ev := payload(t, es[0]); ev.Threshold != 50 || ev.Trigger != alerts.TriggerThreshold || ev.Used != "600" ||
			!ev.WindowResetsAt.Equal(day.Add(14*time.Hour)) || es[0].State != store.AlertNone {
			t.Fatalf("first event %+v (%s)", ev, es[0].State)
		}
		// Later in the window at 85 %: only 80 is new; then a resend of
		// the same records at the same level adds nothing.
		e.bud.set(line("token-based-ratelimit", "$.consumer.global.token", 850, day.Add(time.Hour+17*time.Millisecond), 50, 80, 100))
		e.svc.Observe([]meter.Record{record("r2")})
		es = e.waitEvents(2, nil)
		if ev := payload(t, es[1]); ev.Threshold != 80 {
			t.Fatalf("second event %+v", ev)
		}
		e.svc.Observe([]meter.Record{record("r2")})
		// The next day's window: 50 fires again.
		next := line("token-based-ratelimit", "$.consumer.global.token", 500, day.Add(24*time.Hour), 50, 80, 100)
		next.ResetAfter = 14 * time.Hour
		e.bud.set(next)
		e.svc.Observe([]meter.Record{record("r3")})
		es = e.waitEvents(3, nil)
		if ev := payload(t, es[2]); ev.Threshold != 50 || !ev.WindowResetsAt.Equal(day.Add(38*time.Hour)) {
			t.Fatalf("next window's event %+v", ev)
		}
	})
}

// A record denied by a limit policy fires that policy's 100 % event even
// when the counter reads below 100 %; other policies' limits do not fire.
func TestDeniedFiresHundred(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, st store.Store) {
		e := start(t, st, alerts.Options{})
		e.bud.set(
			line("token-based-ratelimit", "$.consumer.global.token", 950, day, 100),
			line("basic-ratelimit", "$.consumer.global.request", 10, day, 100),
		)
		denied := record("r1")
		denied.Resolution, denied.DeniedBy, denied.ErrorCode = meter.Denied, "token-based-ratelimit", "budget_exceeded"
		e.svc.Observe([]meter.Record{denied})
		es := e.waitEvents(1, nil)
		if ev := payload(t, es[0]); ev.Threshold != 100 || ev.Trigger != alerts.TriggerDenied || ev.Policy != "token-based-ratelimit" {
			t.Fatalf("denied event %+v", ev)
		}
		// Reaching 100 % later in the window does not fire it again.
		e.bud.set(line("token-based-ratelimit", "$.consumer.global.token", 1010, day.Add(time.Minute), 100))
		e.svc.Observe([]meter.Record{record("r2"), denied})
		time.Sleep(50 * time.Millisecond)
		e.waitEvents(1, nil)
	})
}

// Without the counters only a denial fires, its 100 % event, with the
// limit from the settings and no figure of use.
func TestDeniedWithoutCounters(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, st store.Store) {
		e := start(t, st, alerts.Options{})
		e.bud.unavailable = true
		e.bud.set(line("token-based-ratelimit", "$.consumer.global.token", 950, day, 80, 100))
		e.svc.Observe([]meter.Record{record("r1")})
		denied := record("r2")
		denied.Resolution, denied.DeniedBy, denied.ErrorCode = meter.Denied, "token-based-ratelimit", "rate_limit_exceeded"
		e.svc.Observe([]meter.Record{denied})
		es := e.waitEvents(1, nil)
		ev := payload(t, es[0])
		if ev.Threshold != 100 || ev.Trigger != alerts.TriggerDenied || ev.Used != "" || ev.Limit != "1000" ||
			!ev.WindowResetsAt.Equal(day.Add(14*time.Hour)) {
			t.Fatalf("event %+v", ev)
		}
	})
}

// setWebhook sets a webhook (its secret sealed, or none).
func setWebhook(t *testing.T, st store.Store, sealed []byte) {
	t.Helper()
	ctx := context.Background()
	if err := st.Write(ctx, func(tx store.Tx) error {
		return tx.SetAlertWebhook(ctx, store.AlertWebhook{URL: "http://hook.invalid/", SecretSealed: sealed, UpdatedAt: day})
	}); err != nil {
		t.Fatal(err)
	}
}

// posts is a PostFunc that fails the first fail attempts of each event and
// records the rest.
type posts struct {
	mu    sync.Mutex
	fail  int
	tries map[string]int
	got   map[string][]http.Header
}

func (p *posts) post(_ context.Context, _ string, h http.Header, body []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := h.Get("X-Sluice-Event-Id")
	p.tries[id]++
	if p.tries[id] <= p.fail {
		return errors.New("refused")
	}
	p.got[id] = append(p.got[id], h.Clone())
	return nil
}

func TestDeliveryRetriesSignsAndGivesUp(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, st store.Store) {
		sealed, err := box(t).Seal([]byte("s3cret"), alerts.SecretAAD)
		if err != nil {
			t.Fatal(err)
		}
		setWebhook(t, st, sealed)
		p := &posts{fail: 2, tries: map[string]int{}, got: map[string][]http.Header{}}
		e := start(t, st, alerts.Options{Post: p.post, FirstRetry: time.Millisecond, PollEvery: 5 * time.Millisecond})
		e.bud.set(line("token-based-ratelimit", "$.consumer.global.token", 900, time.Now(), 80))
		e.svc.Observe([]meter.Record{record("r1")})
		es := e.waitEvents(1, func(es []store.AlertEvent) bool { return es[0].State == store.AlertDelivered })
		if es[0].Attempts != 3 || es[0].DeliveredAt == nil || es[0].LastError != "refused" {
			t.Fatalf("delivered event %+v", es[0])
		}
		p.mu.Lock()
		h := p.got[es[0].ID]
		p.mu.Unlock()
		if len(h) != 1 {
			t.Fatalf("delivered %d times", len(h))
		}
		// The signature is over the stored payload at the header's time.
		sig := h[0].Get("X-Sluice-Signature")
		var ts int64
		for _, c := range []byte(sig[2:]) {
			if c < '0' || c > '9' {
				break
			}
			ts = ts*10 + int64(c-'0')
		}
		if want := alerts.Sign([]byte("s3cret"), time.Unix(ts, 0), es[0].Payload); sig != want {
			t.Fatalf("signature %s, want %s", sig, want)
		}
	})
}

func TestDeliveryFailsAfterMaxAttempts(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, st store.Store) {
		setWebhook(t, st, nil)
		p := &posts{fail: 1000, tries: map[string]int{}, got: map[string][]http.Header{}}
		e := start(t, st, alerts.Options{Post: p.post, FirstRetry: time.Millisecond, PollEvery: 5 * time.Millisecond, MaxAttempts: 3})
		e.bud.set(line("token-based-ratelimit", "$.consumer.global.token", 900, time.Now(), 80))
		e.svc.Observe([]meter.Record{record("r1")})
		es := e.waitEvents(1, func(es []store.AlertEvent) bool { return es[0].State == store.AlertFailed })
		if es[0].Attempts != 3 {
			t.Fatalf("failed after %d attempts, want 3", es[0].Attempts)
		}
	})
}

// Two platform replicas on one database deliver every event once.
func TestReplicasDeliverOnce(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, st store.Store) {
		setWebhook(t, st, nil)
		p := &posts{tries: map[string]int{}, got: map[string][]http.Header{}}
		o := alerts.Options{Post: p.post, PollEvery: time.Millisecond}
		a, b := start(t, st, o), start(t, st, o)
		const n = 30
		var ls []budgets.Line
		for i := range n {
			l := line("token-based-ratelimit", "$.consumer.global.token", 900, time.Now(), 80)
			l.Resource = "/r" + string(rune('a'+i))
			ls = append(ls, l)
		}
		// Both replicas detect the same batch: each event is stored once.
		a.bud.set(ls...)
		b.bud.set(ls...)
		a.svc.Observe([]meter.Record{record("r1")})
		b.svc.Observe([]meter.Record{record("r1")})
		a.waitEvents(n, func(es []store.AlertEvent) bool {
			for _, e := range es {
				if e.State != store.AlertDelivered {
					return false
				}
			}
			return true
		})
		p.mu.Lock()
		defer p.mu.Unlock()
		for id, tries := range p.tries {
			if tries != 1 {
				t.Errorf("event %s posted %d times", id, tries)
			}
		}
	})
}

// Pending deliveries survive a restart: a second service on the store
// delivers what the first could not.
func TestPendingDeliveryResumesAfterRestart(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, st store.Store) {
		setWebhook(t, st, nil)
		down := &posts{fail: 1000, tries: map[string]int{}, got: map[string][]http.Header{}}
		first := start(t, st, alerts.Options{Post: down.post, FirstRetry: time.Hour, PollEvery: 5 * time.Millisecond})
		first.bud.set(line("token-based-ratelimit", "$.consumer.global.token", 900, time.Now(), 80))
		first.svc.Observe([]meter.Record{record("r1")})
		first.waitEvents(1, func(es []store.AlertEvent) bool { return es[0].Attempts == 1 && es[0].State == store.AlertPending })
		first.stop()
		// Due now: the restarted service retries it without waiting for
		// the first's hour of back-off.
		ctx := context.Background()
		if err := st.Write(ctx, func(tx store.Tx) error {
			es, err := tx.ListAlertEvents(ctx, store.AlertQuery{Limit: 1})
			if err != nil {
				return err
			}
			return tx.FinishAlertEvent(ctx, es[0].ID, store.AlertResult{State: store.AlertPending, Attempts: 1, LastError: "refused", NextAt: time.Now()})
		}); err != nil {
			t.Fatal(err)
		}
		up := &posts{tries: map[string]int{}, got: map[string][]http.Header{}}
		second := start(t, st, alerts.Options{Post: up.post, PollEvery: 5 * time.Millisecond})
		es := second.waitEvents(1, func(es []store.AlertEvent) bool { return es[0].State == store.AlertDelivered })
		if es[0].Attempts != 2 {
			t.Fatalf("delivered after %d attempts, want 2", es[0].Attempts)
		}
	})
}
