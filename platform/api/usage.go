package api

import (
	"context"
	"encoding/base64"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"sluice/platform/store"
	"sluice/platform/usage"
)

// Usage API limits.
const (
	// maxUsageBuckets bounds the buckets of one GET /usage.
	maxUsageBuckets = 1000
	// csvPage is how many records a CSV export reads per transaction.
	csvPage = 1000
)

// IngestUsage stores a batch of usage records sent by a gateway.
func (s *Server) IngestUsage(c echo.Context) error {
	ctx := c.Request().Context()
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err
	}
	recs, err := usage.DecodeBatch(body)
	if err != nil {
		return usageError(err)
	}
	id, _ := c.Get(ctxGatewayID).(string)
	res, err := s.usage.Ingest(ctx, id, recs)
	if err != nil {
		return usageError(err)
	}
	return c.JSON(http.StatusOK, UsageIngestResult{Accepted: res.Accepted, Duplicates: res.Duplicates, Expired: res.Expired})
}

// usageError maps the usage package's refusals to API errors.
func usageError(err error) error {
	if errors.Is(err, usage.ErrTooManyRecords) {
		return newError(http.StatusRequestEntityTooLarge, "request_too_large", "a batch holds at most %d records: send smaller batches", usage.MaxBatchRecords)
	}
	var be *usage.BatchError
	if !errors.As(err, &be) {
		return err
	}
	problems := make([]Problem, 0, len(be.Records))
	for _, r := range be.Records {
		path := "$[" + strconv.Itoa(r.Index) + "]"
		if r.Field != "" {
			path += "." + r.Field
		}
		problems = append(problems, Problem{Path: path, Message: r.Error()})
	}
	ae := invalid(problems)
	if be.More > 0 {
		ae.message += fmt.Sprintf("; %d more refused records not listed", be.More)
	}
	if be.NewerVersion() {
		ae.code = "unsupported_meter_version"
		ae.message = "the batch holds records of a newer meter version than this platform reads: keep it and resend it once the platform is upgraded; " + ae.message
	}
	return ae
}

// wantCSV reports whether the client asked for CSV: format=csv, or an
// Accept header naming text/csv (and no format=json).
func wantCSV(c echo.Context, format *Format) bool {
	if format != nil {
		return *format == Csv
	}
	for _, part := range strings.Split(c.Request().Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/csv" {
			return true
		}
	}
	return false
}

// deref is *p, "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func usageFilter(application, provider, route, model, key *string, resolution *Resolution) store.UsageFilter {
	f := store.UsageFilter{Application: deref(application), Provider: deref(provider), Route: deref(route),
		Model: deref(model), KeyID: deref(key)}
	if resolution != nil {
		f.Resolution = string(*resolution)
	}
	return f
}

// GetUsage sums the rollups.
func (s *Server) GetUsage(c echo.Context, p GetUsageParams) error {
	ctx := c.Request().Context()
	g, span := store.Day, 30*24*time.Hour
	if p.Bucket != nil && *p.Bucket == GetUsageParamsBucketHour {
		g, span = store.Hour, 24*time.Hour
	}
	to := s.now()
	if p.To != nil {
		to = *p.To
	}
	from := to.Add(-span)
	if p.From != nil {
		from = *p.From
	}
	from = g.Truncate(from)
	if t := g.Truncate(to); t.Before(to) {
		to = t.Add(g.Step())
	} else {
		to = t
	}
	switch {
	case !from.Before(to):
		return invalid([]Problem{problem("query.from", "from (%s) must be before to (%s)", from.Format(time.RFC3339), to.Format(time.RFC3339))})
	case to.Sub(from)/g.Step() > maxUsageBuckets:
		return invalid([]Problem{problem("query.from", "the range holds %d %s buckets, at most %d: narrow it, or ask for bucket=day",
			to.Sub(from)/g.Step(), g, maxUsageBuckets)})
	}
	q := store.UsageQuery{Granularity: g, From: from, To: to,
		Filter: usageFilter(p.Application, p.Provider, p.Route, p.Model, p.Key, p.Resolution)}
	groupBy := []UsageDimension{}
	if p.GroupBy != nil {
		groupBy = *p.GroupBy
	}
	for _, d := range groupBy {
		q.GroupBy = append(q.GroupBy, store.UsageDim(d))
	}
	rows, err := read(ctx, s.store, func(tx store.Tx) ([]store.UsageRollup, error) { return tx.QueryUsage(ctx, q) })
	if err != nil {
		return err
	}
	out := UsageReport{From: from, To: to, Bucket: UsageReportBucket(g), GroupBy: groupBy, Rows: make([]UsageRow, 0, len(rows))}
	var sum store.UsageTotals
	for _, r := range rows {
		sum.Add(r.UsageTotals)
		out.Rows = append(out.Rows, usageRow(r, groupBy))
	}
	out.Totals = usageTotals(sum)
	if wantCSV(c, p.Format) {
		return writeUsageCSV(c, out)
	}
	return c.JSON(http.StatusOK, out)
}

