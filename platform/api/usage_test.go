package api_test

// The usage API over HTTP: gateways POST batches of records (made with
// meter.AppendJSON, as the gateway's spool holds them), operators read the
// rollups and the records.

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/meter"
	"sluice/platform/api"
	"sluice/platform/store"
	"sluice/platform/usage"
	"sluice/platform/usage/usagetest"
)

// gateway registers a gateway and returns its id and token.
func (c *client) gateway(name string) (string, string) {
	c.t.Helper()
	var gw api.CreatedGateway
	c.must(201, "POST", "/gateways", map[string]any{"name": name}, &gw)
	return gw.Id, gw.Token
}

// ingest posts a batch with the gateway token.
func (c *client) ingest(token string, body []byte) (int, []byte) {
	c.t.Helper()
	saved := c.token
	c.token = token
	defer func() { c.token = saved }()
	status, _, b := c.do("POST", "/gateway/usage", string(body), "Content-Type", "application/x-ndjson")
	return status, b
}

func (c *client) mustIngest(token string, recs []meter.Record) api.UsageIngestResult {
	c.t.Helper()
	status, b := c.ingest(token, usagetest.Batch(recs))
	if status != 200 {
		c.t.Fatalf("ingest: %d %s", status, b)
	}
	var res api.UsageIngestResult
	if err := json.Unmarshal(b, &res); err != nil {
		c.t.Fatal(err)
	}
	return res
}

// recordIDs walks every page of the records matching query.
func (c *client) recordIDs(query string, limit int) []string {
	c.t.Helper()
	var ids []string
	cursor := ""
	for {
		var page api.UsageRecordPage
		c.must(200, "GET", fmt.Sprintf("/usage/records?limit=%d%s%s", limit, query, cursor), nil, &page)
		for _, r := range page.Records {
			ids = append(ids, r.Id)
		}
		if page.Next == nil {
			return ids
		}
		cursor = "&cursor=" + url.QueryEscape(*page.Next)
	}
}

func recentRecords(seed uint64, n int, prefix, gw string) []meter.Record {
	return usagetest.Random(rand.New(rand.NewPCG(seed, 1)), usagetest.Small(), n, prefix, gw,
		time.Now().Add(-10*time.Hour), 10*time.Hour)
}

func TestUsageIngest(t *testing.T) {
	c := newPlatform(t)
	gwID, token := c.gateway("edge-1")
	_, otherToken := c.gateway("edge-2")
	recs := recentRecords(1, 300, "a", gwID)

	if res := c.mustIngest(token, recs); res != (api.UsageIngestResult{Accepted: 300}) {
		t.Fatalf("first send: %+v", res)
	}
	if res := c.mustIngest(token, recs); res != (api.UsageIngestResult{Duplicates: 300}) {
		t.Fatalf("resend: %+v", res)
	}
	more := recentRecords(2, 50, "b", gwID)
	if res := c.mustIngest(token, append(recs[250:], more...)); res != (api.UsageIngestResult{Accepted: 50, Duplicates: 50}) {
		t.Fatalf("overlapping: %+v", res)
	}
	if res := c.mustIngest(token, nil); res != (api.UsageIngestResult{}) {
		t.Fatalf("empty batch: %+v", res)
	}

	// Refused batches: nothing of them is stored.
	fresh := recentRecords(3, 3, "c", gwID)
	line := func(r meter.Record) string { return string(r.AppendJSON(nil)) }
	newer := strings.Replace(line(fresh[1]), `{"v":1,`, `{"v":2,`, 1)
	tests := []struct {
		name   string
		token  string
		body   string
		status int
		code   string
		paths  []string
	}{
		{"another gateway's records", otherToken, string(usagetest.Batch(fresh)), 422, "validation_failed",
			[]string{"$[0].gateway_id", "$[1].gateway_id", "$[2].gateway_id"}},
		{"a newer meter version", token, line(fresh[0]) + "\n" + newer + "\n", 422, "unsupported_meter_version", []string{"$[1].v"}},
		{"a malformed record", token, line(fresh[0]) + "\n{\"v\":1,\"id\":\"x\"}\n", 422, "validation_failed", []string{"$[1]"}},
		{"content text", token, strings.Replace(line(fresh[0]), `"status"`, `"messages":[],"status"`, 1), 422, "validation_failed", []string{"$[0]"}},
		{"too many records", token, strings.Repeat(line(fresh[0])+"\n", usage.MaxBatchRecords+1), 413, "request_too_large", nil},
		{"too many bytes", token, strings.Repeat(line(fresh[0])+"\n", usage.MaxBatchBytes/len(line(fresh[0]))+1), 413, "request_too_large", nil},
		{"an admin token", adminToken, string(usagetest.Batch(fresh)), 401, "unauthorized", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := c.ingest(tt.token, []byte(tt.body))
			var e errBody
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%d %s", status, b)
			}
			if status != tt.status || e.Error.Code != tt.code || !reflect.DeepEqual(paths(e), tt.paths) {
				t.Fatalf("%d %s %v (%s), want %d %s %v", status, e.Error.Code, paths(e), e.Error.Message, tt.status, tt.code, tt.paths)
			}
			if tt.code == "unsupported_meter_version" && !strings.Contains(e.Error.Message, "v 2, this binary reads up to 1") {
				t.Fatalf("the message does not name the version: %s", e.Error.Message)
			}
		})
	}
	if status, b := c.ingest(token, []byte(line(fresh[0]))); status != 200 || !strings.Contains(string(b), `"accepted":1`) {
		t.Fatalf("a record of a refused batch was stored: %d %s", status, b)
	}
	// JSON is not the format.
	saved := c.token
	c.token = token
	st, _, b := c.do("POST", "/gateway/usage", "["+line(fresh[2])+"]")
	c.token = saved
	if st != 422 {
		t.Fatalf("a JSON body: %d %s", st, b)
	}
	if n := len(c.recordIDs("", 1000)); n != 351 {
		t.Fatalf("%d records stored, want 351", n)
	}

	// A revoked gateway's token is refused.
	c.must(204, "DELETE", "/gateways/"+gwID, nil, nil)
	if status, _ := c.ingest(token, usagetest.Batch(recs[:1])); status != 401 {
		t.Fatalf("revoked gateway: %d", status)
	}
}

