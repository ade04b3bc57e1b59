// Package usage is the platform's side of the usage meter (docs/meter.md):
// it decodes the batches of records gateways send, stores each record once
// with the hourly and daily rollups it adds to in the same transaction, and
// applies the raw records' retention. platform/api serves it over HTTP; it
// imports the store and the record (package meter), never HTTP.
package usage

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"sluice/meter"
	"sluice/platform/store"
)

// Batch limits: a batch of more records is refused whole (413); the API
// refuses a body of more bytes the same way.
const (
	MaxBatchRecords = 5000
	MaxBatchBytes   = 4 << 20
)

// DefaultRetention is how long raw records are kept when Options.Retention
// is 0.
const DefaultRetention = 30 * 24 * time.Hour

// MaxFuture is how far after the platform's clock a record may be dated: a
// later one means the gateway's clock is wrong, and its batch is refused.
const MaxFuture = time.Hour

// retentionMargin delays deletion past the retention, so that a platform
// replica whose clock is behind by less than it never takes a record whose
// raw row another replica deleted for new (and counts it a second time).
const retentionMargin = time.Hour

// partitionsAhead is how many days after today Maintain keeps partitions
// ready for (PostgreSQL).
const partitionsAhead = 3

// maxProblems bounds the refused records a BatchError lists.
const maxProblems = 20

// ErrTooManyRecords refuses a batch of more than MaxBatchRecords records.
var ErrTooManyRecords = fmt.Errorf("usage: a batch holds at most %d records", MaxBatchRecords)

// RecordError says why one record of a batch was refused.
type RecordError struct {
	// Index is the record's position in the batch, from 0: the batch's line
	// Index+1.
	Index int
	// ID is the record's id, when it could be read.
	ID string
	// Field is the record's field at fault ("" for the whole record).
	Field string
	Err   error
}

func (e RecordError) Error() string {
	s := fmt.Sprintf("line %d", e.Index+1)
	if e.ID != "" {
		s += fmt.Sprintf(" (id %q)", e.ID)
	}
	return s + ": " + strings.TrimPrefix(e.Err.Error(), "meter: ")
}

func (e RecordError) Unwrap() error { return e.Err }

// BatchError refuses a whole batch: nothing of it was stored.
type BatchError struct {
	// Records are the refused records, at most maxProblems of them, in
	// batch order; More counts the others.
	Records []RecordError
	More    int
}

func (e *BatchError) Error() string {
	s := "usage: batch refused: " + e.Records[0].Error()
	if n := len(e.Records) - 1 + e.More; n > 0 {
		s += fmt.Sprintf(" (and %d more refused records)", n)
	}
	return s
}

// NewerVersion reports whether a refused record was written by a newer meter
// version than this platform reads: the gateway should keep the batch until
// the platform is upgraded.
func (e *BatchError) NewerVersion() bool {
	for _, r := range e.Records {
		if errors.Is(r.Err, meter.ErrNewerVersion) {
			return true
		}
	}
	return false
}

func (e *BatchError) add(r RecordError) {
	if len(e.Records) < maxProblems {
		e.Records = append(e.Records, r)
	} else {
		e.More++
	}
}

func (e *BatchError) orNil() error {
	if len(e.Records) == 0 {
		return nil
	}
	return e
}

// DecodeBatch reads a batch: JSON lines, one record per line as
// meter.Record.AppendJSON writes it, every line ending with "\n" (the last
// one may not). An empty body is a batch of none. Any record that
// meter.Decode refuses (malformed, of a newer meter version, ...) refuses the
// batch with a *BatchError; more than MaxBatchRecords records with
// ErrTooManyRecords.
func DecodeBatch(body []byte) ([]meter.Record, error) {
	body = bytes.TrimSuffix(body, []byte("\n"))
	if len(body) == 0 {
		return nil, nil
	}
	if bytes.Count(body, []byte("\n")) >= MaxBatchRecords {
		return nil, ErrTooManyRecords
	}
	lines := bytes.Split(body, []byte("\n"))
	recs := make([]meter.Record, 0, len(lines))
	var be BatchError
	for i, line := range lines {
		r, err := meter.Decode(line)
		if err != nil {
			field := ""
			if errors.Is(err, meter.ErrNewerVersion) {
				field = "v"
			}
			be.add(RecordError{Index: i, Field: field, Err: err})
			continue
		}
		recs = append(recs, r)
	}
	if err := be.orNil(); err != nil {
		return nil, err
	}
	return recs, nil
}

