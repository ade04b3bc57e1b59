package store

// The usage meter's tables (migrations 00002_usage): raw records and their
// hourly and daily rollups. The queries follow the rules of queries.go (one
// text for both engines, $n placeholders) except the raw table's
// maintenance, which is engine-specific: PostgreSQL partitions it by day and
// drops partitions, SQLite deletes in batches.

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"sluice/meter"
)

// UsageRecord is a stored usage record: the record as the gateway sent it and
// when the platform stored it. A record is identified by (Time, ID): a
// resend carries both unchanged.
type UsageRecord struct {
	meter.Record
	ReceivedAt time.Time
}

// Granularity is a rollup's bucket size.
type Granularity string

// The rollup granularities. Buckets are aligned to the hour and the UTC day.
const (
	Hour Granularity = "hour"
	Day  Granularity = "day"
)

// Truncate returns the start of t's bucket (UTC).
func (g Granularity) Truncate(t time.Time) time.Time {
	t = t.UTC()
	if g == Day {
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	}
	return t.Truncate(time.Hour)
}

// Step is the bucket's length.
func (g Granularity) Step() time.Duration {
	if g == Day {
		return 24 * time.Hour
	}
	return time.Hour
}

// rollupKind is one of the rollup tables of a granularity.
type rollupKind int

const (
	fullRollup    rollupKind = iota // every dimension
	summaryRollup                   // without key, resolution and status class
	deniedRollup                    // the summary of the denied requests alone
)

// table names the rollup table of granularity g and kind k.
func (g Granularity) table(k rollupKind) string {
	t := "usage_hourly"
	if g == Day {
		t = "usage_daily"
	}
	switch k {
	case summaryRollup:
		t += "_summary"
	case deniedRollup:
		t += "_denied"
	}
	return t
}

// UsageDims are a rollup row's dimensions. Model is the requested model;
// StatusClass is Status/100 (0: no status was sent).
type UsageDims struct {
	Application string
	Provider    string
	Route       string
	Model       string
	KeyID       string
	Resolution  string
	StatusClass int
}

// UsageTotals are a rollup row's sums. Units as in meter.Record; LatencyMicros
// is the sum of the records' latencies.
type UsageTotals struct {
	Requests         int64
	PromptTokens     int64
	CachedTokens     int64
	CacheWriteTokens int64
	CompletionTokens int64
	ReasoningTokens  int64
	CostMicroUSD     int64
	LatencyMicros    int64
}

// Add adds o to u.
func (u *UsageTotals) Add(o UsageTotals) {
	u.Requests += o.Requests
	u.PromptTokens += o.PromptTokens
	u.CachedTokens += o.CachedTokens
	u.CacheWriteTokens += o.CacheWriteTokens
	u.CompletionTokens += o.CompletionTokens
	u.ReasoningTokens += o.ReasoningTokens
	u.CostMicroUSD += o.CostMicroUSD
	u.LatencyMicros += o.LatencyMicros
}

// UsageRollup is one rollup row: the totals of the records of one bucket with
// the same dimensions.
type UsageRollup struct {
	Bucket time.Time
	UsageDims
	UsageTotals
}

// UsageDim names a dimension a usage query groups by.
type UsageDim string

// The dimensions, with their column.
const (
	DimApplication UsageDim = "application"
	DimProvider    UsageDim = "provider"
	DimRoute       UsageDim = "route"
	DimModel       UsageDim = "model"
	DimKey         UsageDim = "key"
	DimResolution  UsageDim = "resolution"
	DimStatusClass UsageDim = "statusClass"
)

// usageDims lists every dimension in column order, with its column and the
// constant a query selects in its place when it does not group by it.
var usageDims = []struct {
	dim    UsageDim
	column string
	none   string
}{
	{DimApplication, "application", "''"},
	{DimProvider, "provider", "''"},
	{DimRoute, "route", "''"},
	{DimModel, "model", "''"},
	{DimKey, "key_id", "''"},
	{DimResolution, "resolution", "''"},
	{DimStatusClass, "status_class", "0"},
}

