package e2e

// Cluster-wide counters for gateways that pull from the platform: `sluice
// platform` with a Redis counters setting and two `sluice gateway
// --platform` processes enforce one backend token limit across both
// gateways; the same platform without the setting lets each gateway count
// alone. The Redis password travels to the gateways in the delivered
// document and nowhere else in clear.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/internal/proctest"
	"sluice/internal/redistest"
)

// The load of the cluster-wide counters test: pulledClients clients send
// pulledPerClient requests each, round robin over two gateways, against a
// backend limit of pulledLimit tokens per hour. Each gateway alone receives
// about twice the limit, so counting alone each admits about the limit.
const (
	pulledLimit     = 3000
	pulledClients   = 8
	pulledPerClient = 30
)

// pulledGateways is a platform with one provider "openai" at the mock (a
// backend token limit of pulledLimit per day), one application with a key,
// and two gateways pulling from it, both serving the current version.
type pulledGateways struct {
	plat     *proctest.Proc
	admin    *admin
	provider string
	key      string
	data     string
	gws      []*proctest.Proc
	tokens   []idOnly // the gateways' ids and tokens
	caches   []string
}

func startPulledGateways(t *testing.T, bin, mock string, env []string, args ...string) *pulledGateways {
	t.Helper()
	pg := &pulledGateways{data: t.TempDir()}
	pg.plat = proctest.Start(t, bin, proctest.Spec{Name: "platform", ReadyPath: "/healthz",
		Env:  append(withEnv("SLUICE_ADMIN_TOKEN="+e2eAdminToken), env...),
		Args: append([]string{"platform", "--admin-listen", "127.0.0.1:0", "--data", pg.data}, args...)})
	a := newAdmin(t, pg.plat.URL)
	pg.admin = a
	pg.provider = a.create("/providers", map[string]any{"name": "openai", "type": "openai", "url": mock, "apiKey": e2eUpstreamKey}).ID
	a.setLimits(pg.provider, map[string]any{"backend": map[string]any{"global": map[string]any{"token": tokenLimit(pulledLimit)}}})
	app := a.create("/applications", map[string]any{"name": "cluster", "providers": []string{pg.provider}}).ID
	pg.key = a.create("/applications/"+app+"/keys", nil).Key
	for _, name := range []string{"edge-1", "edge-2"} {
		tok := a.create("/gateways", map[string]any{"name": name})
		cache := filepath.Join(t.TempDir(), "deployment.cache")
		pg.caches = append(pg.caches, cache)
		pg.tokens = append(pg.tokens, tok)
		pg.gws = append(pg.gws, pg.startGateway(t, bin, len(pg.gws)))
		a.waitApplied(tok.ID)
	}
	return pg
}

// startGateway starts gateway i (again) with its token and cache.
func (pg *pulledGateways) startGateway(t *testing.T, bin string, i int) *proctest.Proc {
	t.Helper()
	return proctest.StartGateway(t, bin, fmt.Sprintf("edge-%d", i+1), "--platform", pg.plat.URL, "--token", pg.tokens[i].Token,
		"--cache", pg.caches[i], "--platform-timeout", "5s")
}

// load sends the test's traffic and logs what was admitted. bound is the
// most one counter shared by both gateways may admit in it:
//
//   - the limit;
//   - plus what the requests in flight add after their admission: the
//     generated token limit reserves the prompt estimate only (reserveOutput
//     none, docs/ratelimit.md, "Hard caps need both"), so each client's
//     request in flight when the limit is reached can still add its output,
//     at most the largest request's cost per client;
//   - plus the refill of the hourly token bucket while the load runs
//     (limit/3600 per second).
func (pg *pulledGateways) load(t *testing.T) (res replicaLoad, bound int64) {
	t.Helper()
	reqs := replicaRequests(t)
	start := time.Now()
	res = loadReplicasAs(t, pg.gws, pg.key, reqs, pulledClients, pulledPerClient)
	refill := int64(math.Ceil(pulledLimit * time.Since(start).Seconds() / 3600))
	bound = pulledLimit + pulledClients*maxChatCost(reqs) + refill
	t.Logf("admitted %d tokens in %d requests (limit %d, %.2fx; one shared counter's bound %d), denied %d; per gateway admitted %v denied %v",
		res.admitted, res.admittedCount, pulledLimit, float64(res.admitted)/pulledLimit, bound, res.denied, res.perGateway, res.perGatewayDeny)
	if res.denied == 0 {
		t.Errorf("no request was denied: the load did not reach the limit")
	}
	return res, bound
}

