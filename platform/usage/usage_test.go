package usage_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/meter"
	"sluice/platform/store"
	"sluice/platform/store/storetest"
	"sluice/platform/usage"
	"sluice/platform/usage/usagetest"
)

// now is the platform's clock in these tests; records are dated before it.
var now = time.Date(2030, 3, 12, 15, 30, 0, 0, time.UTC)

type clock struct{ us atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.us.Store(t.UnixMicro())
	return c
}

func (c *clock) Now() time.Time      { return time.UnixMicro(c.us.Load()).UTC() }
func (c *clock) Set(t time.Time)     { c.us.Store(t.UnixMicro()) }
func (c *clock) Add(d time.Duration) { c.us.Add(d.Microseconds()) }

func newService(t *testing.T, s store.Store, c *clock, retention time.Duration) *usage.Service {
	t.Helper()
	svc, err := usage.New(usage.Options{Store: s, Retention: retention, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func ingest(t *testing.T, svc *usage.Service, recs []meter.Record) usage.Result {
	t.Helper()
	res, err := svc.Ingest(context.Background(), "gw-1", recs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func random(seed uint64, n int, prefix string) []meter.Record {
	return usagetest.Random(rand.New(rand.NewPCG(seed, seed+1)), usagetest.Small(), n, prefix, "gw-1", now.Add(-50*time.Hour), 50*time.Hour)
}

func TestDecodeBatch(t *testing.T) {
	a, b := usagetest.Record("a", now, "gw-1"), usagetest.Record("b", now, "gw-1")
	newer := strings.Replace(string(a.AppendJSON(nil)), `{"v":1,`, `{"v":2,`, 1)
	tests := []struct {
		name    string
		body    string
		ids     []string
		refused []int // indexes of the refused records
		newer   bool
		tooMany bool
	}{
		{name: "empty", body: ""},
		{name: "only a newline", body: "\n"},
		{name: "two", body: string(usagetest.Batch([]meter.Record{a, b})), ids: []string{"a", "b"}},
		{name: "no final newline", body: strings.TrimSuffix(string(usagetest.Batch([]meter.Record{a, b})), "\n"), ids: []string{"a", "b"}},
		{name: "malformed second", body: string(a.AppendJSON(nil)) + "\n{\"v\":1,\n", refused: []int{1}},
		{name: "unknown field", body: strings.Replace(string(a.AppendJSON(nil)), `"status"`, `"prompt":"hi","status"`, 1) + "\n", refused: []int{0}},
		{name: "blank line inside", body: string(a.AppendJSON(nil)) + "\n\n" + string(b.AppendJSON(nil)) + "\n", refused: []int{1}},
		{name: "newer version", body: string(a.AppendJSON(nil)) + "\n" + newer + "\n", refused: []int{1}, newer: true},
		{name: "too many", body: strings.Repeat(string(a.AppendJSON(nil))+"\n", usage.MaxBatchRecords+1), tooMany: true},
		{name: "at the limit", body: strings.Repeat(string(a.AppendJSON(nil))+"\n", usage.MaxBatchRecords)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := usage.DecodeBatch([]byte(tt.body))
			if tt.tooMany {
				if !errors.Is(err, usage.ErrTooManyRecords) {
					t.Fatalf("err %v, want ErrTooManyRecords", err)
				}
				return
			}
			if tt.refused != nil {
				var be *usage.BatchError
				if !errors.As(err, &be) {
					t.Fatalf("err %v, want a BatchError", err)
				}
				var got []int
				for _, r := range be.Records {
					got = append(got, r.Index)
				}
				if !reflect.DeepEqual(got, tt.refused) || be.NewerVersion() != tt.newer || recs != nil {
					t.Fatalf("refused %v newer %v (%v), want %v newer %v", got, be.NewerVersion(), err, tt.refused, tt.newer)
				}
				if tt.newer && !strings.Contains(err.Error(), "v 2, this binary reads up to 1") {
					t.Fatalf("the error does not name the version: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "at the limit" {
				if len(recs) != usage.MaxBatchRecords {
					t.Fatalf("%d records", len(recs))
				}
				return
			}
			var ids []string
			for _, r := range recs {
				ids = append(ids, r.ID)
			}
			if !reflect.DeepEqual(ids, tt.ids) {
				t.Fatalf("ids %v, want %v", ids, tt.ids)
			}
		})
	}
}

func TestIngestRefusesAndExpires(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		svc := newService(t, s, newClock(now), 48*time.Hour)
		ok := usagetest.Record("ok", now.Add(-time.Hour), "gw-1")
		other := usagetest.Record("other", now.Add(-time.Hour), "gw-2")
		future := usagetest.Record("future", now.Add(usage.MaxFuture+time.Second), "gw-1")
		soon := usagetest.Record("soon", now.Add(usage.MaxFuture), "gw-1")
		old := usagetest.Record("old", now.Add(-48*time.Hour-time.Microsecond), "gw-1")
		for _, tt := range []struct {
			name  string
			recs  []meter.Record
			field string
		}{
			{"another gateway's record", []meter.Record{ok, other}, "gateway_id"},
			{"a record dated too far ahead", []meter.Record{future, ok}, "ts"},
		} {
			_, err := svc.Ingest(ctx, "gw-1", tt.recs)
			var be *usage.BatchError
			if !errors.As(err, &be) || len(be.Records) != 1 || be.Records[0].Field != tt.field {
				t.Fatalf("%s: %v, want a BatchError on %s", tt.name, err, tt.field)
			}
		}
		// Nothing of the refused batches was stored.
		if res := ingest(t, svc, []meter.Record{ok, soon, old}); res != (usage.Result{Accepted: 2, Expired: 1}) {
			t.Fatalf("result %+v", res)
		}
		if got := records(t, s); !reflect.DeepEqual(ids(got), []string{"soon", "ok"}) {
			t.Fatalf("stored %v", ids(got))
		}
	})
}

func TestIngestDedup(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, s store.Store) {
		svc := newService(t, s, newClock(now), 0)
		batch := random(1, 700, "a")
		if res := ingest(t, svc, batch); res != (usage.Result{Accepted: 700}) {
			t.Fatalf("first: %+v", res)
		}
		if res := ingest(t, svc, batch); res != (usage.Result{Duplicates: 700}) {
			t.Fatalf("the same batch again: %+v", res)
		}
		// Overlapping: the last 200 of the first batch, 300 new ones, and
		// one of them twice.
		next := random(2, 300, "b")
		overlap := append(append(append([]meter.Record{}, batch[500:]...), next...), next[7])
		if res := ingest(t, svc, overlap); res != (usage.Result{Accepted: 300, Duplicates: 201}) {
			t.Fatalf("overlapping: %+v", res)
		}
		checkRollups(t, s, 1000)
	})
}

// Concurrent ingests of the same records (a gateway resending while its
// first send is still in flight, on several platform replicas): each
// record is counted once, and no ingest fails (no deadlock between
// overlapping batches inserted in different orders).
func TestConcurrentIngestOfTheSameRecords(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, s store.Store) {
		svc := newService(t, s, newClock(now), 0)
		pool := random(3, 2000, "c")
		const workers = 6
		var wg sync.WaitGroup
		results := make([]usage.Result, workers)
		errs := make([]error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 9))
				for range 5 {
					// A random window of the pool, shuffled.
					lo := rng.IntN(1500)
					batch := append([]meter.Record{}, pool[lo:lo+500]...)
					rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
					res, err := svc.Ingest(context.Background(), "gw-1", batch)
					if err != nil {
						errs[w] = err
						return
					}
					results[w].Accepted += res.Accepted
					results[w].Duplicates += res.Duplicates
				}
			}()
		}
		wg.Wait()
		var accepted, total int
		for w := range workers {
			if errs[w] != nil {
				t.Fatalf("worker %d: %v", w, errs[w])
			}
			accepted += results[w].Accepted
			total += results[w].Accepted + results[w].Duplicates
		}
		stored := len(records(t, s))
		if accepted != stored || total != workers*5*500 {
			t.Fatalf("accepted %d of %d, %d stored", accepted, total, stored)
		}
		checkRollups(t, s, stored)
	})
}