// UsageFilter restricts usage queries; an empty field matches everything.
// Model matches the requested model.
type UsageFilter struct {
	Application string
	Provider    string
	Route       string
	Model       string
	KeyID       string
	Resolution  string
}

// UsageQuery asks for rollup rows with From <= bucket < To, grouped by
// bucket and GroupBy: a dimension not grouped by is zero in the rows.
type UsageQuery struct {
	Granularity Granularity
	From, To    time.Time
	GroupBy     []UsageDim
	Filter      UsageFilter
}

// RecordQuery asks for raw records with From <= ts < To (a zero bound is
// open), newest first: ordered by (ts, id) descending, starting after
// Before when it is set.
type RecordQuery struct {
	Filter   UsageFilter
	From, To time.Time
	Before   *RecordKey
	Limit    int
}

// RecordKey is a record's identity and its place in the records' order.
type RecordKey struct {
	Time time.Time
	ID   string
}

// usageRecordCols is the column order of usageRecordArgs and scanUsageRecord.
const usageRecordCols = `ts, id, received_at, client_request_id, gateway_id, route, provider, application, key_id,
	requested_model, served_model, prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens, reasoning_tokens,
	usage_source, cost_micro_usd, price_version, resolution, denied_by, error_code, status, latency_us, ttft_us, attempts`

const usageRecordNCols = 26

// insertChunk bounds the rows of one INSERT: 26 parameters each, within
// SQLite's 32766 and PostgreSQL's 65535.
const insertChunk = 500

func usageRecordArgs(dst []any, r *UsageRecord) []any {
	return append(dst, us(r.Time), r.ID, us(r.ReceivedAt), r.ClientRequestID, r.GatewayID, r.Route, r.Provider,
		r.Application, r.KeyID, r.RequestedModel, r.ServedModel, r.PromptTokens, r.CachedTokens, r.CacheWriteTokens,
		r.CompletionTokens, r.ReasoningTokens, r.UsageSource.String(), r.CostMicroUSD, r.PriceVersion,
		r.Resolution.String(), r.DeniedBy, r.ErrorCode, int64(r.Status), r.LatencyMicros, r.TTFTMicros, int64(r.Attempts))
}

func scanUsageRecord(rows *sql.Rows) (UsageRecord, error) {
	var r UsageRecord
	var ts, received, status, attempts int64
	var source, resolution string
	err := rows.Scan(&ts, &r.ID, &received, &r.ClientRequestID, &r.GatewayID, &r.Route, &r.Provider, &r.Application,
		&r.KeyID, &r.RequestedModel, &r.ServedModel, &r.PromptTokens, &r.CachedTokens, &r.CacheWriteTokens,
		&r.CompletionTokens, &r.ReasoningTokens, &source, &r.CostMicroUSD, &r.PriceVersion, &resolution, &r.DeniedBy,
		&r.ErrorCode, &status, &r.LatencyMicros, &r.TTFTMicros, &attempts)
	if err != nil {
		return UsageRecord{}, err
	}
	if err := r.UsageSource.UnmarshalText([]byte(source)); err != nil {
		return UsageRecord{}, fmt.Errorf("usage record %s: %w", r.ID, err)
	}
	if err := r.Resolution.UnmarshalText([]byte(resolution)); err != nil {
		return UsageRecord{}, fmt.Errorf("usage record %s: %w", r.ID, err)
	}
	r.Time, r.ReceivedAt, r.Status, r.Attempts = fromUS(ts), fromUS(received), int(status), int(attempts)
	return r, nil
}