// redisUser creates a Redis ACL user with a random password, allowed only
// the commands the store sends (docs/platform.md, "Cluster-wide counters")
// on the keys under prefix, and returns the redis:// URL that logs in as it.
func redisUser(t *testing.T, serverURL, prefix string) (userURL, password string) {
	t.Helper()
	opts, err := redis.ParseURL(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	user, password := "sluice-"+hex.EncodeToString(b[:4]), "pw-"+hex.EncodeToString(b[4:])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Do(ctx, "ACL", "SETUSER", user, "on", ">"+password, "~"+prefix+"*", "-@all", "+evalsha", "+eval", "+mget", "+get", "+set", "+del", "+time").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { _ = c.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String(), password
}

// redisKeys counts the keys under prefix.
func redisKeys(t *testing.T, serverURL, prefix string) int {
	t.Helper()
	opts, err := redis.ParseURL(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

// TestPlatformCountersClusterWide: with `--counters-redis` (here from
// SLUICE_COUNTERS_REDIS_URL, a URL with a password) two pulled gateways
// admit at most the backend limit plus the in-flight bound together; without
// it the same traffic admits about twice the limit, which shows the first
// assertion can fail.
func TestPlatformCountersClusterWide(t *testing.T) {
	bin := sluiceBin.Path(t)
	mock := proctest.StartMock(t, bin).URL

	t.Run("redis", func(t *testing.T) {
		server := redistest.URL(t)
		prefix := redistest.KeyPrefix(t)
		userURL, password := redisUser(t, server, prefix)
		// Failure mode closed: a Redis failure would be a 503 (which fails
		// the load), never silent counting per gateway; generous timeouts
		// for a busy machine.
		pg := startPulledGateways(t, bin, mock, []string{countersEnv + "=" + userURL},
			"--counters-key-prefix", prefix, "--counters-failure-mode", "closed", "--counters-timeout", "5s", "--counters-dial-timeout", "2s")
		for _, gw := range pg.gws {
			gw.WaitLog(t, 5*time.Second, "counter store", "backend=redis", "key_prefix="+prefix)
		}

		res, bound := pg.load(t)
		if res.admitted > bound {
			t.Errorf("admitted %d tokens across 2 gateways, above the cluster-wide limit %d plus the in-flight bound (%d)", res.admitted, pulledLimit, bound)
		}
		if low := int64(pulledLimit) - maxChatCost(replicaRequests(t)); res.admitted <= low {
			t.Errorf("admitted %d tokens, want more than %d (the limit minus the largest request): the limit was not used", res.admitted, low)
		}
		for g, n := range res.perGateway {
			if n == 0 {
				t.Errorf("gateway %d admitted nothing: the gateways did not share the counter", g)
			}
		}
		if n := redisKeys(t, server, prefix); n == 0 {
			t.Errorf("no Redis key under the prefix %q: the gateways did not count in Redis", prefix)
		}

		// The password: in the document delivered to gateways (they must
		// log in), masked in the deployment view, in clear nowhere else.
		var view struct{ YAML string }
		pg.admin.must(200, "GET", "/providers/"+pg.provider+"/deployment", nil, &view)
		masked := strings.Replace(userURL, password, "xxxxx", 1)
		if strings.Contains(view.YAML, password) || !strings.Contains(view.YAML, "url: "+masked) {
			t.Errorf("the deployment view must show the Redis URL with its password masked (%s):\n%s", masked, view.YAML)
		}
		for _, path := range []string{"/audit?limit=500", "/providers/" + pg.provider} {
			if _, _, b := pg.admin.do("GET", path, nil); strings.Contains(string(b), password) {
				t.Errorf("GET %s shows the Redis password", path)
			}
		}
		grepFiles(t, pg.data, password)
		logs := pg.plat.Stderr() + pg.plat.Stdout()
		for i, gw := range pg.gws {
			logs += gw.Stderr() + gw.Stdout()
			grepFiles(t, filepath.Dir(pg.caches[i]), password)
		}
		if strings.Contains(logs, password) {
			t.Error("the logs hold the Redis password")
		}
	})

	t.Run("memory", func(t *testing.T) {
		pg := startPulledGateways(t, bin, mock, []string{countersEnv + "="})
		res, bound := pg.load(t)
		// Each gateway counts alone, so each admits about the limit.
		if low := 2 * (int64(pulledLimit) - maxChatCost(replicaRequests(t))); res.admitted < low || res.admitted <= bound {
			t.Errorf("memory counters admitted %d tokens, want at least %d (each gateway alone admits the limit) and above the Redis bound %d", res.admitted, low, bound)
		}
	})
}

// countersEnv is the variable `sluice platform` and `sluice serve` read the
// counters' Redis URL from.
const countersEnv = "SLUICE_COUNTERS_REDIS_URL"

// TestServeCountersRedis: the gateway inside `sluice serve` counts in the
// Redis of --counters-redis too.
func TestServeCountersRedis(t *testing.T) {
	bin := sluiceBin.Path(t)
	prefix := redistest.KeyPrefix(t)
	serve := proctest.Start(t, bin, proctest.Spec{Name: "serve", ReadyPath: "/healthz",
		Env: withEnv("SLUICE_ADMIN_TOKEN="+e2eAdminToken, countersEnv+"="),
		Args: []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data", t.TempDir(),
			"--counters-redis", redistest.URL(t), "--counters-key-prefix", prefix}})
	serve.WaitLog(t, 10*time.Second, "counter store", "backend=redis", "key_prefix="+prefix)
}

// TestPlatformCountersChangeNeedsGatewayRestart: the platform restarted with
// Redis counters makes them a new version; the running gateways apply it but
// keep counting in memory (and say so), and a restarted gateway counts in
// Redis.
func TestPlatformCountersChangeNeedsGatewayRestart(t *testing.T) {
	bin := sluiceBin.Path(t)
	mock := proctest.StartMock(t, bin).URL
	pg := startPulledGateways(t, bin, mock, []string{countersEnv + "="})
	pg.plat.Signal(t, syscall.SIGTERM)
	pg.plat.WaitExit(t, 20*time.Second)

	server, prefix := redistest.URL(t), redistest.KeyPrefix(t)
	plat := proctest.Start(t, bin, proctest.Spec{Name: "platform-redis", ReadyPath: "/healthz",
		Env: withEnv("SLUICE_ADMIN_TOKEN="+e2eAdminToken, countersEnv+"="+server),
		Args: []string{"platform", "--admin-listen", strings.TrimPrefix(pg.plat.URL, "http://"), "--data", pg.data,
			"--counters-key-prefix", prefix}})
	plat.WaitLog(t, 5*time.Second, "the counters setting of the generated deployments changed", "backend=redis")
	a := newAdmin(t, plat.URL)
	for i, gw := range pg.gws {
		gw.WaitLog(t, 15*time.Second, "the counters section changed")
		a.waitApplied(pg.tokens[i].ID)
	}
	var audit struct {
		Entries []struct {
			TokenID string `json:"tokenId"`
			Action  string `json:"action"`
		} `json:"entries"`
	}
	a.must(200, "GET", "/audit?limit=1", nil, &audit)
	if e := audit.Entries[0]; e.Action != "counters.update" || e.TokenID != "startup" {
		t.Errorf("latest audit entry %+v, want counters.update by startup", e)
	}
	if got := chatOnce(t, pg.gws[0].URL, "openai", pg.key); got != 200 {
		t.Fatalf("a running gateway after the change: %d", got)
	}
	if n := redisKeys(t, server, prefix); n != 0 {
		t.Fatalf("%d Redis keys: a running gateway must keep its memory store until it restarts", n)
	}

	pg.gws[0].Signal(t, syscall.SIGTERM)
	pg.gws[0].WaitExit(t, 40*time.Second)
	pg.plat = plat
	gw := pg.startGateway(t, bin, 0)
	gw.WaitLog(t, 5*time.Second, "counter store", "backend=redis", "key_prefix="+prefix)
	if got := chatOnce(t, gw.URL, "openai", pg.key); got != 200 {
		t.Fatalf("the restarted gateway: %d", got)
	}
	if n := redisKeys(t, server, prefix); n == 0 {
		t.Fatal("the restarted gateway did not count in Redis")
	}
}