// Options configure a Service.
type Options struct {
	Store store.Store
	// Retention is how long raw records are kept: DefaultRetention when 0,
	// forever when negative. Rollups are kept forever.
	Retention time.Duration
	// Now is the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// Stored, when set, is called after each batch committed with the
	// records it stored for the first time (not duplicates); it must not
	// block (the budget alerts' detector queues them).
	Stored func(recs []meter.Record)
}

// Service ingests batches and applies retention. Safe for concurrent use.
type Service struct {
	store     store.Store
	retention time.Duration
	now       func() time.Time
	log       *slog.Logger
	stored    func(recs []meter.Record)

	mu sync.Mutex
	// ready holds the days (Unix µs of their start) whose partitions this
	// process has ensured.
	ready map[int64]bool
}

// New builds a Service.
func New(o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("usage: Options.Store is required")
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{store: o.Store, retention: o.Retention, now: o.Now, log: o.Logger, stored: o.Stored, ready: map[int64]bool{}}, nil
}

// Retention is how long raw records are kept (negative: forever).
func (s *Service) Retention() time.Duration { return s.retention }

// Result is what Ingest did with a batch.
type Result struct {
	// Accepted records were stored and added to the rollups.
	Accepted int
	// Duplicates were stored before (or earlier in the batch): skipped.
	Duplicates int
	// Expired records are dated before the retention: older than any raw
	// record kept, so they cannot be told apart from a resend of one already
	// deleted, and are skipped rather than risk counting them twice.
	Expired int
}