func usageTotals(t store.UsageTotals) UsageTotals {
	out := UsageTotals{Requests: t.Requests, PromptTokens: t.PromptTokens, CachedTokens: t.CachedTokens,
		CacheWriteTokens: t.CacheWriteTokens, CompletionTokens: t.CompletionTokens, ReasoningTokens: t.ReasoningTokens,
		TotalTokens: t.PromptTokens + t.CompletionTokens, CostMicroUsd: t.CostMicroUSD}
	if t.Requests > 0 {
		out.MeanLatencyUs = t.LatencyMicros / t.Requests
	}
	return out
}

func statusClass(c int) UsageRowStatusClass {
	if c == 0 {
		return UsageRowStatusClassNone
	}
	return UsageRowStatusClass(strconv.Itoa(c) + "xx")
}

func usageRow(r store.UsageRollup, groupBy []UsageDimension) UsageRow {
	t := usageTotals(r.UsageTotals)
	row := UsageRow{Start: r.Bucket, Requests: t.Requests, PromptTokens: t.PromptTokens, CachedTokens: t.CachedTokens,
		CacheWriteTokens: t.CacheWriteTokens, CompletionTokens: t.CompletionTokens, ReasoningTokens: t.ReasoningTokens,
		TotalTokens: t.TotalTokens, CostMicroUsd: t.CostMicroUsd, MeanLatencyUs: t.MeanLatencyUs}
	for _, d := range groupBy {
		switch d {
		case UsageDimensionApplication:
			row.Application = ptr(r.Application)
		case UsageDimensionProvider:
			row.Provider = ptr(r.Provider)
		case UsageDimensionRoute:
			row.Route = ptr(r.Route)
		case UsageDimensionModel:
			row.Model = ptr(r.Model)
		case UsageDimensionKey:
			row.KeyId = ptr(r.KeyID)
		case UsageDimensionResolution:
			row.Resolution = ptr(Resolution(r.Resolution))
		case UsageDimensionStatusClass:
			row.StatusClass = ptr(statusClass(r.StatusClass))
		}
	}
	return row
}

// csvCell guards a value a spreadsheet would take for a formula (a model
// name is the client's choice) by prefixing it with an apostrophe.
func csvCell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

func csvHeaders(c echo.Context, name string) {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	h.Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`"`)
	h.Set("Cache-Control", "no-store")
}

