package admission

import (
	"context"
	"testing"
	"time"
)

// BenchmarkAdmitFastPath is one request below capacity: Admit, one
// Progress, Done.
func BenchmarkAdmitFastPath(b *testing.B) { benchFastPath(b, benchScheduler(b)) }

// BenchmarkAdmitFastPathLeased is the same below a capacity lease.
func BenchmarkAdmitFastPathLeased(b *testing.B) { benchFastPath(b, leasedBenchScheduler(b)) }

func benchFastPath(b *testing.B, s *Scheduler) {
	ctx := context.Background()
	tkt := Ticket{Target: up, App: "a", InputTokens: 500, OutputBound: 200}
	b.ReportAllocs()
	for b.Loop() {
		g, err := s.Admit(ctx, tkt)
		if err != nil {
			b.Fatal(err)
		}
		g.Progress(100)
		g.Done(500, 150)
	}
}

// BenchmarkAdmitFastPathParallel is the same from every core, on one target.
func BenchmarkAdmitFastPathParallel(b *testing.B) {
	s := benchScheduler(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		tkt := Ticket{Target: up, App: "a", InputTokens: 500, OutputBound: 200}
		for pb.Next() {
			g, err := s.Admit(ctx, tkt)
			if err != nil {
				b.Fatal(err)
			}
			g.Progress(100)
			g.Done(500, 150)
		}
	})
}

func benchScheduler(tb testing.TB) *Scheduler { return newBenchScheduler(tb, Options{}) }

func newBenchScheduler(tb testing.TB, o Options) *Scheduler {
	s, err := New(Config{
		Targets: map[string]Capacity{up: {MaxConcurrent: 1 << 20, MaxTokensInFlight: 1 << 50}},
		Classes: map[string]Class{"priority": {ReservedShare: 0.2}},
	}, o)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// grantAll is a ledger that grants every replica the whole capacity.
type grantAll struct{}

func (grantAll) Renew(_ context.Context, r LeaseRequest) (Lease, error) {
	a := Amount{Requests: int64(r.Capacity.MaxConcurrent), Tokens: r.Capacity.MaxTokensInFlight}
	return Lease{Granted: a, Entitlement: a, Replicas: 1}, nil
}

func (grantAll) Release(context.Context, string) error { return nil }

// leasedBenchScheduler is benchScheduler with a lease, once granted.
func leasedBenchScheduler(tb testing.TB) *Scheduler {
	s := newBenchScheduler(tb, Options{Ledger: grantAll{}})
	tb.Cleanup(func() { _ = s.Close() })
	for start := time.Now(); ; time.Sleep(time.Millisecond) { // waiting for the first grant, not measuring
		if l := s.Snapshot().Targets[0].Lease; l != nil && l.Valid {
			return s
		}
		if time.Since(start) > safety {
			tb.Fatal("no lease granted")
		}
	}
}

// TestFastPathAllocations: below capacity, a request costs no allocation
// once its flow exists.
func TestFastPathAllocations(t *testing.T) {
	t.Run("whole capacity", func(t *testing.T) { fastPathAllocations(t, benchScheduler(t)) })
	t.Run("leased", func(t *testing.T) { fastPathAllocations(t, leasedBenchScheduler(t)) })
}

func fastPathAllocations(t *testing.T, s *Scheduler) {
	ctx := context.Background()
	tkt := Ticket{Target: up, App: "a", InputTokens: 500, OutputBound: 200}
	g, _ := s.Admit(ctx, tkt) // the flow and one record
	g.Done(-1, -1)
	if n := testing.AllocsPerRun(1000, func() {
		g, err := s.Admit(ctx, tkt)
		if err != nil || !g.Tracked() {
			t.Fatal(err)
		}
		g.Progress(100)
		g.Done(500, 150)
	}); n != 0 {
		t.Fatalf("%v allocations per request on the fast path; want 0", n)
	}
}
