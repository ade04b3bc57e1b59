package e2e

// A Redis outage under load, end to end: two gateway processes on one Redis,
// one with failureMode open and one with closed. Redis is killed mid-load and
// started again on the same port.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/counter/redisstore"
	"sluice/deployment"
	"sluice/internal/proctest"
	"sluice/internal/redistest"
	"sluice/tokencount"
)

// outageLimit is far above what the test sends: every denial here is the
// store's, never the limit's.
const outageLimit = 1_000_000_000

// outageMaxLatency bounds every request, before, during and after the outage:
// a dead Redis must cost a request at most a dial or command timeout, never a
// hang.
const outageMaxLatency = 2 * time.Second

// outageSample is one request of the steady load.
type outageSample struct {
	start   time.Time
	latency time.Duration
	status  int
	code    string // X-Sluice-Error-Code
	problem string // envelope mismatch on a 503, or a transport error
}

// outageLoad sends requests back to back from a few workers to one gateway
// and records every answer until stop is closed.
type outageLoad struct {
	mu      sync.Mutex
	samples []outageSample
	wg      sync.WaitGroup
}

func startOutageLoad(ctx context.Context, gw *proctest.Proc, body []byte, workers int, stop <-chan struct{}) *outageLoad {
	l := &outageLoad{}
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: workers},
		// Far above outageMaxLatency, so a hang shows as a slow sample
		// rather than being cut short.
		Timeout: 4 * outageMaxLatency,
	}
	for range workers {
		l.wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				start := time.Now()
				status, hdr, b, err := postReplicaChat(ctx, client, gw.URL, body)
				s := outageSample{start: start, latency: time.Since(start), status: status}
				switch {
				case err != nil:
					s.problem = err.Error()
				case status == http.StatusServiceUnavailable:
					s.code = hdr.Get("X-Sluice-Error-Code")
					s.problem = checkErrorEnvelope(hdr, b, "ratelimit_store_unavailable", "server_error", "")
				case status != http.StatusOK:
					s.problem = fmt.Sprintf("status %d: %s", status, procTail(string(b), 200))
				}
				l.mu.Lock()
				l.samples = append(l.samples, s)
				l.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	return l
}

