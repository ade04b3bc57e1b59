package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"sluice/meter"
	"sluice/platform/store"
	"sluice/platform/usage/usagetest"
)

// day0 is a UTC midnight; usage tests date their records from it.
var day0 = time.Date(2030, 3, 10, 0, 0, 0, 0, time.UTC)

func stored(recs []meter.Record, at time.Time) []store.UsageRecord {
	out := make([]store.UsageRecord, len(recs))
	for i, r := range recs {
		out[i] = store.UsageRecord{Record: r, ReceivedAt: at}
	}
	return out
}

func insertUsage(t *testing.T, s store.Store, recs []store.UsageRecord) []bool {
	t.Helper()
	var inserted []bool
	write(t, s, func(ctx context.Context, tx store.Tx) (err error) {
		inserted, err = tx.InsertUsageRecords(ctx, recs)
		return err
	})
	return inserted
}

func allRecords(t *testing.T, s store.Store, q store.RecordQuery) []store.UsageRecord {
	t.Helper()
	q.Limit = 1 << 30
	return read(t, s, func(ctx context.Context, tx store.Tx) ([]store.UsageRecord, error) {
		return tx.ListUsageRecords(ctx, q)
	})
}

func count(n int, v bool) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestUsageRecordsRoundTripAndDedup(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		if err := s.EnsureUsagePartitions(ctx, day0, day0.AddDate(0, 0, 1)); err != nil {
			t.Fatal(err)
		}
		full := usagetest.Record("r-full", day0.Add(90*time.Minute+123456*time.Microsecond), "gw-1")
		full.ClientRequestID, full.CacheWriteTokens, full.DeniedBy, full.ErrorCode = "client-1", 7, "p", "e"
		minimal := meter.Record{ID: "r-min", Time: day0.Add(26 * time.Hour), Resolution: meter.AuthFailed, Status: 401}
		in := stored([]meter.Record{full, minimal}, day0.Add(48*time.Hour))
		if got := insertUsage(t, s, in); !reflect.DeepEqual(got, []bool{true, true}) {
			t.Fatalf("first insert: %v", got)
		}
		got := allRecords(t, s, store.RecordQuery{})
		if want := []store.UsageRecord{in[1], in[0]}; !reflect.DeepEqual(got, want) {
			t.Fatalf("read back (newest first)\n%+v\nwant\n%+v", got, want)
		}

		// The same records again, and a batch overlapping them, with a
		// duplicate inside the batch: only the new record goes in.
		if got := insertUsage(t, s, in); !reflect.DeepEqual(got, []bool{false, false}) {
			t.Fatalf("resend: %v", got)
		}
		fresh := usagetest.Record("r-new", day0.Add(time.Hour), "gw-1")
		batch := stored([]meter.Record{full, fresh, fresh}, day0)
		if got := insertUsage(t, s, batch); !reflect.DeepEqual(got, []bool{false, true, false}) {
			t.Fatalf("overlapping batch: %v", got)
		}
		// The same id at another time is another record.
		other := full
		other.Time = other.Time.Add(time.Microsecond)
		if got := insertUsage(t, s, stored([]meter.Record{other}, day0)); !reflect.DeepEqual(got, []bool{true}) {
			t.Fatalf("same id, other ts: %v", got)
		}
		if n := len(allRecords(t, s, store.RecordQuery{})); n != 4 {
			t.Fatalf("%d records stored, want 4", n)
		}
	})
}

// More records than one INSERT statement holds.
func TestUsageRecordsLargeBatch(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		if err := s.EnsureUsagePartitions(ctx, day0, day0); err != nil {
			t.Fatal(err)
		}
		recs := stored(usagetest.Random(rand.New(rand.NewPCG(1, 2)), usagetest.Small(), 1234, "r", "gw-1", day0, 24*time.Hour), day0)
		if got := insertUsage(t, s, recs); !reflect.DeepEqual(got, count(len(recs), true)) {
			t.Fatal("not every record inserted")
		}
		again := append(slices.Clone(recs[1000:]), recs[:100]...)
		if got := insertUsage(t, s, again); !reflect.DeepEqual(got, count(len(again), false)) {
			t.Fatal("a resent record was inserted")
		}
		if n := len(allRecords(t, s, store.RecordQuery{})); n != len(recs) {
			t.Fatalf("%d records stored, want %d", n, len(recs))
		}
	})
}