func TestUsageReport(t *testing.T) {
	c := newPlatform(t)
	gwID, token := c.gateway("edge-1")
	recs := recentRecords(4, 1000, "a", gwID)
	c.mustIngest(token, recs)

	now := time.Now()
	from := now.Add(-12 * time.Hour).UTC().Truncate(time.Hour)
	to := now.UTC().Truncate(time.Hour).Add(time.Hour)
	var rep api.UsageReport
	c.must(200, "GET", "/usage?bucket=hour&groupBy=application,model&from="+url.QueryEscape(from.Add(17*time.Minute).Format(time.RFC3339))+
		"&to="+url.QueryEscape(to.Add(-time.Minute).Format(time.RFC3339)), nil, &rep)
	if !rep.From.Equal(from) || !rep.To.Equal(to) || rep.Bucket != "hour" {
		t.Fatalf("range %s..%s %s, want %s..%s hour (rounded outwards)", rep.From, rep.To, rep.Bucket, from, to)
	}
	type key struct {
		start      int64
		app, model string
	}
	want := map[key]*api.UsageTotals{}
	var total api.UsageTotals
	var latency int64
	for _, r := range recs {
		k := key{r.Time.Truncate(time.Hour).Unix(), r.Application, r.RequestedModel}
		if want[k] == nil {
			want[k] = &api.UsageTotals{}
		}
		for _, u := range []*api.UsageTotals{want[k], &total} {
			u.Requests++
			u.PromptTokens += r.PromptTokens
			u.CachedTokens += r.CachedTokens
			u.CompletionTokens += r.CompletionTokens
			u.ReasoningTokens += r.ReasoningTokens
			u.TotalTokens += r.PromptTokens + r.CompletionTokens
			u.CostMicroUsd += r.CostMicroUSD
		}
		latency += r.LatencyMicros
	}
	total.MeanLatencyUs = latency / total.Requests
	if len(rep.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(want))
	}
	for _, row := range rep.Rows {
		if row.Application == nil || row.Model == nil || row.Provider != nil || row.KeyId != nil {
			t.Fatalf("row dimensions: %+v", row)
		}
		w := want[key{row.Start.Unix(), *row.Application, *row.Model}]
		if w == nil || row.Requests != w.Requests || row.PromptTokens != w.PromptTokens || row.CostMicroUsd != w.CostMicroUsd ||
			row.TotalTokens != w.TotalTokens || row.ReasoningTokens != w.ReasoningTokens {
			t.Fatalf("row %+v, want %+v", row, w)
		}
	}
	if rep.Totals != total {
		t.Fatalf("totals %+v, want %+v", rep.Totals, total)
	}
	// The daily view agrees, and filters apply.
	var daily api.UsageReport
	c.must(200, "GET", "/usage?groupBy=statusClass,resolution&application=app-1", nil, &daily)
	var n int64
	for _, r := range recs {
		if r.Application == "app-1" {
			n++
		}
	}
	if daily.Bucket != "day" || daily.Totals.Requests != n {
		t.Fatalf("daily for app-1: %s %d requests, want %d", daily.Bucket, daily.Totals.Requests, n)
	}
	for _, row := range daily.Rows {
		if row.StatusClass == nil || row.Resolution == nil ||
			(*row.Resolution == "abandoned") != (*row.StatusClass == "none") {
			t.Fatalf("row %+v", row)
		}
	}

	// Refusals name the parameter.
	for _, tt := range []struct{ query, path string }{
		{"groupBy=application,bogus", "query.groupBy[1]"},
		{"bucket=week", "query.bucket"},
		{"from=yesterday", "query.from"},
		{"resolution=fine", "query.resolution"},
		{"from=2030-01-02T00:00:00Z&to=2030-01-01T00:00:00Z", "query.from"},
		{"bucket=hour&from=2020-01-01T00:00:00Z&to=2030-01-01T00:00:00Z", "query.from"},
	} {
		e := c.fail(422, "GET", "/usage?"+tt.query, nil)
		if e.Error.Code != "validation_failed" || len(e.Error.Details) == 0 || !strings.HasPrefix(e.Error.Details[0].Path, tt.path) {
			t.Errorf("%s: %+v, want a problem at %s", tt.query, e.Error, tt.path)
		}
	}
}

