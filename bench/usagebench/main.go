// Command usagebench measures the platform's usage meter (docs/benchmarks.md,
// section 11):
//
//	usagebench [-database URL] ingest     # POST /api/v1/gateway/usage: records per second
//	usagebench [-database URL] generate   # write -records records straight into the store
//	usagebench [-database URL] query      # GET /api/v1/usage over what generate wrote
//	usagebench [-database URL] size       # bytes per table and per million records
//
// The platform runs in this process (platform.Open, the same handler as
// `sluice platform`) behind a real HTTP server on loopback; the requests go
// over TCP. Without -database the store is SQLite in -data.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // size: the "pgx" driver
	_ "modernc.org/sqlite"             // size: the "sqlite" driver

	"sluice/counter"
	"sluice/counter/memory"
	"sluice/platform"
	"sluice/platform/store"
	"sluice/platform/usage"
	"sluice/platform/usage/usagetest"
	"sluice/policies/builtin"
)

const adminToken = "usagebench-admin-token"

type options struct {
	data, database             string
	records, batch, gateways   int
	days                       int
	apps, keys, provs, models  int
	generateBatch, queryRepeat int
	// alerts: ingest with budget alert detection at work (see setupAlerts).
	alerts bool
}

func main() {
	var o options
	flag.StringVar(&o.data, "data", "", "data directory (SQLite); default a temporary one (ingest) or ./usagebench-data")
	flag.StringVar(&o.database, "database", "", "a PostgreSQL URL instead of SQLite")
	flag.IntVar(&o.records, "records", 0, "records to send (ingest, default 200000) or write (generate, default 10000000)")
	flag.IntVar(&o.batch, "batch", 1000, "ingest: records per POST")
	flag.IntVar(&o.gateways, "gateways", 4, "ingest: gateways sending at once")
	flag.IntVar(&o.days, "days", 30, "generate: the records span this many days before now")
	flag.IntVar(&o.apps, "apps", 50, "applications (each with -keys keys)")
	flag.IntVar(&o.keys, "keys", 2, "API keys per application")
	flag.IntVar(&o.provs, "providers", 2, "providers (each its own route)")
	flag.IntVar(&o.models, "models", 4, "models per provider")
	flag.IntVar(&o.generateBatch, "generate-batch", 5000, "generate: records per transaction")
	flag.IntVar(&o.queryRepeat, "repeat", 20, "query: runs of each query")
	flag.BoolVar(&o.alerts, "alerts", false, "ingest: the records' providers and applications exist, with Rate Limit rows that alert, and the platform reads a counter store: every batch's detection peeks real budgets")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "usagebench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	switch flag.Arg(0) {
	case "ingest":
		err = ingest(o)
	case "generate":
		err = generate(o)
	case "query":
		err = query(o)
	case "size":
		err = size(o)
	default:
		err = errors.New("usage: usagebench [flags] ingest|generate|query|size")
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "usagebench:", err)
		os.Exit(1)
	}
}

func (o options) shape() usagetest.Shape {
	return usagetest.Shape{Applications: o.apps, KeysPerApp: o.keys, Providers: o.provs, ModelsPerProvider: o.models}
}

func (o options) dsn() string {
	if o.database != "" {
		return o.database
	}
	return filepath.Join(o.data, store.SQLiteFile)
}

// server is a platform served over loopback HTTP.
type server struct {
	p    *platform.Platform
	srv  *http.Server
	base string
	http *http.Client
}

func startPlatform(o options) (*server, error) {
	var counters counter.Store
	if o.alerts {
		counters = memory.New(memory.Options{})
	}
	p, err := platform.Open(context.Background(), platform.Options{DataDir: o.data, DatabaseURL: o.database,
		AdminToken: adminToken, Registry: builtin.Registry(), UsageRetention: -1, CounterStore: counters})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.Close()
		return nil, err
	}
	s := &server{p: p, srv: &http.Server{Handler: p.Handler()}, base: "http://" + ln.Addr().String() + "/api/v1",
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Minute}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *server) close() {
	_ = s.srv.Close()
	_ = s.p.Close()
}