func TestUsageRecordsFiltersAndPages(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		if err := s.EnsureUsagePartitions(ctx, day0, day0.AddDate(0, 0, 2)); err != nil {
			t.Fatal(err)
		}
		recs := stored(usagetest.Random(rand.New(rand.NewPCG(3, 4)), usagetest.Small(), 300, "r", "gw-1", day0, 48*time.Hour), day0)
		// Some records share a timestamp: the order falls back to the id.
		for i := 0; i < 20; i++ {
			recs[i].Time = day0.Add(5 * time.Hour)
		}
		insertUsage(t, s, recs)
		from, to := day0.Add(3*time.Hour), day0.Add(40*time.Hour)
		for _, f := range []store.UsageFilter{
			{},
			{Application: "app-1"},
			{Model: "model-0-1", Route: "provider-0"},
			{Resolution: "denied", Provider: "provider-1"},
			{KeyID: "key-2-0"},
		} {
			t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
				var want []store.UsageRecord
				for _, r := range recs {
					if r.Time.Before(from) || !r.Time.Before(to) || (f.Application != "" && r.Application != f.Application) ||
						(f.Model != "" && r.RequestedModel != f.Model) || (f.Route != "" && r.Route != f.Route) ||
						(f.Resolution != "" && r.Resolution.String() != f.Resolution) ||
						(f.Provider != "" && r.Provider != f.Provider) || (f.KeyID != "" && r.KeyID != f.KeyID) {
						continue
					}
					want = append(want, r)
				}
				slices.SortFunc(want, func(a, b store.UsageRecord) int {
					if c := b.Time.Compare(a.Time); c != 0 {
						return c
					}
					return -cmpString(a.ID, b.ID)
				})
				if len(want) == 0 {
					t.Fatal("the filter matches nothing: a useless case")
				}
				var got []store.UsageRecord
				var before *store.RecordKey
				for page := 0; ; page++ {
					rs := read(t, s, func(ctx context.Context, tx store.Tx) ([]store.UsageRecord, error) {
						return tx.ListUsageRecords(ctx, store.RecordQuery{Filter: f, From: from, To: to, Before: before, Limit: 7})
					})
					got = append(got, rs...)
					if len(rs) < 7 {
						break
					}
					last := rs[len(rs)-1]
					before = &store.RecordKey{Time: last.Time, ID: last.ID}
				}
				if !reflect.DeepEqual(ids(got), ids(want)) {
					t.Fatalf("pages\n%v\nwant\n%v", ids(got), ids(want))
				}
			})
		}
	})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func ids(rs []store.UsageRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func TestUsageRollups(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		h := day0.Add(2 * time.Hour)
		row := func(b time.Time, app, model string, class int, n int64) store.UsageRollup {
			return store.UsageRollup{Bucket: b,
				UsageDims:   store.UsageDims{Application: app, Provider: "p", Route: "p", Model: model, KeyID: "k-" + app, Resolution: "settled", StatusClass: class},
				UsageTotals: store.UsageTotals{Requests: n, PromptTokens: 10 * n, CachedTokens: n, CacheWriteTokens: 2 * n, CompletionTokens: 3 * n, ReasoningTokens: n, CostMicroUSD: 100 * n, LatencyMicros: 1000 * n}}
		}
		add := func(rows ...store.UsageRollup) {
			write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.AddUsageRollups(ctx, store.Hour, rows) })
		}
		add(row(h, "a", "m1", 2, 1), row(h, "b", "m1", 2, 2), row(h.Add(time.Hour), "a", "m2", 4, 4))
		add(row(h, "a", "m1", 2, 8)) // adds to the first row
		query := func(q store.UsageQuery) []store.UsageRollup {
			return read(t, s, func(ctx context.Context, tx store.Tx) ([]store.UsageRollup, error) { return tx.QueryUsage(ctx, q) })
		}
		got := query(store.UsageQuery{Granularity: store.Hour, From: day0, To: day0.AddDate(0, 0, 1),
			GroupBy: []store.UsageDim{store.DimApplication, store.DimProvider, store.DimRoute, store.DimModel, store.DimKey, store.DimResolution, store.DimStatusClass}})
		want := []store.UsageRollup{row(h, "a", "m1", 2, 9), row(h, "b", "m1", 2, 2), row(h.Add(time.Hour), "a", "m2", 4, 4)}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("every dimension\n%+v\nwant\n%+v", got, want)
		}
		// Grouped by nothing: one row per bucket, the dimensions zero.
		got = query(store.UsageQuery{Granularity: store.Hour, From: day0, To: day0.AddDate(0, 0, 1)})
		sum := func(b time.Time, n int64) store.UsageRollup {
			r := row(b, "", "", 0, n)
			r.UsageDims = store.UsageDims{}
			return r
		}
		if want := []store.UsageRollup{sum(h, 11), sum(h.Add(time.Hour), 4)}; !reflect.DeepEqual(got, want) {
			t.Fatalf("no dimension\n%+v\nwant\n%+v", got, want)
		}
		// Grouped by model, filtered to application a, from the second hour.
		got = query(store.UsageQuery{Granularity: store.Hour, From: h.Add(time.Hour), To: day0.AddDate(0, 0, 1),
			GroupBy: []store.UsageDim{store.DimModel}, Filter: store.UsageFilter{Application: "a"}})
		w := sum(h.Add(time.Hour), 4)
		w.Model = "m2"
		if !reflect.DeepEqual(got, []store.UsageRollup{w}) {
			t.Fatalf("filtered\n%+v\nwant\n%+v", got, []store.UsageRollup{w})
		}
		// The daily table is separate.
		if got := query(store.UsageQuery{Granularity: store.Day, From: day0, To: day0.AddDate(0, 0, 1)}); len(got) != 0 {
			t.Fatalf("daily rows: %+v", got)
		}
	})
}

