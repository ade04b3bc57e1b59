package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"sluice/counter"
	"sluice/internal/redistest"
)

// What failure mode open charges locally during an outage reaches Redis once
// it is back: the net of local reservations and their settlements, per
// counter and window, in both layouts; a bucket only as far as it has not
// refilled; a settlement of a local ticket made after the recovery too.
func TestLocalChargesCopiedBack(t *testing.T) {
	srv := redistest.StartServer(t)
	reg := prometheus.NewRegistry()
	s := newTestStore(t, Options{URL: srv.URL(), Metrics: reg, DialTimeout: DefaultDialTimeout, ReadTimeout: DefaultReadTimeout, WriteTimeout: DefaultWriteTimeout})
	ctx := context.Background()
	perKey := []counter.Debit{{Key: "{cb}:w", Limit: window(1000, 24*time.Hour), Amount: 40}}
	grouped := []counter.Debit{
		{Key: "{cb}:p:w", Group: "{cb}:p", Limit: window(1000, time.Hour), Amount: 30},
		{Key: "{cb}:p:m", Group: "{cb}:p", Limit: month(1000), Amount: 30},
		{Key: "{cb}:p:b", Group: "{cb}:p", Limit: bucket(1000, time.Hour), Amount: 30},
	}
	var res counter.Result
	if err := s.Reserve(ctx, perKey, &res); err != nil || res.Ticket.Origin != OriginRedis {
		t.Fatalf("Reserve before the outage: %v origin %d", err, res.Ticket.Origin)
	}

	srv.Stop()
	var loc, late counter.Result
	eventually(t, 10*time.Second, "served locally", func() bool {
		return s.Reserve(ctx, perKey, &loc) == nil && loc.Ticket.Origin == OriginLocal
	})
	// Reserved 40 locally, settled to 25.
	if err := s.Adjust(ctx, perKey, &loc.Ticket, []int64{-15}); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(ctx, grouped, &loc); err != nil || loc.Ticket.Origin != OriginLocal {
		t.Fatalf("grouped local Reserve: %v origin %d", err, loc.Ticket.Origin)
	}
	if err := s.Adjust(ctx, grouped, &loc.Ticket, []int64{5, 5, 5}); err != nil {
		t.Fatal(err)
	}
	// A local reservation still open when Redis comes back.
	if err := s.Reserve(ctx, grouped, &late); err != nil || late.Ticket.Origin != OriginLocal {
		t.Fatalf("second local Reserve: %v origin %d", err, late.Ticket.Origin)
	}

	srv.Start()
	// Any call that reaches Redis starts the copy. Redis restarted empty.
	used := func(ds []counter.Debit) []int64 {
		var r counter.Result
		if err := s.Peek(ctx, ds, &r); err != nil || r.Ticket.Origin != OriginRedis {
			return nil
		}
		out := make([]int64, len(ds))
		for i, d := range ds {
			out[i] = d.Limit.Max - r.Remaining[i]
		}
		return out
	}
	settled := func(ds []counter.Debit, want ...int64) func() bool {
		return func() bool {
			got := used(ds)
			if len(got) != len(want) {
				return false
			}
			for i := range want {
				// The bucket refills 1000/h: allow a unit.
				if got[i] < want[i]-1 || got[i] > want[i] {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 10*time.Second, "per-key charge copied", settled(perKey, 25))
	eventually(t, 10*time.Second, "grouped charges copied", settled(grouped, 65, 65, 65))
	// The late settlement goes to the local store and is copied too.
	if err := s.Adjust(ctx, grouped, &late.Ticket, []int64{-10, -10, -10}); err != nil {
		t.Fatal(err)
	}
	if err := s.Peek(ctx, perKey, &res); err != nil { // a round trip: starts the copy
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "late settlement copied", settled(grouped, 55, 55, 55))
	if n := testutil.ToFloat64(s.m.copied.WithLabelValues("copied")); n < 5 {
		t.Errorf("copied charges counted %v, want >= 5", n)
	}
}

// A copied window charge starts the window only while it is the current
// one: the usage of an ended window no longer counts anywhere.
func TestCopiedChargeOfEndedWindowIsDropped(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, Options{URL: redistest.URL(t)})
	for _, group := range []string{"", "{ended}:p"} {
		ds := []counter.Debit{{Key: "{ended}:w", Group: group, Limit: window(100, time.Hour)}}
		lastHour := time.Now().Truncate(time.Hour).Add(-time.Hour).Unix()
		sc := getCall()
		if err := s.prepare(sc, kindCharge, ds, []int64{lastHour}, []int64{7}); err != nil {
			t.Fatal(err)
		}
		s.co.do(ctx, sc)
		if sc.err != nil || sc.reply != int64(0) {
			t.Fatalf("group %q: charge of the last hour: reply %v err %v, want 0 counters changed", group, sc.reply, sc.err)
		}
		putCall(sc)
		if rem := peekRemaining(t, s, ds); rem[0] != 100 {
			t.Fatalf("group %q: remaining %v, want 100", group, rem)
		}
	}
}
