package admission

import (
	"context"
	"testing"
)

// BenchmarkAdmitFastPath is one request below capacity: Admit, one
// Progress, Done.
func BenchmarkAdmitFastPath(b *testing.B) {
	s := benchScheduler(b)
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

func benchScheduler(tb testing.TB) *Scheduler {
	s, err := New(Config{
		Targets: map[string]Capacity{up: {MaxConcurrent: 1 << 20, MaxTokensInFlight: 1 << 50}},
		Classes: map[string]Class{"priority": {ReservedShare: 0.2}},
	}, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestFastPathAllocations: below capacity, a request costs no allocation
// once its flow exists.
func TestFastPathAllocations(t *testing.T) {
	s := benchScheduler(t)
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
