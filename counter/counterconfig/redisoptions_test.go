package counterconfig

import (
	"reflect"
	"testing"
	"time"

	"sluice/counter"
	"sluice/counter/redisstore"
	"sluice/deployment"
)

func TestRedisOptions(t *testing.T) {
	c := deployment.Redis{
		URL: "redis://h:1/2", Cluster: true, Username: "u", Password: "p", TLS: true, KeyPrefix: "x:", FailureMode: "closed",
		DialTimeout: deployment.Duration(time.Second), ReadTimeout: deployment.Duration(2 * time.Second),
		WriteTimeout: deployment.Duration(3 * time.Second), PoolSize: 7,
		Leases: deployment.Leases{Mode: "auto", TTL: deployment.Duration(5 * time.Second)},
	}
	got := redisOptions(c)
	want := redisstore.Options{URL: "redis://h:1/2", Cluster: true, Username: "u", Password: "p", TLS: true, KeyPrefix: "x:", FailureMode: "closed",
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second, PoolSize: 7,
		Leases: redisstore.LeaseOptions{Enabled: true, TTL: 5 * time.Second}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("redisOptions = %+v, want %+v", got, want)
	}
	c.Leases.Mode = LeasesOff
	if redisOptions(c).Leases.Enabled {
		t.Error("leases enabled with mode off")
	}
}

func TestLeaseExclusions(t *testing.T) {
	if leaseExclusions(nil) != nil {
		t.Error("an exclusion function without exclusions")
	}
	ex := leaseExclusions([]deployment.LeaseExclusion{
		{Route: "payments"},
		{Policy: "basic-ratelimit"},
		{Route: "openai", Policy: "llm-cost-based-ratelimit"},
	})
	for _, c := range []struct {
		group string
		want  bool
	}{
		{counter.Group("payments", "token-based-ratelimit"), true},
		{counter.Group("payments:app-1", "token-based-ratelimit"), true},
		{counter.Group("payments-eu", "token-based-ratelimit"), false},
		{counter.Group("openai/chat/completions:app-1", "basic-ratelimit"), true},
		{counter.Group("openai:app-1", "llm-cost-based-ratelimit"), true},
		{counter.Group("openai:app-1", "token-based-ratelimit"), false},
		{counter.Group("other", "llm-cost-based-ratelimit"), false},
		{"not a group", false},
	} {
		if got := ex(c.group); got != c.want {
			t.Errorf("excluded(%q) = %v, want %v", c.group, got, c.want)
		}
	}
}