func (s *server) do(method, path, token, contentType string, body []byte, hdr ...string) (int, []byte, error) {
	req, err := http.NewRequest(method, s.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// --- ingest

// setupAlerts, with -alerts, creates the records' providers (provider-N)
// with per-application token, request and cost limits that alert at 50, 80
// and 100 %, and their applications granted every provider; it returns the
// applications' ids by the records' names (app-N).
func setupAlerts(s *server, o options) (map[string]string, error) {
	ids := map[string]string{}
	if !o.alerts {
		return ids, nil
	}
	post := func(path string, body any) (string, error) {
		b, _ := json.Marshal(body)
		status, out, err := s.do("POST", path, adminToken, "application/json", b)
		if err != nil || status != 201 {
			return "", fmt.Errorf("POST %s: %d %s %v", path, status, out, err)
		}
		var v struct{ ID string }
		return v.ID, json.Unmarshal(out, &v)
	}
	reset := map[string]any{"duration": 1, "unit": "day"}
	alertAt := []int{50, 80, 100}
	limits := map[string]any{"consumer": map[string]any{"global": map[string]any{
		"token":   map[string]any{"enabled": true, "count": 1e12, "reset": reset, "alertAt": alertAt},
		"request": map[string]any{"enabled": true, "count": 1e9, "reset": reset, "alertAt": alertAt},
		"cost":    map[string]any{"enabled": true, "amount": 1e6, "reset": reset, "alertAt": alertAt},
	}}}
	var provs []string
	for i := range o.provs {
		id, err := post("/providers", map[string]any{"name": fmt.Sprintf("provider-%d", i), "type": "openai", "url": "http://127.0.0.1:9"})
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(limits)
		if status, out, err := s.do("PUT", "/providers/"+id+"/rate-limits", adminToken, "application/json", b, "If-Match", "*"); err != nil || status != 200 {
			return nil, fmt.Errorf("rate limits: %d %s %v", status, out, err)
		}
		provs = append(provs, id)
	}
	for i := range o.apps {
		id, err := post("/applications", map[string]any{"name": fmt.Sprintf("app-%d", i), "providers": provs})
		if err != nil {
			return nil, err
		}
		ids[fmt.Sprintf("app-%d", i)] = id
	}
	return ids, nil
}

func ingest(o options) error {
	if o.records == 0 {
		o.records = 200_000
	}
	if o.data == "" && o.database == "" {
		dir, err := os.MkdirTemp("", "usagebench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.data = dir
	}
	s, err := startPlatform(o)
	if err != nil {
		return err
	}
	defer s.close()
	// One gateway (token, id) per sender; each sends its share of the
	// records in batches encoded beforehand, so that the timing is the
	// platform's (and the HTTP client's), not the encoding's.
	type sender struct {
		token   string
		batches [][]byte
	}
	senders := make([]sender, o.gateways)
	per := o.records / o.gateways
	appIDs, err := setupAlerts(s, o)
	if err != nil {
		return err
	}
	now := time.Now()
	for g := range senders {
		status, b, err := s.do("POST", "/gateways", adminToken, "application/json", []byte(fmt.Sprintf(`{"name":"bench-%d"}`, g)))
		if err != nil || status != 201 {
			return fmt.Errorf("creating a gateway: %d %s %v", status, b, err)
		}
		var gw struct{ ID, Token string }
		if err := json.Unmarshal(b, &gw); err != nil {
			return err
		}
		senders[g].token = gw.Token
		recs := usagetest.Random(rand.New(rand.NewPCG(uint64(g), 1)), o.shape(), per, fmt.Sprintf("g%d", g), gw.ID,
			now.Add(-time.Hour), time.Hour)
		for i := range recs {
			if id, ok := appIDs[recs[i].Application]; ok {
				recs[i].Application = id
			}
		}
		for i := 0; i < len(recs); i += o.batch {
			senders[g].batches = append(senders[g].batches, usagetest.Batch(recs[i:min(i+o.batch, len(recs))]))
		}
	}
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for _, sd := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range sd.batches {
				t0 := time.Now()
				status, body, err := s.do("POST", "/gateway/usage", sd.token, "application/x-ndjson", b)
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				if firstErr == nil && (err != nil || status != 200) {
					firstErr = fmt.Errorf("ingest: %d %.300s %v", status, body, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return firstErr
	}
	total := per * o.gateways
	fmt.Printf("engine %s: %d records in %d batches of %d from %d gateways in %.2f s: %.0f records/s; batch latency p50 %s p99 %s max %s\n",
		engine(o), total, len(lat), o.batch, o.gateways, elapsed.Seconds(), float64(total)/elapsed.Seconds(),
		pct(lat, 50), pct(lat, 99), pct(lat, 100))
	// A resend of everything: all duplicates.
	start = time.Now()
	for _, sd := range senders {
		for _, b := range sd.batches {
			status, body, err := s.do("POST", "/gateway/usage", sd.token, "application/x-ndjson", b)
			if err != nil || status != 200 || !bytes.Contains(body, []byte(`"accepted":0`)) {
				return fmt.Errorf("resend: %d %s %v", status, body, err)
			}
		}
	}
	fmt.Printf("resend of every batch (one sender): %.0f records/s, all duplicates\n", float64(total)/time.Since(start).Seconds())
	return nil
}

func engine(o options) string {
	if o.database != "" {
		return "postgres"
	}
	return "sqlite"
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s) - 1) * p / 100
	return s[i].Round(100 * time.Microsecond)
}

// --- generate

func defaultData(o *options) {
	if o.data == "" {
		o.data = "usagebench-data"
	}
}

// generate writes o.records records dated over the o.days days before now
// into the store through the usage service (the ingest path without HTTP
// and decoding), in time order, o.generateBatch per transaction.
func generate(o options) error {
	defaultData(&o)
	if o.records == 0 {
		o.records = 10_000_000
	}
	ctx := context.Background()
	st, err := store.Open(ctx, o.dsn(), nil)
	if err != nil {
		return err
	}
	defer st.Close()
	svc, err := usage.New(usage.Options{Store: st, Retention: -1})
	if err != nil {
		return err
	}
	gw := "gw-bench"
	if err := st.Write(ctx, func(tx store.Tx) error {
		return tx.InsertGateway(ctx, store.Gateway{ID: gw, Name: "usagebench", CreatedAt: time.Now()})
	}); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	span := time.Duration(o.days) * 24 * time.Hour
	from := time.Now().Add(-span)
	batches := (o.records + o.generateBatch - 1) / o.generateBatch
	slice := span / time.Duration(batches)
	rng := rand.New(rand.NewPCG(42, 42))
	start, last := time.Now(), time.Now()
	var done int
	for b := range batches {
		n := min(o.generateBatch, o.records-done)
		recs := usagetest.Random(rng, o.shape(), n, fmt.Sprintf("b%d", b), gw, from.Add(time.Duration(b)*slice), slice)
		res, err := svc.Ingest(ctx, gw, recs)
		if err != nil {
			return err
		}
		if res.Accepted != n {
			return fmt.Errorf("batch %d: %+v (was the store not empty?)", b, res)
		}
		done += n
		if time.Since(last) > 30*time.Second || done == o.records {
			last = time.Now()
			el := time.Since(start)
			fmt.Printf("%d records in %.0f s: %.0f records/s\n", done, el.Seconds(), float64(done)/el.Seconds())
		}
	}
	return nil
}

// --- query

// queries are the dashboard's questions, over the generated span.
func queries(days int) []string {
	d := func(n int) string { return url.QueryEscape(time.Now().AddDate(0, 0, -n).UTC().Format(time.RFC3339)) }
	return []string{
		fmt.Sprintf("/usage?bucket=day&from=%s", d(days)),
		fmt.Sprintf("/usage?bucket=day&groupBy=application&from=%s", d(days)),
		fmt.Sprintf("/usage?bucket=day&groupBy=application,model&from=%s", d(days)),
		fmt.Sprintf("/usage?bucket=day&groupBy=key&application=app-7&from=%s", d(days)),
		fmt.Sprintf("/usage?bucket=hour&groupBy=model&from=%s", d(7)),
		fmt.Sprintf("/usage?bucket=hour&groupBy=application,model,key&from=%s", d(1)),
		fmt.Sprintf("/usage?bucket=hour&groupBy=application,provider,route,model,key,resolution,statusClass&from=%s", d(1)),
		"/usage/records?limit=100",
		"/usage/records?limit=100&application=app-7&model=model-1-2",
	}
}

func query(o options) error {
	defaultData(&o)
	s, err := startPlatform(o)
	if err != nil {
		return err
	}
	defer s.close()
	fmt.Printf("engine %s, %d runs each (after one warm-up run):\n\n", engine(o), o.queryRepeat)
	fmt.Println("| query | rows | p50 | max |")
	fmt.Println("|---|---|---|---|")
	for _, q := range queries(o.days) {
		var ds []time.Duration
		var rows int
		for i := range o.queryRepeat + 1 {
			t0 := time.Now()
			status, b, err := s.do("GET", q, adminToken, "", nil)
			d := time.Since(t0)
			if err != nil || status != 200 {
				return fmt.Errorf("%s: %d %.300s %v", q, status, b, err)
			}
			var out struct {
				Rows    []json.RawMessage `json:"rows"`
				Records []json.RawMessage `json:"records"`
				Totals  struct {
					Requests int64 `json:"requests"`
				} `json:"totals"`
			}
			if err := json.Unmarshal(b, &out); err != nil {
				return err
			}
			rows = len(out.Rows) + len(out.Records)
			if i > 0 {
				ds = append(ds, d)
			}
		}
		u, _ := url.QueryUnescape(q)
		fmt.Printf("| `%s` | %d | %s | %s |\n", stripFrom(u), rows, pct(ds, 50), pct(ds, 100))
	}
	return nil
}

// stripFrom shortens the from= timestamp of a query for the report.
func stripFrom(q string) string {
	if i := strings.Index(q, "from="); i >= 0 {
		return q[:i] + "from=…"
	}
	return q
}

// --- size

func size(o options) error {
	defaultData(&o)
	ctx := context.Background()
	driver, dsn := "sqlite", "file:"+o.dsn()
	if o.database != "" {
		driver, dsn = "pgx", o.database
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM usage_records`).Scan(&n); err != nil {
		return err
	}
	q := `SELECT name, SUM(pgsize) FROM dbstat WHERE name LIKE 'usage%' OR name LIKE 'sqlite_autoindex_usage%' GROUP BY name ORDER BY name`
	if o.database != "" {
		if _, err := db.ExecContext(ctx, `VACUUM ANALYZE`); err != nil {
			return err
		}
		q = `SELECT CASE WHEN c.relname LIKE 'usage_records_p%' THEN 'usage_records (partitions)' ELSE c.relname END,
			SUM(pg_total_relation_size(c.oid)) FROM pg_class c
			WHERE c.relkind = 'r' AND c.relname LIKE 'usage%' GROUP BY 1 ORDER BY 1`
	} else if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Printf("engine %s, %d records\n\n| table or index | bytes | per million records |\n|---|---|---|\n", engine(o), n)
	var total int64
	for rows.Next() {
		var name string
		var b int64
		if err := rows.Scan(&name, &b); err != nil {
			return err
		}
		total += b
		fmt.Printf("| %s | %d | %.1f MiB |\n", name, b, float64(b)/float64(n)*1e6/(1<<20))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fmt.Printf("| total | %d | %.1f MiB |\n", total, float64(total)/float64(n)*1e6/(1<<20))
	var rollups [2]int64
	for i, t := range []string{"usage_hourly", "usage_daily"} {
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+t).Scan(&rollups[i]); err != nil {
			return err
		}
	}
	fmt.Printf("\nrollup rows: %d hourly, %d daily\n", rollups[0], rollups[1])
	return nil
}
