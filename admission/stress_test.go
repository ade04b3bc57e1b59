package admission

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestConcurrentInvariants runs many clients against the real clock with
// random sizes, classes, deadlines and cancellations. Which requests start,
// expire or leave depends on timing; what is checked does not: the capacity
// bounds hold at every instant, every Admit returns, and everything is given
// back at the end.
func TestConcurrentInvariants(t *testing.T) {
	const maxC, maxT = 6, 6000
	s, err := New(Config{
		Targets: map[string]Capacity{up: {MaxConcurrent: maxC, MaxTokensInFlight: maxT}},
		Classes: map[string]Class{
			"standard": {MaxQueuedWork: 20000},
			"priority": {ReservedShare: 0.3, MaxShare: 0.6, DefaultDeadline: 20 * time.Millisecond},
		},
		Weights: map[string]float64{"a0": 2},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var checker sync.WaitGroup
	checker.Add(1)
	go func() {
		defer checker.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, ts := range s.Snapshot().Targets {
				if ts.InFlight > maxC || ts.TokensInFlight > maxT || ts.InFlight < 0 || ts.Queued < 0 {
					t.Errorf("bounds broken: %+v", ts)
					return
				}
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()

	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for c := 0; c < 24; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			app := []string{"a0", "a1", "a2", "a3"}[c%4]
			for i := 0; i < 150; i++ {
				tkt := Ticket{Target: up, App: app, InputTokens: rng.Int64N(1500), OutputBound: rng.Int64N(800)}
				if rng.IntN(4) == 0 {
					tkt.Class = "priority"
					tkt.Deadline = time.Duration(rng.IntN(30)) * time.Millisecond
				}
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(6) == 0 {
					after := time.Duration(rng.IntN(300)) * time.Microsecond
					go func() { time.Sleep(after); cancel() }()
				}
				g, err := s.Admit(ctx, tkt)
				var r *Refusal
				kind := "admitted"
				switch {
				case err == nil:
					for k := int64(1); k <= 4; k++ {
						g.Progress(k * 10)
					}
					if rng.IntN(3) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					}
					g.Done(tkt.InputTokens, rng.Int64N(tkt.OutputBound+1))
					g.Done(1, 1) // a second Done is a no-op
				case errors.Is(err, context.Canceled):
					kind = "cancelled"
				case errors.As(err, &r):
					kind = r.Reason.String()
				default:
					t.Errorf("Admit: %v", err)
				}
				cancel()
				mu.Lock()
				outcomes[kind]++
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	close(stop)
	checker.Wait()
	ts := s.Snapshot().Targets[0]
	if ts.InFlight != 0 || ts.TokensInFlight != 0 || ts.Queued != 0 {
		t.Fatalf("not everything was given back: %+v", ts)
	}
	for _, c := range ts.Classes {
		if c.InFlight != 0 || c.TokensInFlight != 0 || c.Queued != 0 || c.QueuedWork != 0 {
			t.Fatalf("class %+v", c)
		}
	}
	for _, f := range ts.Flows {
		if f.Running != 0 || f.Queued != 0 || f.QueuedWork != 0 {
			t.Fatalf("flow %+v", f)
		}
	}
	t.Logf("outcomes: %v", outcomes)
}