// waitAnswered blocks until at least n requests have been answered.
func (l *outageLoad) waitAnswered(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for {
		l.mu.Lock()
		got := len(l.samples)
		l.mu.Unlock()
		if got >= n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("only %d of %d requests answered before the deadline", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// between returns the samples that started at or after from and were
// answered before to: a request in flight when Redis was killed or started
// belongs to no phase.
func (l *outageLoad) between(from, to time.Time) []outageSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []outageSample
	for _, s := range l.samples {
		if !s.start.Before(from) && s.start.Add(s.latency).Before(to) {
			out = append(out, s)
		}
	}
	return out
}

type outageSummary struct {
	n, ok, unavailable int
	maxLatency         time.Duration
	problems           []string
}

func summarise(samples []outageSample) outageSummary {
	var s outageSummary
	for _, x := range samples {
		s.n++
		s.maxLatency = max(s.maxLatency, x.latency)
		switch {
		case x.problem != "":
			if len(s.problems) < 5 {
				s.problems = append(s.problems, x.problem)
			}
		case x.status == http.StatusOK:
			s.ok++
		case x.status == http.StatusServiceUnavailable:
			s.unavailable++
		}
	}
	return s
}

func (s outageSummary) String() string {
	return fmt.Sprintf("%d requests: %d x 200, %d x 503, max latency %v", s.n, s.ok, s.unavailable, s.maxLatency.Round(time.Millisecond))
}

// outageCounters is a counters section for the outage test. The command
// timeouts are raised from the 100 ms default to 1 s as a precaution: on a
// busy CI machine (end-to-end latencies of 400 ms were seen here) a healthy
// Redis round trip could exceed 100 ms, and in closed mode that is a 503
// before the outage even starts. A killed Redis refuses connections at once,
// so the timeouts do not slow the outage answers down.
func outageCounters(url, prefix, mode string) string {
	return fmt.Sprintf("  backend: redis\n  redis: {url: %q, keyPrefix: %q, failureMode: %s, dialTimeout: 500ms, readTimeout: 1s, writeTimeout: 1s}", url, prefix, mode)
}

// TestRedisOutage: while Redis is down the open gateway keeps answering 200
// (counting locally) and the closed one answers 503
// ratelimit_store_unavailable once the leases it holds have expired (they
// serve for at most their TTL: capacity already granted); neither hangs or
// crashes; after Redis is back both use it again within seconds, without a
// restart.
func TestRedisOutage(t *testing.T) {
	bin := sluiceBin.Path(t)
	upstream := proctest.StartMock(t, bin).URL
	srv := redistest.StartServer(t)
	prefix := redistest.KeyPrefix(t)
	openGW := proctest.StartGateway(t, bin, "gateway-open", "--log-level", "warn",
		"--config", writeReplicaDeployment(t, upstream, outageCounters(srv.URL(), prefix, "open"), outageLimit, "1h"))
	closedGW := proctest.StartGateway(t, bin, "gateway-closed", "--log-level", "warn",
		"--config", writeReplicaDeployment(t, upstream, outageCounters(srv.URL(), prefix, "closed"), outageLimit, "1h"))
	req := newCostedChat(t, tokencount.New(), "Are you still there?", 8)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	stop := make(chan struct{})
	openLoad := startOutageLoad(ctx, openGW, req.body, 4, stop)
	closedLoad := startOutageLoad(ctx, closedGW, req.body, 4, stop)
	stopLoad := sync.OnceFunc(func() {
		close(stop)
		openLoad.wg.Wait()
		closedLoad.wg.Wait()
	})
	defer stopLoad()

	// Healthy phase: wait for answers through both gateways rather than for a
	// fixed time, so that a slow machine still has a "before" phase to judge.
	openLoad.waitAnswered(t, ctx, 20)
	closedLoad.waitAnswered(t, ctx, 20)
	tStop := time.Now()
	srv.Stop()
	tDown := time.Now() // Redis has exited: every reservation from here on fails
	// The leases held when Redis died serve for at most their TTL.
	tLeased := tDown.Add(deployment.DefaultLeaseTTL.D())
	time.Sleep(deployment.DefaultLeaseTTL.D() + 2*time.Second)
	tStart := time.Now()
	srv.Start()

	// Recovery of the closed gateway: poll its answers until 200s come back.
	var tRecovered time.Time
	deadline := time.Now().Add(15 * time.Second)
	for tRecovered.IsZero() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("closed gateway did not answer 200 again within 15s of Redis restarting; since restart: %v",
				summarise(closedLoad.between(tStart, time.Now())))
		}
		time.Sleep(50 * time.Millisecond)
		for _, s := range closedLoad.between(tStart, time.Now()) {
			if s.status == http.StatusOK && s.start.After(tStart) {
				tRecovered = s.start
				break
			}
		}
	}
	// Steady state after recovery: one more second of load.
	time.Sleep(time.Second)
	tSettled := tRecovered.Add(250 * time.Millisecond) // past one probe interval
	tEnd := time.Now()
	stopLoad()

	before := tStop.Add(-time.Hour)
	phases := []struct {
		name     string
		from, to time.Time
	}{
		{"before", before, tStop},
		{"outage", tDown, tStart},
		{"outage, leases expired", tLeased, tStart},
		{"after recovery", tSettled, tEnd},
	}
	for _, ph := range phases {
		o, c := summarise(openLoad.between(ph.from, ph.to)), summarise(closedLoad.between(ph.from, ph.to))
		t.Logf("%s: open gateway %v; closed gateway %v", ph.name, o, c)
		for _, s := range []struct {
			name string
			sum  outageSummary
		}{{"open", o}, {"closed", c}} {
			if s.sum.n == 0 {
				t.Errorf("%s: %s gateway got no requests", ph.name, s.name)
			}
			if len(s.sum.problems) > 0 {
				t.Errorf("%s: %s gateway: %s", ph.name, s.name, strings.Join(s.sum.problems, "; "))
			}
			if s.sum.maxLatency >= outageMaxLatency {
				t.Errorf("%s: %s gateway took %v for one request, want under %v", ph.name, s.name, s.sum.maxLatency, outageMaxLatency)
			}
		}
		if o.ok != o.n {
			t.Errorf("%s: open gateway answered %d of %d requests with 200, want all", ph.name, o.ok, o.n)
		}
		// Closed gateway: all 200 outside the outage; during it, 503 but for
		// what its leases serve, and all 503 once they have expired.
		want, got := c.n, c.ok
		switch ph.name {
		case "outage":
			got = c.ok + c.unavailable
		case "outage, leases expired":
			got = c.unavailable
		}
		if got != want {
			t.Errorf("%s: closed gateway: %v", ph.name, c)
		}
	}
	t.Logf("closed gateway answered 200 again %v after Redis was started (%v after it was stopped)",
		tRecovered.Sub(tStart).Round(time.Millisecond), tRecovered.Sub(tStop).Round(time.Millisecond))

	for _, p := range []*proctest.Proc{openGW, closedGW} {
		if p.Exited() {
			t.Errorf("%s exited during the outage: %v", p.Name, p.Err())
		}
	}
	if n := metricValue(t, openGW, `sluice_redis_store_fallback_calls_total{op="reserve"}`); n == 0 {
		t.Errorf("open gateway served no reservation from its local fallback during the outage")
	}

	// Redis lost every key when it was killed. The open gateway copies what
	// it charged locally during the outage to Redis once it is back, so
	// the counter ends up holding at least the outage requests' tokens.
	used := func() int64 {
		return replicaCounterUsed(t, redisstore.Options{URL: srv.URL(), KeyPrefix: prefix}, outageLimit)
	}
	outageOK := int64(summarise(openLoad.between(tDown, tStart)).ok)
	// Leases the load left are released once idle: until then Redis counts
	// their unused part too.
	time.Sleep(deployment.DefaultLeaseTTL.D())
	var u0 int64
	copyDeadline := time.Now().Add(10 * time.Second)
	for {
		copied := metricValue(t, openGW, `sluice_redis_store_copied_charges_total{result="copied"}`)
		u := used()
		time.Sleep(300 * time.Millisecond)
		if copied > 0 && used() == u {
			u0 = u
			break
		}
		if time.Now().After(copyDeadline) {
			t.Fatalf("the open gateway's outage charges were not copied to Redis within 10s (copied %v, counter %d)", copied, u)
		}
	}
	t.Logf("after recovery Redis holds %d tokens; the open gateway served %d requests (%d tokens) locally during the outage", u0, outageOK, outageOK*req.cost)
	if u0 < outageOK*req.cost {
		t.Errorf("after recovery Redis holds %d tokens, want at least the %d the open gateway charged locally during the outage (%d requests)", u0, outageOK*req.cost, outageOK)
	}
	// New requests through the open gateway charge Redis, not its fallback.
	client := &http.Client{Timeout: 4 * outageMaxLatency}
	for range 5 {
		status, _, b, err := postReplicaChat(ctx, client, openGW.URL, req.body)
		if err != nil || status != http.StatusOK {
			t.Fatalf("open gateway after recovery: status %d, err %v: %s", status, err, b)
		}
	}
	time.Sleep(deployment.DefaultLeaseTTL.D())
	if got := used() - u0; got != 5*req.cost {
		t.Errorf("after recovery 5 requests through the open gateway charged %d tokens in Redis, want %d", got, 5*req.cost)
	}
}

// metricValue scrapes p's /metrics and returns the value of the sample whose
// name and labels are exactly series (0 when absent).
func metricValue(t *testing.T, p *proctest.Proc, series string) float64 {
	t.Helper()
	resp, err := http.Get(p.URL + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", p.Name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s /metrics: %q: %v", p.Name, line, err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s /metrics: %v", p.Name, err)
	}
	return 0
}
