package e2e

// Redis answering with an error instead of being unreachable, end to end: a
// full Redis (OOM), credentials changed under running gateways (NOAUTH),
// a Redis turned into a replica (READONLY); and, for the quota report,
// Redis gone. Every such error follows the gateway's failureMode, as an
// outage does: open serves and counts locally, then copies the charges to
// Redis; closed answers 503. Never a 500.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/counter/redisstore"
	"sluice/internal/proctest"
	"sluice/internal/redistest"
	"sluice/tokencount"
)

// redisFault is an error condition provoked on the gateways' Redis.
type redisFault struct {
	name string
	kind string // the kind label of sluice_redis_store_errors_total
	// readsFail: peeks fail too, so the quota report has no lines.
	readsFail bool
	// wipes: the fault replaces Redis's dataset (a replica syncs its
	// master's): the counters start again from what is copied back.
	wipes       bool
	start, stop func(t *testing.T)
}

func redisFaults(t *testing.T, srv *redistest.Server) []redisFault {
	ctx := context.Background()
	client := func(pw string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: pw, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	admin := client("")
	master := redistest.StartServer(t)
	mc := redis.NewClient(&redis.Options{Addr: master.Addr()})
	defer mc.Close()
	must(t, mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err())
	return []redisFault{
		{name: "OOM", kind: "oom",
			start: func(t *testing.T) {
				must(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
				must(t, admin.ConfigSet(ctx, "maxmemory", "1").Err())
			},
			stop: func(t *testing.T) { must(t, admin.ConfigSet(ctx, "maxmemory", "0").Err()) }},
		{name: "NOAUTH", kind: "auth", readsFail: true,
			start: func(t *testing.T) {
				// As after a restart with a password: connections made from
				// now on are refused.
				must(t, admin.ConfigSet(ctx, "requirepass", "sekrit").Err())
				must(t, client("sekrit").ClientKillByFilter(ctx, "TYPE", "normal").Err())
			},
			stop: func(t *testing.T) {
				if err := client("sekrit").ConfigSet(ctx, "requirepass", "").Err(); err != nil && !strings.Contains(err.Error(), "without any password") {
					t.Error(err)
				}
			}},
		{name: "READONLY", kind: "server", wipes: true,
			start: func(t *testing.T) {
				port := master.Addr()[strings.LastIndexByte(master.Addr(), ':')+1:]
				must(t, admin.Do(ctx, "REPLICAOF", "127.0.0.1", port).Err())
				deadline := time.Now().Add(15 * time.Second)
				for {
					info, err := admin.Info(ctx, "replication").Result()
					if err == nil && strings.Contains(info, "master_link_status:up") {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("replica not in sync: %v %s", err, info)
					}
					time.Sleep(20 * time.Millisecond)
				}
			},
			stop: func(t *testing.T) { must(t, admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err()) }},
		// Not an error reply but no Redis at all, for the quota report: the
		// open gateway's local counters are not the shared ones.
		{name: "down", kind: "connection", readsFail: true, wipes: true,
			start: func(*testing.T) { srv.Stop() },
			stop:  func(*testing.T) { srv.Start() }},
	}
}

// quotaLines is GET /openai/v1/quota of gw as the replicas application: the
// status and the number of lines.
func quotaLines(t *testing.T, gw *proctest.Proc) (int, int) {
	t.Helper()
	status, body := procGet(t, gw, "/openai/v1/quota", replicaAPIKey)
	if status != http.StatusOK {
		return status, 0
	}
	var rep struct {
		Limits []json.RawMessage `json:"limits"`
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatalf("%s quota: %v: %s", gw.Name, err, body)
	}
	return status, len(rep.Limits)
}

// TestRedisErrorsFollowFailureMode: with Redis full (OOM), refusing the
// gateways' connections (NOAUTH) or turned into a replica (READONLY), the
// gateway with failureMode open answers every request 200, counting it
// locally, and once Redis is writable again the shared counter holds exactly
// every token it admitted; the one with closed answers 503
// ratelimit_store_unavailable. Neither answers 500, and the quota endpoint
// answers 200 (without lines when the shared counters cannot be read, in
// both modes: the open gateway's local counters are not them). The errors
// are counted by kind.
func TestRedisErrorsFollowFailureMode(t *testing.T) {
	bin := sluiceBin.Path(t)
	upstream := proctest.StartMock(t, bin).URL
	srv := redistest.StartServer(t)
	openPrefix, closedPrefix := redistest.KeyPrefix(t), redistest.KeyPrefix(t)
	openGW := proctest.StartGateway(t, bin, "gateway-open", "--log-level", "warn",
		"--config", writeReplicaDeployment(t, upstream, outageCounters(srv.URL(), openPrefix, "open"), outageLimit, "1h"))
	closedGW := proctest.StartGateway(t, bin, "gateway-closed", "--log-level", "warn",
		"--config", writeReplicaDeployment(t, upstream, outageCounters(srv.URL(), closedPrefix, "closed"), outageLimit, "1h"))
	req := newCostedChat(t, tokencount.New(), "Is the counter store well?", 8)
	client := &http.Client{Timeout: 4 * outageMaxLatency}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	faults := redisFaults(t, srv)
	// The open gateway's admissions must all land in one hour window, or
	// the copy of an ended window's charges is (rightly) dropped.
	waitOutOfWindowEdge(t, time.Hour, 2*time.Minute)

	// admitted is every token the open gateway admitted; the shared counter
	// must end up holding all of them (but those a fault wiped).
	var admitted, wiped int64
	post := func(gw *proctest.Proc) (int, string) {
		t.Helper()
		status, hdr, body, err := postReplicaChat(ctx, client, gw.URL, req.body)
		if err != nil {
			t.Fatalf("%s: %v", gw.Name, err)
		}
		switch {
		case status == http.StatusOK && gw == openGW:
			admitted += req.cost
		case status == http.StatusServiceUnavailable:
			if msg := checkErrorEnvelope(hdr, body, "ratelimit_store_unavailable", "server_error", ""); msg != "" {
				t.Errorf("%s: 503: %s", gw.Name, msg)
			}
		case status != http.StatusOK:
			t.Errorf("%s: status %d: %s", gw.Name, status, procTail(string(body), 300))
		}
		return status, hdr.Get("X-Sluice-Error-Code")
	}
	used := func() int64 {
		return replicaCounterUsed(t, redisstore.Options{URL: srv.URL(), KeyPrefix: openPrefix}, outageLimit)
	}

	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			for _, gw := range []*proctest.Proc{openGW, closedGW} {
				deadline := time.Now().Add(15 * time.Second)
				for s, _ := post(gw); s != http.StatusOK; s, _ = post(gw) {
					if time.Now().After(deadline) {
						t.Fatalf("%s not answering 200 before the fault", gw.Name)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			errSeries := fmt.Sprintf(`sluice_redis_store_errors_total{kind=%q,op="reserve"}`, f.kind)
			errsBefore := []float64{metricValue(t, openGW, errSeries), metricValue(t, closedGW, errSeries)}
			copiedBefore := metricValue(t, openGW, `sluice_redis_store_copied_charges_total{result="copied"}`)

			// A lease held when the fault starts would report its usage
			// after it, into a wiped counter: start with none.
			for _, gw := range []*proctest.Proc{openGW, closedGW} {
				waitNoLeases(t, gw)
			}
			f.start(t)
			t.Cleanup(func() { f.stop(t) })
			if f.wipes {
				wiped = admitted
			}
			const n = 10
			var ok, unavailable int
			for range n {
				if s, _ := post(openGW); s == http.StatusOK {
					ok++
				}
				if s, code := post(closedGW); s == http.StatusServiceUnavailable && code == "ratelimit_store_unavailable" {
					unavailable++
				}
			}
			if ok != n {
				t.Errorf("open gateway answered %d of %d requests 200 during the fault", ok, n)
			}
			if unavailable != n {
				t.Errorf("closed gateway answered %d of %d requests 503 ratelimit_store_unavailable during the fault", unavailable, n)
			}
			for _, gw := range []*proctest.Proc{openGW, closedGW} {
				status, lines := quotaLines(t, gw)
				if status != http.StatusOK {
					t.Errorf("%s: quota during the fault: status %d, want 200", gw.Name, status)
				}
				if f.readsFail && lines != 0 {
					t.Errorf("%s: quota during the fault has %d lines, want none (the counters cannot be read)", gw.Name, lines)
				}
			}
			for i, gw := range []*proctest.Proc{openGW, closedGW} {
				if got := metricValue(t, gw, errSeries); got <= errsBefore[i] {
					t.Errorf("%s: %s = %v, want more than %v", gw.Name, errSeries, got, errsBefore[i])
				}
			}

			f.stop(t)
			// Back to Redis: the closed gateway answers 200 again, and the
			// open one copies what it counted locally, so that the shared
			// counter holds every token it admitted. Requests keep going to
			// it, so that charges counted locally after a copy started are
			// copied by the next one.
			deadline := time.Now().Add(30 * time.Second)
			for s, _ := post(closedGW); s != http.StatusOK; s, _ = post(closedGW) {
				if time.Now().After(deadline) {
					t.Fatalf("closed gateway not answering 200 within 15s of the fault's end")
				}
				time.Sleep(100 * time.Millisecond)
			}
			for {
				post(openGW)
				copied := metricValue(t, openGW, `sluice_redis_store_copied_charges_total{result="copied"}`)
				u := used()
				if copied > copiedBefore && u == admitted-wiped {
					t.Logf("%s: Redis holds the %d tokens the open gateway admitted since the last wipe", f.name, u)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the fault Redis holds %d tokens, want %d (copied charges %v, before %v)", u, admitted-wiped, copied, copiedBefore)
				}
				// Slow enough that the gateway takes no lease (whose unused
				// part Redis would count) and releases the one it holds.
				time.Sleep(time.Second)
			}
		})
	}
	for _, gw := range []*proctest.Proc{openGW, closedGW} {
		if gw.Exited() {
			t.Errorf("%s exited: %v", gw.Name, gw.Err())
		}
	}
}

// waitNoLeases waits until gw holds no budget lease (it releases them when
// idle).
func waitNoLeases(t *testing.T, gw *proctest.Proc) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for metricValue(t, gw, "sluice_redis_store_leases") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds leases after 10s", gw.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
