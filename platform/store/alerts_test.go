package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"sluice/platform/store"
)

func alertEvent(id, dedupe string, at time.Time, state string) store.AlertEvent {
	return store.AlertEvent{ID: id, At: at, Dedupe: dedupe, ApplicationID: "app-1", Provider: "openai",
		Payload: []byte(`{"id":"` + id + `"}`), State: state, NextAt: at}
}

func TestAlertWebhook(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		_, err := readErr(s, func(ctx context.Context, tx store.Tx) (store.AlertWebhook, error) { return tx.AlertWebhook(ctx) })
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("no webhook: %v", err)
		}
		for _, w := range []store.AlertWebhook{{URL: "https://a.example/hook", SecretSealed: []byte{1, 2}, UpdatedAt: t0},
			{URL: "https://b.example/hook", UpdatedAt: t0.Add(time.Second)}} {
			write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.SetAlertWebhook(ctx, w) })
			got := read(t, s, func(ctx context.Context, tx store.Tx) (store.AlertWebhook, error) { return tx.AlertWebhook(ctx) })
			if got.URL != w.URL || string(got.SecretSealed) != string(w.SecretSealed) || !got.UpdatedAt.Equal(w.UpdatedAt) {
				t.Fatalf("webhook %+v, want %+v", got, w)
			}
		}
		write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.DeleteAlertWebhook(ctx) })
		err = s.Write(context.Background(), func(tx store.Tx) error { return tx.DeleteAlertWebhook(context.Background()) })
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})
}

func readErr[T any](s store.Store, fn func(ctx context.Context, tx store.Tx) (T, error)) (T, error) {
	ctx := context.Background()
	var out T
	err := s.Read(ctx, func(tx store.Tx) error {
		var err error
		out, err = fn(ctx, tx)
		return err
	})
	return out, err
}

func TestAlertEventsOncePerKeyAndListed(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		inserted := 0
		for i, e := range []store.AlertEvent{
			alertEvent("alr-1", "k80", t0, store.AlertPending),
			alertEvent("alr-2", "k80", t0, store.AlertPending), // the same key: nothing
			alertEvent("alr-3", "k100", t0.Add(time.Second), store.AlertNone),
			alertEvent("alr-4", "k100b", t0.Add(time.Second), store.AlertPending),
		} {
			if i == 3 {
				e.ApplicationID, e.Provider = "app-2", "anthropic"
			}
			write(t, s, func(ctx context.Context, tx store.Tx) error {
				ok, err := tx.InsertAlertEvent(ctx, e)
				if ok {
					inserted++
				}
				return err
			})
		}
		if inserted != 3 {
			t.Fatalf("%d inserted, want 3", inserted)
		}
		ids := func(q store.AlertQuery) []string {
			es := read(t, s, func(ctx context.Context, tx store.Tx) ([]store.AlertEvent, error) { return tx.ListAlertEvents(ctx, q) })
			var out []string
			for _, e := range es {
				out = append(out, e.ID)
			}
			return out
		}
		for _, tc := range []struct {
			q    store.AlertQuery
			want string
		}{
			{store.AlertQuery{Limit: 10}, "alr-4 alr-3 alr-1"},
			{store.AlertQuery{Limit: 2}, "alr-4 alr-3"},
			{store.AlertQuery{Limit: 10, BeforeAt: t0.Add(time.Second), BeforeID: "alr-4"}, "alr-3 alr-1"},
			{store.AlertQuery{Limit: 10, Application: "app-1"}, "alr-3 alr-1"},
			{store.AlertQuery{Limit: 10, Provider: "anthropic"}, "alr-4"},
		} {
			if got := join(ids(tc.q)); got != tc.want {
				t.Errorf("%+v: %s, want %s", tc.q, got, tc.want)
			}
		}
	})
}

func join(xs []string) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += " "
		}
		s += x
	}
	return s
}

// Concurrent claimers never get one event twice; a finished attempt
// releases the claim, and an expired claim can be taken again.
func TestAlertEventsClaim(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		const n = 20
		for i := range n {
			e := alertEvent("alr-"+string(rune('a'+i)), "k"+string(rune('a'+i)), t0, store.AlertPending)
			write(t, s, func(ctx context.Context, tx store.Tx) error { _, err := tx.InsertAlertEvent(ctx, e); return err })
		}
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			_, err := tx.InsertAlertEvent(ctx, alertEvent("alr-late", "late", t0.Add(time.Hour), store.AlertPending))
			return err
		})
		now := t0.Add(time.Minute)
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					var got []store.AlertEvent
					err := s.Write(context.Background(), func(tx store.Tx) (err error) {
						got, err = tx.ClaimAlertEvents(context.Background(), now, now.Add(time.Minute), 3)
						return err
					})
					if err != nil {
						t.Error(err)
						return
					}
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, e := range got {
						seen[e.ID]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("%d events claimed, want %d (the late one is not due)", len(seen), n)
		}
		for id, c := range seen {
			if c != 1 {
				t.Fatalf("%s claimed %d times", id, c)
			}
		}
		claim := func(at time.Time) []store.AlertEvent {
			var got []store.AlertEvent
			write(t, s, func(ctx context.Context, tx store.Tx) (err error) {
				got, err = tx.ClaimAlertEvents(ctx, at, at.Add(time.Minute), 100)
				return err
			})
			return got
		}
		delivered := now
		write(t, s, func(ctx context.Context, tx store.Tx) error {
			if err := tx.FinishAlertEvent(ctx, "alr-a", store.AlertResult{State: store.AlertDelivered, Attempts: 1, NextAt: now, DeliveredAt: &delivered}); err != nil {
				return err
			}
			return tx.FinishAlertEvent(ctx, "alr-b", store.AlertResult{State: store.AlertPending, Attempts: 1, LastError: "500", NextAt: now})
		})
		if got := claim(now); len(got) != 1 || got[0].ID != "alr-b" || got[0].Attempts != 1 || got[0].LastError != "500" {
			t.Fatalf("after finishing: %+v", got)
		}
		// Every claim has expired two minutes later: the 19 pending ones
		// come back, the delivered one does not.
		if got := claim(now.Add(2 * time.Minute)); len(got) != n-1 {
			t.Fatalf("%d reclaimed after the claims expired, want %d", len(got), n-1)
		}
		es := read(t, s, func(ctx context.Context, tx store.Tx) ([]store.AlertEvent, error) {
			return tx.ListAlertEvents(ctx, store.AlertQuery{Limit: 100})
		})
		for _, e := range es {
			if e.ID == "alr-a" && (e.State != store.AlertDelivered || e.DeliveredAt == nil || !e.DeliveredAt.Equal(delivered)) {
				t.Fatalf("delivered event: %+v", e)
			}
		}
	})
}