// Walking the pages while records arrive (older and newer than the walk's
// position) visits every record that existed at the start exactly once.
func TestUsageRecordsPaginationStability(t *testing.T) {
	c := newPlatform(t)
	gwID, token := c.gateway("edge-1")
	base := recentRecords(5, 400, "a", gwID)
	// Equal timestamps: the order falls back to the id.
	for i := range 30 {
		base[i].Time = base[30].Time
	}
	c.mustIngest(token, base)
	seen := map[string]int{}
	cursor := ""
	for page := 0; ; page++ {
		var p api.UsageRecordPage
		c.must(200, "GET", "/usage/records?limit=37"+cursor, nil, &p)
		for i, r := range p.Records {
			seen[r.Id]++
			if i > 0 {
				prev := p.Records[i-1]
				if r.Ts.After(prev.Ts) || (r.Ts.Equal(prev.Ts) && r.Id > prev.Id) {
					t.Fatalf("page %d out of order: %s %s before %s %s", page, prev.Ts, prev.Id, r.Ts, r.Id)
				}
			}
		}
		// New records, dated all over the range, arrive between pages.
		c.mustIngest(token, recentRecords(uint64(100+page), 20, fmt.Sprintf("new%d", page), gwID))
		if p.Next == nil {
			break
		}
		cursor = "&cursor=" + url.QueryEscape(*p.Next)
	}
	for _, r := range base {
		if seen[r.ID] != 1 {
			t.Fatalf("record %s seen %d times", r.ID, seen[r.ID])
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("record %s seen %d times", id, n)
		}
	}
	// Filters, and refusals.
	var apps int
	for _, r := range base {
		if r.Application == "app-2" && r.Resolution == meter.Denied {
			apps++
		}
	}
	if got := len(c.recordIDs("&application=app-2&resolution=denied", 5)); got < apps {
		t.Fatalf("app-2 denied: %d, want at least %d", got, apps)
	}
	for _, tt := range []struct{ query, path string }{
		{"cursor=bm90LWEtY3Vyc29y", "query.cursor"},
		{"cursor=%21%21", "query.cursor"},
		{"limit=0", "query.limit"},
		{"limit=1001", "query.limit"},
	} {
		e := c.fail(422, "GET", "/usage/records?"+tt.query, nil)
		if len(e.Error.Details) == 0 || e.Error.Details[0].Path != tt.path {
			t.Errorf("%s: %+v, want a problem at %s", tt.query, e.Error, tt.path)
		}
	}
}