func writeUsageCSV(c echo.Context, rep UsageReport) error {
	csvHeaders(c, "usage.csv")
	c.Response().WriteHeader(http.StatusOK)
	w := csv.NewWriter(c.Response())
	header := []string{"start"}
	for _, d := range rep.GroupBy {
		if d == UsageDimensionKey {
			header = append(header, "keyId")
			continue
		}
		header = append(header, string(d))
	}
	header = append(header, "requests", "promptTokens", "cachedTokens", "cacheWriteTokens", "completionTokens",
		"reasoningTokens", "totalTokens", "costMicroUsd", "meanLatencyUs")
	_ = w.Write(header)
	str := func(p *string) string { return csvCell(deref(p)) }
	for _, r := range rep.Rows {
		line := []string{r.Start.UTC().Format(time.RFC3339)}
		for _, d := range rep.GroupBy {
			switch d {
			case UsageDimensionApplication:
				line = append(line, str(r.Application))
			case UsageDimensionProvider:
				line = append(line, str(r.Provider))
			case UsageDimensionRoute:
				line = append(line, str(r.Route))
			case UsageDimensionModel:
				line = append(line, str(r.Model))
			case UsageDimensionKey:
				line = append(line, str(r.KeyId))
			case UsageDimensionResolution:
				line = append(line, string(*r.Resolution))
			case UsageDimensionStatusClass:
				line = append(line, string(*r.StatusClass))
			}
		}
		for _, n := range []int64{r.Requests, r.PromptTokens, r.CachedTokens, r.CacheWriteTokens, r.CompletionTokens,
			r.ReasoningTokens, r.TotalTokens, r.CostMicroUsd, r.MeanLatencyUs} {
			line = append(line, strconv.FormatInt(n, 10))
		}
		_ = w.Write(line)
	}
	w.Flush()
	return w.Error()
}

// read returns what fn reads in one read transaction.
func read[T any](ctx context.Context, st store.Store, fn func(store.Tx) (T, error)) (T, error) {
	var out T
	err := st.Read(ctx, func(tx store.Tx) (err error) {
		out, err = fn(tx)
		return err
	})
	return out, err
}

// --- records

// A cursor is the last record's (ts, id), opaque to clients.
func encodeCursor(k store.RecordKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.Time.UnixMicro(), 10) + ":" + k.ID))
}

func decodeCursor(s string) (store.RecordKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return store.RecordKey{}, err
	}
	ts, id, ok := strings.Cut(string(b), ":")
	us, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil || id == "" {
		return store.RecordKey{}, errors.New("malformed")
	}
	return store.RecordKey{Time: time.UnixMicro(us).UTC(), ID: id}, nil
}

// ListUsageRecords pages through the raw records, or streams them as CSV.
func (s *Server) ListUsageRecords(c echo.Context, p ListUsageRecordsParams) error {
	ctx := c.Request().Context()
	q := store.RecordQuery{Filter: usageFilter(p.Application, p.Provider, p.Route, p.Model, p.Key, p.Resolution), Limit: 100}
	if p.Limit != nil {
		q.Limit = *p.Limit
	}
	if p.From != nil {
		q.From = *p.From
	}
	if p.To != nil {
		q.To = *p.To
	}
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		return invalid([]Problem{problem("query.from", "from must be before to")})
	}
	if p.Cursor != nil {
		k, err := decodeCursor(*p.Cursor)
		if err != nil {
			return invalid([]Problem{problem("query.cursor", "not a cursor this API returned (%v)", err)})
		}
		q.Before = &k
	}
	if wantCSV(c, p.Format) {
		return s.streamRecordsCSV(c, q)
	}
	want := q.Limit
	q.Limit++
	recs, err := read(ctx, s.store, func(tx store.Tx) ([]store.UsageRecord, error) { return tx.ListUsageRecords(ctx, q) })
	if err != nil {
		return err
	}
	out := UsageRecordPage{Records: make([]UsageRecord, 0, min(len(recs), want))}
	if len(recs) > want {
		recs = recs[:want]
		last := recs[want-1]
		out.Next = ptr(encodeCursor(store.RecordKey{Time: last.Time, ID: last.ID}))
	}
	for i := range recs {
		out.Records = append(out.Records, usageRecord(&recs[i]))
	}
	return c.JSON(http.StatusOK, out)
}