// After random batches (fresh records, resends, overlaps, in any order),
// the rollups equal the aggregation of the raw rows stored, at both
// granularities.
func TestRollupsEqualRawAggregation(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, s store.Store) {
		svc := newService(t, s, newClock(now), 0)
		pool := random(4, 3000, "d")
		rng := rand.New(rand.NewPCG(10, 11))
		for range 30 {
			batch := make([]meter.Record, rng.IntN(300)+1)
			for i := range batch {
				batch[i] = pool[rng.IntN(len(pool))]
			}
			ingest(t, svc, batch)
		}
		n := len(records(t, s))
		if n < 2000 {
			t.Fatalf("only %d distinct records: the test does not cover much", n)
		}
		checkRollups(t, s, n)
	})
}

func records(t *testing.T, s store.Store) []store.UsageRecord {
	t.Helper()
	var out []store.UsageRecord
	ctx := context.Background()
	if err := s.Read(ctx, func(tx store.Tx) (err error) {
		out, err = tx.ListUsageRecords(ctx, store.RecordQuery{Limit: 1 << 30})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func ids(rs []store.UsageRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

var allDims = []store.UsageDim{store.DimApplication, store.DimProvider, store.DimRoute, store.DimModel, store.DimKey,
	store.DimResolution, store.DimStatusClass}

// checkRollups compares the hourly and daily rollups with the aggregation
// of the n raw rows stored, grouped by every dimension (the full tables)
// and by dimensions the summary tables hold.
func checkRollups(t *testing.T, s store.Store, n int) {
	t.Helper()
	raw := records(t, s)
	if len(raw) != n {
		t.Fatalf("%d raw rows, want %d", len(raw), n)
	}
	ctx := context.Background()
	for _, g := range []store.Granularity{store.Hour, store.Day} {
		for _, dims := range [][]store.UsageDim{allDims, {store.DimKey, store.DimResolution},
			{store.DimApplication, store.DimProvider, store.DimRoute, store.DimModel}, {store.DimModel}, nil} {
			want := project(usage.Rollups(raw, g), dims)
			var got []store.UsageRollup
			if err := s.Read(ctx, func(tx store.Tx) (err error) {
				got, err = tx.QueryUsage(ctx, store.UsageQuery{Granularity: g, From: now.AddDate(0, 0, -10), To: now.AddDate(0, 0, 1), GroupBy: dims})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s rollups by %v (%d rows) differ from the raw aggregation (%d rows)%s", g, dims, len(got), len(want), firstDiff(got, want))
			}
			var total int64
			for _, r := range got {
				total += r.Requests
			}
			if total != int64(n) {
				t.Fatalf("%s rollups by %v count %d requests, want %d", g, dims, total, n)
			}
			// One outcome: the denied ones are kept apart in the summary
			// tables too, the others come from the full tables.
			for _, resolution := range []string{meter.Denied.String(), meter.Settled.String()} {
				var only []store.UsageRollup
				for _, r := range usage.Rollups(raw, g) {
					if r.Resolution == resolution {
						only = append(only, r)
					}
				}
				if len(only) == 0 {
					t.Fatalf("no %s records among the %d: the filter is not tested", resolution, n)
				}
				want := project(only, dims)
				var got []store.UsageRollup
				if err := s.Read(ctx, func(tx store.Tx) (err error) {
					got, err = tx.QueryUsage(ctx, store.UsageQuery{Granularity: g, From: now.AddDate(0, 0, -10), To: now.AddDate(0, 0, 1),
						GroupBy: dims, Filter: store.UsageFilter{Resolution: resolution}})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s rollups by %v of the %s records (%d rows) differ from the raw aggregation (%d rows)%s", g, dims, resolution, len(got), len(want), firstDiff(got, want))
				}
			}
		}
	}
}

// project sums rows over the dimensions not in dims, as a query grouped by
// dims answers.
func project(rows []store.UsageRollup, dims []store.UsageDim) []store.UsageRollup {
	keep := map[store.UsageDim]bool{}
	for _, d := range dims {
		keep[d] = true
	}
	type key struct {
		bucket time.Time
		store.UsageDims
	}
	sums := map[key]*store.UsageRollup{}
	var out []store.UsageRollup
	for _, r := range rows {
		var d store.UsageDims
		for dim, set := range map[store.UsageDim]func(){
			store.DimApplication: func() { d.Application = r.Application }, store.DimProvider: func() { d.Provider = r.Provider },
			store.DimRoute: func() { d.Route = r.Route }, store.DimModel: func() { d.Model = r.Model },
			store.DimKey: func() { d.KeyID = r.KeyID }, store.DimResolution: func() { d.Resolution = r.Resolution },
			store.DimStatusClass: func() { d.StatusClass = r.StatusClass },
		} {
			if keep[dim] {
				set()
			}
		}
		k := key{r.Bucket, d}
		if sums[k] == nil {
			sums[k] = &store.UsageRollup{Bucket: r.Bucket, UsageDims: d}
		}
		sums[k].Add(r.UsageTotals)
	}
	for _, r := range sums {
		out = append(out, *r)
	}
	slices.SortFunc(out, store.CompareRollups)
	return out
}

func firstDiff(got, want []store.UsageRollup) string {
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			return fmt.Sprintf(": row %d\n%+v\nwant\n%+v", i, got[i], want[i])
		}
	}
	return ""
}

func TestRetention(t *testing.T) {
	storetest.Engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		c := newClock(now)
		svc := newService(t, s, c, 24*time.Hour)
		// Records over the last day and a half (from the day before
		// yesterday 12:00 would be expired: retention 24 h).
		recs := usagetest.Random(rand.New(rand.NewPCG(7, 8)), usagetest.Small(), 2000, "e", "gw-1", now.Add(-24*time.Hour), 24*time.Hour)
		if res := ingest(t, svc, recs); res.Accepted != 2000 {
			t.Fatalf("%+v", res)
		}
		rollupsBefore := rollupTotal(t, s)
		// Two days later, everything is past the retention and its margin.
		c.Add(50 * time.Hour)
		if err := svc.Retain(ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(records(t, s)); n != 0 {
			t.Fatalf("%d raw records left", n)
		}
		if got := rollupTotal(t, s); got != rollupsBefore {
			t.Fatalf("rollups changed by retention: %+v, was %+v", got, rollupsBefore)
		}
		// A resend of the deleted records is expired: never counted again.
		if res := ingest(t, svc, recs); res != (usage.Result{Expired: 2000}) {
			t.Fatalf("resend after retention: %+v", res)
		}
		// Retain made the partitions of the next days ready: a record dated
		// three days ahead goes in without Ingest's own check. (On SQLite
		// there are no partitions; on PostgreSQL a day beyond has none.)
		today := store.Day.Truncate(c.Now())
		for _, tt := range []struct {
			at time.Time
			ok bool
		}{{today.AddDate(0, 0, 3).Add(23 * time.Hour), true}, {today.AddDate(0, 0, 5), s.Dialect() == "sqlite"}} {
			err := s.Write(ctx, func(tx store.Tx) error {
				_, err := tx.InsertUsageRecords(ctx, []store.UsageRecord{{Record: usagetest.Record("ahead", tt.at, "gw-1"), ReceivedAt: now}})
				return err
			})
			if (err == nil) != tt.ok {
				t.Fatalf("insert at %s: %v, want ok=%v", tt.at, err, tt.ok)
			}
		}
	})
}

func rollupTotal(t *testing.T, s store.Store) store.UsageTotals {
	t.Helper()
	ctx := context.Background()
	var sum store.UsageTotals
	for _, g := range []store.Granularity{store.Hour, store.Day} {
		if err := s.Read(ctx, func(tx store.Tx) error {
			rows, err := tx.QueryUsage(ctx, store.UsageQuery{Granularity: g, From: now.AddDate(0, 0, -10), To: now.AddDate(0, 0, 10)})
			for _, r := range rows {
				sum.Add(r.UsageTotals)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	return sum
}