func TestDeleteUsageBefore(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		if err := s.EnsureUsagePartitions(ctx, day0, day0.AddDate(0, 0, 3)); err != nil {
			t.Fatal(err)
		}
		// Twice is harmless.
		if err := s.EnsureUsagePartitions(ctx, day0, day0.AddDate(0, 0, 3)); err != nil {
			t.Fatal(err)
		}
		// 1,000 records a day over 3 days, deleted 100 at a time on SQLite.
		store.SetUsageDeleteBatch(s, 100)
		recs := stored(usagetest.Random(rand.New(rand.NewPCG(5, 6)), usagetest.Small(), 3000, "r", "gw-1", day0, 72*time.Hour), day0)
		insertUsage(t, s, recs)
		cutoff := day0.Add(36 * time.Hour) // the middle of the second day
		d, err := s.DeleteUsageBefore(ctx, cutoff)
		if err != nil {
			t.Fatal(err)
		}
		// PostgreSQL drops whole days; SQLite deletes to the microsecond.
		keepFrom := cutoff
		if s.Dialect() == "postgres" {
			keepFrom = day0.AddDate(0, 0, 1)
			if want := []string{"usage_records_p20300310"}; !reflect.DeepEqual(d.Partitions, want) {
				t.Fatalf("dropped %v, want %v", d.Partitions, want)
			}
		}
		var kept int
		for _, r := range recs {
			if !r.Time.Before(keepFrom) {
				kept++
			}
		}
		got := allRecords(t, s, store.RecordQuery{})
		if len(got) != kept || int(d.Records) != len(recs)-kept {
			t.Fatalf("kept %d, deleted %d; want %d, %d", len(got), d.Records, kept, len(recs)-kept)
		}
		if oldest := got[len(got)-1].Time; oldest.Before(keepFrom) {
			t.Fatalf("a record of %s survived", oldest)
		}
		// Nothing more to delete.
		if d, err := s.DeleteUsageBefore(ctx, cutoff); err != nil || d.Records != 0 || len(d.Partitions) != 0 {
			t.Fatalf("second pass: %+v, %v", d, err)
		}
	})
}