func usageRecord(r *store.UsageRecord) UsageRecord {
	return UsageRecord{Id: r.ID, ClientRequestId: r.ClientRequestID, Ts: r.Time, GatewayId: r.GatewayID, Route: r.Route,
		Provider: r.Provider, Application: r.Application, KeyId: r.KeyID, RequestedModel: r.RequestedModel,
		ServedModel: r.ServedModel, PromptTokens: r.PromptTokens, CachedTokens: r.CachedTokens,
		CacheWriteTokens: r.CacheWriteTokens, CompletionTokens: r.CompletionTokens, ReasoningTokens: r.ReasoningTokens,
		UsageSource: UsageRecordUsageSource(r.UsageSource.String()), CostMicroUsd: r.CostMicroUSD,
		PriceVersion: r.PriceVersion, Resolution: Resolution(r.Resolution.String()), DeniedBy: r.DeniedBy,
		ErrorCode: r.ErrorCode, Status: r.Status, LatencyUs: r.LatencyMicros, TtftUs: r.TTFTMicros, Attempts: r.Attempts,
		ReceivedAt: r.ReceivedAt}
}

// recordCSVHeader is the CSV export's first line: the UsageRecord schema's
// property names, in the document's order.
func recordCSVHeader() []string {
	return []string{"id", "clientRequestId", "ts", "gatewayId", "route", "provider", "application", "keyId",
		"requestedModel", "servedModel", "promptTokens", "cachedTokens", "cacheWriteTokens", "completionTokens",
		"reasoningTokens", "usageSource", "costMicroUsd", "priceVersion", "resolution", "deniedBy", "errorCode", "status",
		"latencyUs", "ttftUs", "attempts", "receivedAt"}
}

func recordCSVLine(dst []string, r *store.UsageRecord) []string {
	i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
	ts := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }
	return append(dst[:0], csvCell(r.ID), csvCell(r.ClientRequestID), ts(r.Time), csvCell(r.GatewayID), csvCell(r.Route),
		csvCell(r.Provider), csvCell(r.Application), csvCell(r.KeyID), csvCell(r.RequestedModel), csvCell(r.ServedModel),
		i64(r.PromptTokens), i64(r.CachedTokens), i64(r.CacheWriteTokens), i64(r.CompletionTokens),
		i64(r.ReasoningTokens), r.UsageSource.String(), i64(r.CostMicroUSD), csvCell(r.PriceVersion),
		r.Resolution.String(), csvCell(r.DeniedBy), csvCell(r.ErrorCode), strconv.Itoa(r.Status), i64(r.LatencyMicros),
		i64(r.TTFTMicros), strconv.Itoa(r.Attempts), ts(r.ReceivedAt))
}

// streamRecordsCSV writes every record of q (from q.Before on), reading
// csvPage records per read transaction, so that an export of millions of
// rows holds neither a long transaction nor the rows in memory. A failure
// after the first byte aborts the connection, so that the client sees a
// truncated transfer rather than a short file that looks complete.
func (s *Server) streamRecordsCSV(c echo.Context, q store.RecordQuery) error {
	ctx := c.Request().Context()
	q.Limit = csvPage
	csvHeaders(c, "usage-records.csv")
	c.Response().WriteHeader(http.StatusOK)
	w := csv.NewWriter(c.Response())
	_ = w.Write(recordCSVHeader())
	var line []string
	for {
		recs, err := read(ctx, s.store, func(tx store.Tx) ([]store.UsageRecord, error) { return tx.ListUsageRecords(ctx, q) })
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("usage CSV export failed", "error", err)
			}
			panic(http.ErrAbortHandler)
		}
		for i := range recs {
			line = recordCSVLine(line, &recs[i])
			_ = w.Write(line)
		}
		w.Flush()
		if err := w.Error(); err != nil {
			return nil // the client went away
		}
		c.Response().Flush()
		if len(recs) < q.Limit {
			return nil
		}
		last := recs[len(recs)-1]
		q.Before = &store.RecordKey{Time: last.Time, ID: last.ID}
	}
}