// Ingest stores a batch of records sent by the gateway gatewayID. Every
// record must name that gateway (a record without gateway_id is given it: a
// gateway need not know the id its token stands for) and be dated at most MaxFuture after the
// platform's clock, else the batch is refused whole (*BatchError). Each
// record not stored before is stored and added to the hourly and daily
// rollups in one transaction, so a resend (of a batch, or of any records
// of it) never counts twice, also when resends race.
func (s *Service) Ingest(ctx context.Context, gatewayID string, recs []meter.Record) (Result, error) {
	now := s.now()
	var be BatchError
	for i := range recs {
		r := &recs[i]
		if r.GatewayID == "" {
			r.GatewayID = gatewayID
		}
		switch {
		case r.GatewayID != gatewayID:
			be.add(RecordError{Index: i, ID: r.ID, Field: "gateway_id",
				Err: fmt.Errorf("gateway_id %q is not the sending gateway %q: a gateway sends only its own records", r.GatewayID, gatewayID)})
		case r.Time.After(now.Add(MaxFuture)):
			be.add(RecordError{Index: i, ID: r.ID, Field: "ts",
				Err: fmt.Errorf("ts %s is %s after the platform's clock (at most %s): check the gateway's clock",
					r.Time.UTC().Format(time.RFC3339Nano), r.Time.Sub(now).Round(time.Second), MaxFuture)})
		}
	}
	if err := be.orNil(); err != nil {
		return Result{}, err
	}
	var res Result
	var fresh []store.UsageRecord
	cutoff := s.acceptFrom(now)
	keep := make([]store.UsageRecord, 0, len(recs))
	for i := range recs {
		if recs[i].Time.Before(cutoff) {
			res.Expired++
			continue
		}
		keep = append(keep, store.UsageRecord{Record: recs[i], ReceivedAt: now})
	}
	if res.Expired > 0 {
		s.log.Warn("usage records older than the retention skipped", "gateway", gatewayID, "records", res.Expired,
			"retention", s.retention.String())
	}
	if len(keep) == 0 {
		return res, nil
	}
	slices.SortFunc(keep, func(a, b store.UsageRecord) int {
		return cmp.Or(cmp.Compare(a.Time.UnixMicro(), b.Time.UnixMicro()), cmp.Compare(a.ID, b.ID))
	})
	if err := s.ensurePartitions(ctx, keep[0].Time, keep[len(keep)-1].Time); err != nil {
		return Result{}, err
	}
	err := s.store.Write(ctx, func(tx store.Tx) error {
		inserted, err := tx.InsertUsageRecords(ctx, keep)
		if err != nil {
			return err
		}
		fresh = keep[:0:0]
		for i, ok := range inserted {
			if ok {
				fresh = append(fresh, keep[i])
			}
		}
		res.Accepted, res.Duplicates = len(fresh), len(keep)-len(fresh)
		for _, g := range []store.Granularity{store.Hour, store.Day} {
			if err := tx.AddUsageRollups(ctx, g, Rollups(fresh, g)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	if s.stored != nil && len(fresh) > 0 {
		recs := make([]meter.Record, len(fresh))
		for i := range fresh {
			recs[i] = fresh[i].Record
		}
		s.stored(recs)
	}
	return res, nil
}

// acceptFrom is the oldest record time Ingest stores at now (the zero time
// when records are kept forever).
func (s *Service) acceptFrom(now time.Time) time.Time {
	if s.retention < 0 {
		return time.Time{}
	}
	return now.Add(-s.retention)
}

// ensurePartitions makes the days from first to last insertable, asking the
// store only for days this process has not ensured before.
func (s *Service) ensurePartitions(ctx context.Context, first, last time.Time) error {
	from, to := store.Day.Truncate(first), store.Day.Truncate(last)
	s.mu.Lock()
	missing := false
	for d := from; !d.After(to); d = d.AddDate(0, 0, 1) {
		missing = missing || !s.ready[d.UnixMicro()]
	}
	s.mu.Unlock()
	if !missing {
		return nil
	}
	if err := s.store.EnsureUsagePartitions(ctx, from, to); err != nil {
		return err
	}
	s.mu.Lock()
	for d := from; !d.After(to); d = d.AddDate(0, 0, 1) {
		s.ready[d.UnixMicro()] = true
	}
	s.mu.Unlock()
	return nil
}

// rollupKey identifies a rollup row.
type rollupKey struct {
	bucket int64
	store.UsageDims
}

// Rollups sums recs into rows of granularity g, sorted by bucket and
// dimensions (the order AddUsageRollups wants).
func Rollups(recs []store.UsageRecord, g store.Granularity) []store.UsageRollup {
	sums := map[rollupKey]*store.UsageRollup{}
	for i := range recs {
		r := &recs[i].Record
		b := g.Truncate(r.Time)
		k := rollupKey{b.UnixMicro(), Dims(r)}
		row := sums[k]
		if row == nil {
			row = &store.UsageRollup{Bucket: b, UsageDims: k.UsageDims}
			sums[k] = row
		}
		row.Add(Totals(r))
	}
	out := make([]store.UsageRollup, 0, len(sums))
	for _, row := range sums {
		out = append(out, *row)
	}
	slices.SortFunc(out, store.CompareRollups)
	return out
}

// Dims are the rollup dimensions of a record: its model is the requested
// one (what the client asked for, also when the request never reached the
// provider); its status class is Status/100, 0 when no status was sent.
func Dims(r *meter.Record) store.UsageDims {
	class := 0
	if r.Status >= 100 && r.Status <= 599 {
		class = r.Status / 100
	}
	return store.UsageDims{Application: r.Application, Provider: r.Provider, Route: r.Route, Model: r.RequestedModel,
		KeyID: r.KeyID, Resolution: r.Resolution.String(), StatusClass: class}
}

// Totals are what one record adds to its rollup rows.
func Totals(r *meter.Record) store.UsageTotals {
	return store.UsageTotals{Requests: 1, PromptTokens: r.PromptTokens, CachedTokens: r.CachedTokens,
		CacheWriteTokens: r.CacheWriteTokens, CompletionTokens: r.CompletionTokens, ReasoningTokens: r.ReasoningTokens,
		CostMicroUSD: r.CostMicroUSD, LatencyMicros: r.LatencyMicros}
}

// Maintain applies retention now, then every interval until ctx ends:
// partitions for today and the next days are made ready (PostgreSQL), and
// raw records older than the retention (plus a margin of an hour) are
// deleted. Failures are logged and retried at the next interval.
func (s *Service) Maintain(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.Retain(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("usage retention failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Retain runs one retention pass (see Maintain).
func (s *Service) Retain(ctx context.Context) error {
	now := s.now()
	today := store.Day.Truncate(now)
	if err := s.ensurePartitions(ctx, today, today.AddDate(0, 0, partitionsAhead)); err != nil {
		return err
	}
	if s.retention < 0 {
		return nil
	}
	cutoff := now.Add(-s.retention - retentionMargin)
	d, err := s.store.DeleteUsageBefore(ctx, cutoff)
	if err != nil {
		return err
	}
	s.mu.Lock()
	for day := range s.ready {
		if day < cutoff.UnixMicro() {
			delete(s.ready, day)
		}
	}
	s.mu.Unlock()
	if d.Records > 0 || len(d.Partitions) > 0 {
		s.log.Info("usage records past the retention deleted", "records", d.Records, "partitions", len(d.Partitions),
			"before", cutoff.UTC().Format(time.RFC3339))
	}
	return nil
}