// placeholders appends rows groups of n placeholders, numbered from 1:
// $n on PostgreSQL, ? on SQLite (which looks each $n name up in the list of
// the names before it, a parse quadratic in the parameters of a bulk
// insert).
func (t *sqlTx) placeholders(b *strings.Builder, rows, n int) {
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for j := range n {
			if j > 0 {
				b.WriteByte(',')
			}
			if t.dialect == "sqlite" {
				b.WriteByte('?')
				continue
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(i*n + j + 1))
		}
		b.WriteByte(')')
	}
}

func (t *sqlTx) InsertUsageRecords(ctx context.Context, recs []UsageRecord) ([]bool, error) {
	inserted := make([]bool, len(recs))
	for start := 0; start < len(recs); start += insertChunk {
		end := min(start+insertChunk, len(recs))
		if err := t.insertUsageChunk(ctx, recs[start:end], inserted[start:end]); err != nil {
			return nil, err
		}
	}
	return inserted, nil
}

// recordKey is a record's identity as stored.
type recordKey struct {
	ts int64
	id string
}

func (t *sqlTx) insertUsageChunk(ctx context.Context, recs []UsageRecord, inserted []bool) error {
	var q strings.Builder
	q.WriteString(`INSERT INTO usage_records (` + usageRecordCols + `) VALUES `)
	t.placeholders(&q, len(recs), usageRecordNCols)
	q.WriteString(` ON CONFLICT (ts, id) DO NOTHING RETURNING ts, id`)
	args := make([]any, 0, len(recs)*usageRecordNCols)
	index := make(map[recordKey]int, len(recs))
	for i := range recs {
		args = usageRecordArgs(args, &recs[i])
		k := recordKey{us(recs[i].Time), recs[i].ID}
		if _, dup := index[k]; !dup {
			index[k] = i
		}
	}
	rows, err := t.tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return fmt.Errorf("store: inserting usage records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k recordKey
		if err := rows.Scan(&k.ts, &k.id); err != nil {
			return scanErr(err)
		}
		if i, ok := index[k]; ok {
			inserted[i] = true
		}
	}
	return scanRowsErr(rows)
}

const rollupCols = `bucket, application, provider, route, model, key_id, resolution, status_class,
	requests, prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens, reasoning_tokens, cost_micro_usd, latency_us`

const rollupNCols = 16

// rollupChunk bounds the rows of one upsert (16 parameters each).
const rollupChunk = 1000

// CompareRollups orders rollup rows by bucket, then by their dimensions in
// the rollup tables' key order: the order AddUsageRollups wants.
func CompareRollups(a, b UsageRollup) int {
	return cmp.Or(a.Bucket.Compare(b.Bucket), cmp.Compare(a.Application, b.Application), cmp.Compare(a.Provider, b.Provider),
		cmp.Compare(a.Route, b.Route), cmp.Compare(a.Model, b.Model), cmp.Compare(a.KeyID, b.KeyID),
		cmp.Compare(a.Resolution, b.Resolution), cmp.Compare(a.StatusClass, b.StatusClass))
}

// The summary tables (usage_hourly_summary, usage_daily_summary) hold the
// rollups without the key, resolution and status class dimensions: several
// times fewer rows (an application's keys and outcomes summed), which
// answer the dashboards' commonest questions (by application, provider,
// route, model) without sorting the full table's rows. The denied tables
// (usage_hourly_denied, usage_daily_denied) are the same summary of the
// denied requests alone (resolution "denied", no key, status class 0),
// for the console's denials. All are kept in the transaction that adds to
// the full tables, so they always agree.
func summarize(rows []UsageRollup, resolution string) []UsageRollup {
	type key struct {
		bucket int64
		UsageDims
	}
	sums := map[key]int{}
	var out []UsageRollup
	for _, r := range rows {
		if resolution != "" && r.Resolution != resolution {
			continue
		}
		r.KeyID, r.Resolution, r.StatusClass = "", resolution, 0
		k := key{us(r.Bucket), r.UsageDims}
		if i, ok := sums[k]; ok {
			out[i].Add(r.UsageTotals)
			continue
		}
		sums[k] = len(out)
		out = append(out, r)
	}
	slices.SortFunc(out, CompareRollups)
	return out
}