func TestUsageCSV(t *testing.T) {
	c := newPlatform(t)
	gwID, token := c.gateway("edge-1")
	recs := recentRecords(6, 2500, "a", gwID)
	recs[0].RequestedModel = "=HYPERLINK(\"x\")"
	recs[0].Application = "app-csv"
	c.mustIngest(token, recs[:1500])
	c.mustIngest(token, recs[1500:])

	get := func(path string, hdr ...string) [][]string {
		t.Helper()
		status, h, b := c.do("GET", path, nil, hdr...)
		if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/csv") {
			t.Fatalf("%s: %d %s %.200s", path, status, h.Get("Content-Type"), b)
		}
		rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	// Every record (more than one export page), by either way of asking.
	for _, rows := range [][][]string{get("/usage/records?format=csv"), get("/usage/records", "Accept", "text/csv")} {
		spec, err := api.Spec()
		if err != nil {
			t.Fatal(err)
		}
		if want := spec.Components.Schemas["UsageRecord"].Value.Required; !reflect.DeepEqual(rows[0], want) {
			t.Fatalf("header %v\nwant the UsageRecord fields %v", rows[0], want)
		}
		if len(rows) != len(recs)+1 {
			t.Fatalf("%d lines, want %d", len(rows), len(recs)+1)
		}
		ids := map[string]bool{}
		for _, r := range rows[1:] {
			ids[r[0]] = true
		}
		if len(ids) != len(recs) {
			t.Fatalf("%d distinct ids, want %d", len(ids), len(recs))
		}
	}
	// The client's model name cannot become a formula.
	rows := get("/usage/records?format=csv&application=app-csv")
	col := slices.Index(rows[0], "requestedModel")
	if len(rows) != 2 || rows[1][col] != "'=HYPERLINK(\"x\")" {
		t.Fatalf("rows %v", rows)
	}
	// format=json wins over Accept.
	if status, h, _ := c.do("GET", "/usage/records?format=json&limit=1", nil, "Accept", "text/csv"); status != 200 ||
		!strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		t.Fatalf("format=json: %d %s", status, h.Get("Content-Type"))
	}

	// The report as CSV: one line per row, the totals add up.
	rows = get("/usage?groupBy=key&format=csv&from=" + url.QueryEscape(time.Now().Add(-48*time.Hour).Format(time.RFC3339)))
	want := []string{"start", "keyId", "requests", "promptTokens", "cachedTokens", "cacheWriteTokens", "completionTokens",
		"reasoningTokens", "totalTokens", "costMicroUsd", "meanLatencyUs"}
	if !reflect.DeepEqual(rows[0], want) {
		t.Fatalf("header %v", rows[0])
	}
	var n int
	for _, r := range rows[1:] {
		v, err := strconv.Atoi(r[2])
		if err != nil {
			t.Fatal(err)
		}
		n += v
	}
	if n != len(recs) {
		t.Fatalf("the CSV counts %d requests, want %d", n, len(recs))
	}
}

// The document's enums are the meter's names.
func TestUsageEnumsMatchTheMeter(t *testing.T) {
	spec, err := api.Spec()
	if err != nil {
		t.Fatal(err)
	}
	var want []any
	for _, r := range meter.Resolutions() {
		want = append(want, r.String())
	}
	if got := spec.Components.Schemas["Resolution"].Value.Enum; !reflect.DeepEqual(got, want) {
		t.Fatalf("Resolution enum %v, want %v", got, want)
	}
	want = nil
	for _, s := range []meter.UsageSource{meter.UsageNone, meter.UsageProvider, meter.UsagePartial, meter.UsageCounted} {
		want = append(want, s.String())
	}
	if got := spec.Components.Schemas["UsageRecord"].Value.Properties["usageSource"].Value.Enum; !reflect.DeepEqual(got, want) {
		t.Fatalf("usageSource enum %v, want %v", got, want)
	}
	var dims []any
	for _, d := range []store.UsageDim{store.DimApplication, store.DimProvider, store.DimRoute, store.DimModel, store.DimKey,
		store.DimResolution, store.DimStatusClass} {
		dims = append(dims, string(d))
	}
	if got := spec.Components.Schemas["UsageDimension"].Value.Enum; !reflect.DeepEqual(got, dims) {
		t.Fatalf("UsageDimension enum %v, want %v", got, dims)
	}
}
