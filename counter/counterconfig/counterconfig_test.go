package counterconfig_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/counter"
	"sluice/counter/counterconfig"
	"sluice/counter/memory"
	"sluice/counter/redisstore"
	"sluice/deployment"
	"sluice/internal/redistest"
)

func TestNew(t *testing.T) {
	url := redistest.URL(t)
	redisCfg := func(mut func(*deployment.Redis)) deployment.Counters {
		r := deployment.Redis{URL: url, KeyPrefix: redistest.KeyPrefix(t), FailureMode: "closed"}
		if mut != nil {
			mut(&r)
		}
		return deployment.Counters{Backend: "redis", Redis: r}
	}
	tests := []struct {
		name    string
		cfg     deployment.Counters
		want    string // "memory" or "redis"
		wantErr string
	}{
		{name: "empty backend is memory", cfg: deployment.Counters{}, want: "memory"},
		{name: "memory", cfg: deployment.Counters{Backend: "memory"}, want: "memory"},
		{name: "memory ignores a redis section", cfg: deployment.Counters{Backend: "memory", Redis: deployment.Redis{URL: "redis://nowhere:1"}}, want: "memory"},
		{name: "redis url", cfg: redisCfg(nil), want: "redis"},
		{name: "redis addrs", cfg: redisCfg(func(r *deployment.Redis) {
			r.Addrs, r.URL = []string{strings.TrimSuffix(strings.TrimPrefix(url, "redis://"), "/0")}, ""
		}), want: "redis"},
		{name: "unknown backend", cfg: deployment.Counters{Backend: "etcd"}, wantErr: `unknown backend "etcd"`},
		{name: "redis without address", cfg: deployment.Counters{Backend: "redis"}, wantErr: "url or addrs required"},
		{name: "redis url and addrs", cfg: redisCfg(func(r *deployment.Redis) { r.Addrs = []string{"127.0.0.1:1"} }), wantErr: "not both"},
		{name: "redis bad failure mode", cfg: redisCfg(func(r *deployment.Redis) { r.FailureMode = "maybe" }), wantErr: `failureMode "maybe"`},
		{name: "redis bad url", cfg: redisCfg(func(r *deployment.Redis) { r.URL = "http://x" }), wantErr: "url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			s, err := counterconfig.New(tc.cfg, counterconfig.Options{Metrics: reg})
			if tc.wantErr != "" {
				if err == nil {
					s.Close()
					t.Fatalf("New succeeded, want error containing %q", tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "counters: ") {
					t.Fatalf("error %q: want prefix %q and %q", err, "counters: ", tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer s.Close()
			switch tc.want {
			case "memory":
				if _, ok := s.(*memory.Store); !ok {
					t.Fatalf("got %T, want *memory.Store", s)
				}
			case "redis":
				if _, ok := s.(*redisstore.Store); !ok {
					t.Fatalf("got %T, want *redisstore.Store", s)
				}
			}
			// The store counts: a 1-unit limit admits once, then denies. On
			// redis (failure mode closed) this also proves it reached the server.
			debits := []counter.Debit{{
				Key:    "{counters-test}:x",
				Limit:  counter.Limit{Algorithm: counter.FixedWindow, Max: 1, Period: time.Hour},
				Amount: 1,
			}}
			var res counter.Result
			for i, want := range []bool{true, false} {
				if err := s.Reserve(context.Background(), debits, &res); err != nil {
					t.Fatalf("Reserve %d: %v", i, err)
				}
				if res.Allowed != want {
					t.Fatalf("Reserve %d: allowed=%v, want %v", i, res.Allowed, want)
				}
			}
			if tc.want == "redis" {
				if n := countMetrics(t, reg, "sluice_redis_store_op_duration_seconds"); n == 0 {
					t.Fatalf("redis store registered no op-duration metric on Options.Metrics")
				}
			}
		})
	}
}

// TestNewMemoryUsesClock checks that Options.Now reaches the memory store: a
// fixed window admits again once the injected clock passes the window's end.
func TestNewMemoryUsesClock(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	s, err := counterconfig.New(deployment.Counters{}, counterconfig.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	debits := []counter.Debit{{Key: "{c}:k", Limit: counter.Limit{Algorithm: counter.FixedWindow, Max: 1, Period: time.Hour}, Amount: 1}}
	var res counter.Result
	for _, step := range []struct {
		advance time.Duration
		want    bool
	}{{0, true}, {30 * time.Minute, false}, {30 * time.Minute, true}} {
		now = now.Add(step.advance)
		if err := s.Reserve(context.Background(), debits, &res); err != nil {
			t.Fatal(err)
		}
		if res.Allowed != step.want {
			t.Fatalf("at %v: allowed=%v, want %v", now, res.Allowed, step.want)
		}
	}
}

func TestEqual(t *testing.T) {
	base := deployment.Counters{Backend: "redis", Redis: deployment.Redis{URL: "redis://a:1/0", KeyPrefix: "p:", FailureMode: "open"}}
	with := func(mut func(*deployment.Counters)) deployment.Counters {
		c := base
		c.Redis.Addrs = append([]string(nil), base.Redis.Addrs...)
		mut(&c)
		return c
	}
	tests := []struct {
		name string
		a, b deployment.Counters
		want bool
	}{
		{"identical", base, with(func(*deployment.Counters) {}), true},
		{"empty is memory", deployment.Counters{}, deployment.Counters{Backend: "memory"}, true},
		{"memory ignores redis section", deployment.Counters{Backend: "memory"}, deployment.Counters{Backend: "memory", Redis: deployment.Redis{URL: "redis://x:1"}}, true},
		{"nil and empty addrs", base, with(func(c *deployment.Counters) { c.Redis.Addrs = []string{} }), true},
		{"backend", base, with(func(c *deployment.Counters) { c.Backend = "memory" }), false},
		{"url", base, with(func(c *deployment.Counters) { c.Redis.URL = "redis://b:1/0" }), false},
		{"prefix", base, with(func(c *deployment.Counters) { c.Redis.KeyPrefix = "q:" }), false},
		{"failure mode", base, with(func(c *deployment.Counters) { c.Redis.FailureMode = "closed" }), false},
		{"pool size", base, with(func(c *deployment.Counters) { c.Redis.PoolSize = 5 }), false},
		{"timeout", base, with(func(c *deployment.Counters) { c.Redis.ReadTimeout = deployment.Duration(time.Second) }), false},
		{"addrs", base, with(func(c *deployment.Counters) { c.Redis.URL, c.Redis.Addrs = "", []string{"a:1"} }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := counterconfig.Equal(tc.a, tc.b); got != tc.want {
				t.Fatalf("Equal = %v, want %v", got, tc.want)
			}
			if got := counterconfig.Equal(tc.b, tc.a); got != tc.want {
				t.Fatalf("Equal (swapped) = %v, want %v", got, tc.want)
			}
		})
	}
}

func countMetrics(t *testing.T, g prometheus.Gatherer, name string) int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}