// rollupTable names the table that answers q: a summary when q neither
// groups by nor filters on a dimension it lacks, the full table otherwise.
func rollupTable(q UsageQuery) rollupKind {
	for _, d := range q.GroupBy {
		if d == DimKey || d == DimResolution || d == DimStatusClass {
			return fullRollup
		}
	}
	switch {
	case q.Filter.KeyID != "":
		return fullRollup
	case q.Filter.Resolution == "":
		return summaryRollup
	case q.Filter.Resolution == meter.Denied.String():
		return deniedRollup
	}
	return fullRollup
}

func (t *sqlTx) AddUsageRollups(ctx context.Context, g Granularity, rows []UsageRollup) error {
	if err := t.upsertRollups(ctx, g.table(fullRollup), rows); err != nil {
		return err
	}
	if err := t.upsertRollups(ctx, g.table(summaryRollup), summarize(rows, "")); err != nil {
		return err
	}
	return t.upsertRollups(ctx, g.table(deniedRollup), summarize(rows, meter.Denied.String()))
}

func (t *sqlTx) upsertRollups(ctx context.Context, table string, rows []UsageRollup) error {
	args := make([]any, 0, min(len(rows), rollupChunk)*rollupNCols)
	for start := 0; start < len(rows); start += rollupChunk {
		chunk := rows[start:min(start+rollupChunk, len(rows))]
		var q strings.Builder
		q.WriteString(`INSERT INTO ` + table + ` (` + rollupCols + `) VALUES `)
		t.placeholders(&q, len(chunk), rollupNCols)
		q.WriteString(` ON CONFLICT (bucket, application, provider, route, model, key_id, resolution, status_class) DO UPDATE SET `)
		for i, c := range []string{"requests", "prompt_tokens", "cached_tokens", "cache_write_tokens", "completion_tokens",
			"reasoning_tokens", "cost_micro_usd", "latency_us"} {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(c + " = " + table + "." + c + " + excluded." + c)
		}
		args = args[:0]
		for _, r := range chunk {
			args = append(args, us(r.Bucket), r.Application, r.Provider, r.Route, r.Model, r.KeyID, r.Resolution,
				int64(r.StatusClass), r.Requests, r.PromptTokens, r.CachedTokens, r.CacheWriteTokens, r.CompletionTokens,
				r.ReasoningTokens, r.CostMicroUSD, r.LatencyMicros)
		}
		if _, err := t.exec(ctx, q.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// filterSQL appends the filter's conditions (AND ...) to b, with their
// arguments numbered after args, and returns the extended args. modelColumn
// is the column Filter.Model matches.
func filterSQL(b *strings.Builder, args []any, f UsageFilter, modelColumn string) []any {
	for _, c := range []struct{ column, value string }{
		{"application", f.Application}, {"provider", f.Provider}, {"route", f.Route},
		{modelColumn, f.Model}, {"key_id", f.KeyID}, {"resolution", f.Resolution},
	} {
		if c.value == "" {
			continue
		}
		args = append(args, c.value)
		b.WriteString(" AND " + c.column + " = $" + strconv.Itoa(len(args)))
	}
	return args
}

func (t *sqlTx) QueryUsage(ctx context.Context, q UsageQuery) ([]UsageRollup, error) {
	grouped := map[UsageDim]bool{}
	for _, d := range q.GroupBy {
		grouped[d] = true
	}
	var sel, group strings.Builder
	sel.WriteString(`SELECT bucket`)
	group.WriteString(`bucket`)
	for _, d := range usageDims {
		if grouped[d.dim] {
			sel.WriteString(", " + d.column)
			group.WriteString(", " + d.column)
		} else {
			sel.WriteString(", " + d.none)
		}
	}
	sel.WriteString(`, SUM(requests), SUM(prompt_tokens), SUM(cached_tokens), SUM(cache_write_tokens),
		SUM(completion_tokens), SUM(reasoning_tokens), SUM(cost_micro_usd), SUM(latency_us) FROM ` + q.Granularity.table(rollupTable(q)) +
		` WHERE bucket >= $1 AND bucket < $2`)
	args := filterSQL(&sel, []any{us(q.From), us(q.To)}, q.Filter, "model")
	sel.WriteString(" GROUP BY " + group.String() + " ORDER BY " + group.String())
	return queryAll(ctx, t, func(rows *sql.Rows) (UsageRollup, error) {
		var r UsageRollup
		var bucket, class int64
		err := rows.Scan(&bucket, &r.Application, &r.Provider, &r.Route, &r.Model, &r.KeyID, &r.Resolution, &class,
			&r.Requests, &r.PromptTokens, &r.CachedTokens, &r.CacheWriteTokens, &r.CompletionTokens, &r.ReasoningTokens,
			&r.CostMicroUSD, &r.LatencyMicros)
		r.Bucket, r.StatusClass = fromUS(bucket), int(class)
		return r, err
	}, sel.String(), args...)
}

// queryAll runs a query and returns every row, read with scan.
func queryAll[T any](ctx context.Context, t *sqlTx, scan func(*sql.Rows) (T, error), q string, args ...any) ([]T, error) {
	rows, err := t.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, scanErr(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, scanErr(err)
		}
		out = append(out, v)
	}
	return out, scanRowsErr(rows)
}

func (t *sqlTx) ListUsageRecords(ctx context.Context, q RecordQuery) ([]UsageRecord, error) {
	var b strings.Builder
	b.WriteString(`SELECT ` + usageRecordCols + ` FROM usage_records WHERE 1 = 1`)
	var args []any
	if !q.From.IsZero() {
		args = append(args, us(q.From))
		b.WriteString(" AND ts >= $" + strconv.Itoa(len(args)))
	}
	if !q.To.IsZero() {
		args = append(args, us(q.To))
		b.WriteString(" AND ts < $" + strconv.Itoa(len(args)))
	}
	if q.Before != nil {
		args = append(args, us(q.Before.Time), q.Before.ID)
		n := strconv.Itoa(len(args) - 1)
		// ts <= $n first, so that both engines bound the index range.
		b.WriteString(" AND ts <= $" + n + " AND (ts < $" + n + " OR id < $" + strconv.Itoa(len(args)) + ")")
	}
	args = filterSQL(&b, args, q.Filter, "requested_model")
	args = append(args, q.Limit)
	b.WriteString(" ORDER BY ts DESC, id DESC LIMIT $" + strconv.Itoa(len(args)))
	return queryAll(ctx, t, scanUsageRecord, b.String(), args...)
}

// MeteredUsage is what the meter counted of one application and model:
// requests that reached the provider's model and their tokens.
type MeteredUsage struct {
	Application      string
	Model            string
	Requests         int64
	PromptTokens     int64
	CompletionTokens int64
}

func (t *sqlTx) MeteredUsage(ctx context.Context, provider string, from, to time.Time) ([]MeteredUsage, error) {
	return queryAll(ctx, t, func(rows *sql.Rows) (MeteredUsage, error) {
		var m MeteredUsage
		err := rows.Scan(&m.Application, &m.Model, &m.Requests, &m.PromptTokens, &m.CompletionTokens)
		return m, err
	}, `SELECT application, CASE WHEN served_model <> '' THEN served_model ELSE requested_model END AS m,
		COUNT(*), SUM(prompt_tokens), SUM(completion_tokens) FROM usage_records
		WHERE ts >= $1 AND ts < $2 AND provider = $3 AND usage_source <> $4
		GROUP BY application, m ORDER BY application, m`,
		us(from), us(to), provider, meter.UsageNone.String())
}

// --- maintenance of the raw table (Store methods: DDL and batched deletes
// run in transactions of their own)

// partitionLock is the PostgreSQL advisory lock key that serialises
// partition creation and drops across platform replicas.
const partitionLock = 0x736c7569636501 // "sluice" in ASCII, then 1

// partitionName is the PostgreSQL partition holding the UTC day of t.
func partitionName(day time.Time) string { return "usage_records_p" + day.UTC().Format("20060102") }

func (s *sqlStore) EnsureUsagePartitions(ctx context.Context, from, to time.Time) error {
	if s.dialect != "postgres" {
		return nil
	}
	return s.Write(ctx, func(tx Tx) error {
		t := tx.(*sqlTx)
		if _, err := t.exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(partitionLock)); err != nil {
			return err
		}
		for day := Day.Truncate(from); !day.After(to); day = day.AddDate(0, 0, 1) {
			// The bounds are integer literals: DDL takes no parameters.
			q := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF usage_records FOR VALUES FROM (%d) TO (%d)`,
				partitionName(day), us(day), us(day.AddDate(0, 0, 1)))
			if _, err := t.exec(ctx, q); err != nil {
				return fmt.Errorf("store: creating usage partition %s: %w", partitionName(day), err)
			}
		}
		return nil
	})
}

// defaultDeleteBatch bounds the rows one SQLite retention transaction
// deletes, so that ingest waits at most for one batch.
const defaultDeleteBatch = 10_000

func (s *sqlStore) DeleteUsageBefore(ctx context.Context, cutoff time.Time) (UsageDeletion, error) {
	if s.dialect == "postgres" {
		return s.dropPartitionsBefore(ctx, cutoff)
	}
	var d UsageDeletion
	for {
		var n int64
		err := s.Write(ctx, func(tx Tx) error {
			res, err := tx.(*sqlTx).exec(ctx, `DELETE FROM usage_records WHERE (ts, id) IN
				(SELECT ts, id FROM usage_records WHERE ts < $1 ORDER BY ts LIMIT $2)`, us(cutoff), s.deleteBatch)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return d, err
		}
		d.Records += n
		if n < int64(s.deleteBatch) {
			return d, nil
		}
	}
}

// dropPartitionsBefore drops every partition whose whole day is before
// cutoff.
func (s *sqlStore) dropPartitionsBefore(ctx context.Context, cutoff time.Time) (UsageDeletion, error) {
	var d UsageDeletion
	err := s.Write(ctx, func(tx Tx) error {
		t := tx.(*sqlTx)
		if _, err := t.exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(partitionLock)); err != nil {
			return err
		}
		names, err := t.usagePartitions(ctx)
		if err != nil {
			return err
		}
		var drop []string
		for _, name := range names {
			day, err := time.Parse("20060102", strings.TrimPrefix(name, "usage_records_p"))
			if err != nil {
				continue // not one of ours: left alone
			}
			if !day.AddDate(0, 0, 1).After(cutoff) {
				drop = append(drop, name)
			}
		}
		for _, name := range drop {
			var n int64
			// Counted for the log line; a count of a partition is a scan
			// of it, far cheaper than deleting its rows one by one.
			if err := t.tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+name).Scan(&n); err != nil {
				return scanErr(err)
			}
			if _, err := t.exec(ctx, `DROP TABLE `+name); err != nil {
				return err
			}
			d.Records += n
			d.Partitions = append(d.Partitions, name)
		}
		return nil
	})
	if err != nil {
		return UsageDeletion{}, err
	}
	return d, nil
}

// usagePartitions lists the partitions of usage_records (PostgreSQL).
func (t *sqlTx) usagePartitions(ctx context.Context) ([]string, error) {
	return queryAll(ctx, t, func(rows *sql.Rows) (name string, err error) {
		return name, rows.Scan(&name)
	}, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'usage_records'::regclass ORDER BY c.relname`)
}

// UsageDeletion is what DeleteUsageBefore removed.
type UsageDeletion struct {
	Records int64
	// Partitions are the PostgreSQL partitions dropped.
	Partitions []string
}