// TestMeteredUsage: the sums by application and served model of one
// provider's records with a usage source in [from, to), checked against the
// same sums computed from the records.
func TestMeteredUsage(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		if err := s.EnsureUsagePartitions(ctx, day0, day0.AddDate(0, 0, 2)); err != nil {
			t.Fatal(err)
		}
		recs := usagetest.Random(rand.New(rand.NewPCG(3, 4)), usagetest.Small(), 2000, "r", "gw-1", day0, 48*time.Hour)
		// A record without a served model counts under its requested one.
		recs[0].Provider, recs[0].ServedModel, recs[0].UsageSource, recs[0].Time = "provider-0", "", meter.UsageCounted, day0.Add(7*time.Hour)
		insertUsage(t, s, stored(recs, day0))
		from, to := day0.Add(6*time.Hour), day0.Add(30*time.Hour)
		want := map[[2]string]store.MeteredUsage{}
		for _, r := range recs {
			if r.Provider != "provider-0" || r.UsageSource == meter.UsageNone || r.Time.Before(from) || !r.Time.Before(to) {
				continue
			}
			model := r.ServedModel
			if model == "" {
				model = r.RequestedModel
			}
			m := want[[2]string{r.Application, model}]
			m.Application, m.Model = r.Application, model
			m.Requests++
			m.PromptTokens += r.PromptTokens
			m.CompletionTokens += r.CompletionTokens
			want[[2]string{r.Application, model}] = m
		}
		got := read(t, s, func(ctx context.Context, tx store.Tx) ([]store.MeteredUsage, error) {
			return tx.MeteredUsage(ctx, "provider-0", from, to)
		})
		if len(got) != len(want) || len(got) < 4 {
			t.Fatalf("%d rows, want %d", len(got), len(want))
		}
		for i, g := range got {
			if w := want[[2]string{g.Application, g.Model}]; g != w {
				t.Errorf("%s %s: %+v, want %+v", g.Application, g.Model, g, w)
			}
			if i > 0 && (got[i-1].Application > g.Application || got[i-1].Application == g.Application && got[i-1].Model >= g.Model) {
				t.Errorf("rows out of order at %d", i)
			}
		}
		got = read(t, s, func(ctx context.Context, tx store.Tx) ([]store.MeteredUsage, error) {
			return tx.MeteredUsage(ctx, "provider-0", to, to.Add(time.Hour))
		})
		for _, g := range got {
			if g.Requests == 0 {
				t.Errorf("an empty row %+v", g)
			}
		}
	})
}

// TestUsageDeniedMigration checks that migration 6 fills the denied tables
// from the full tables as AddUsageRollups keeps them: the answers filtered
// to the denied requests (read from the denied tables) are the same after a
// migration down and up again.
func TestUsageDeniedMigration(t *testing.T) {
	engines(t, func(t *testing.T, s store.Store) {
		h := day0.Add(2 * time.Hour)
		row := func(app, key, resolution string, n int64) store.UsageRollup {
			return store.UsageRollup{Bucket: h,
				UsageDims:   store.UsageDims{Application: app, Provider: "p", Route: "p", Model: "m", KeyID: key, Resolution: resolution, StatusClass: 4},
				UsageTotals: store.UsageTotals{Requests: n, PromptTokens: 10 * n, CompletionTokens: 3 * n, CostMicroUSD: 100 * n, LatencyMicros: 1000 * n}}
		}
		rows := []store.UsageRollup{row("a", "k1", "denied", 1), row("a", "k2", "denied", 2), row("a", "k1", "settled", 4), row("b", "k3", "denied", 8)}
		slices.SortFunc(rows, store.CompareRollups)
		for _, g := range []store.Granularity{store.Hour, store.Day} {
			write(t, s, func(ctx context.Context, tx store.Tx) error { return tx.AddUsageRollups(ctx, g, rows) })
		}
		denied := func() [][]store.UsageRollup {
			var out [][]store.UsageRollup
			for _, g := range []store.Granularity{store.Hour, store.Day} {
				for _, f := range []store.UsageFilter{{Resolution: "denied"}, {}} {
					out = append(out, read(t, s, func(ctx context.Context, tx store.Tx) ([]store.UsageRollup, error) {
						return tx.QueryUsage(ctx, store.UsageQuery{Granularity: g, From: day0, To: day0.AddDate(0, 0, 1),
							GroupBy: []store.UsageDim{store.DimApplication}, Filter: f})
					}))
				}
			}
			return out
		}
		want := denied()
		if len(want[0]) != 2 || want[0][0].Requests != 3 || want[0][1].Requests != 8 || want[1][0].Requests != 7 {
			t.Fatalf("denied by application, then all: %+v", want[:2])
		}
		// Down drops the denied tables: up again fills them from the full
		// tables alone.
		if err := store.MigrateTo(s, 5); err != nil {
			t.Fatal(err)
		}
		if err := store.MigrateTo(s, 6); err != nil {
			t.Fatal(err)
		}
		if got := denied(); !reflect.DeepEqual(got, want) {
			t.Fatalf("after migration 6\n%+v\nwant\n%+v", got, want)
		}
	})
}
