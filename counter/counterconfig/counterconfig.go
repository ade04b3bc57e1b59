// Package counterconfig builds the counter store a gateway charges from the
// deployment's counters section: the in-process memory store, or the Redis
// store that several replicas share for one cluster-wide limit.
//
// The store is chosen once, at startup. A reload that changes the counters
// section cannot swap it (reservations in flight hold tickets of the running
// store, and counts would silently restart from zero); use Equal to detect
// the change and keep the running store until a restart.
//
// This file is the only one of the counter tree (tests aside) that reads the
// deployment's types: the stores take their own Options and know nothing of
// the deployment document.
package counterconfig

import (
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/counter/memory"
	"sluice/counter/redisstore"
	"sluice/deployment"
)

// Backend names, as written in counters.backend.
const (
	Memory = "memory"
	Redis  = "redis"
)

// Options are the gateway services handed to the store. Zero values are
// allowed: no logger means slog.Default(), no registerer means no metrics, no
// clock means time.Now.
type Options struct {
	Logger *slog.Logger
	// Metrics registers the Redis store's collectors. Registering twice on one
	// registerer fails, so call New once per registerer.
	Metrics prometheus.Registerer
	// Now is the memory store's clock, and the clock of the Redis store's
	// local fallback (Redis counters use redis TIME).
	Now func() time.Time
}

// New returns the store that c selects; an empty backend is memory. The Redis
// store connects lazily, so New succeeds while Redis is down (its failure
// mode then applies per call); it fails on a configuration it cannot use.
// The caller owns the store and must Close it.
func New(c deployment.Counters, opts Options) (counter.Store, error) {
	switch c.Backend {
	case "", Memory:
		return memory.New(memory.Options{Now: opts.Now}), nil
	case Redis:
		o := redisOptions(c.Redis)
		o.Logger, o.Metrics, o.Now = opts.Logger, opts.Metrics, opts.Now
		s, err := redisstore.New(o)
		if err != nil {
			return nil, fmt.Errorf("counters: redis backend: %w", err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("counters: unknown backend %q (want %q or %q)", c.Backend, Memory, Redis)
}

// RedisClient returns a client of the Redis that c's redis section names,
// with the counter store's settings (timeouts, no command retries), for
// the services that share it (fair admission's capacity leases). The
// caller owns it and must Close it.
func RedisClient(c deployment.Counters) (redis.UniversalClient, error) {
	cl, err := redisstore.NewClient(redisOptions(c.Redis))
	if err != nil {
		return nil, fmt.Errorf("counters: redis backend: %w", err)
	}
	return cl, nil
}

// Equal reports whether a and b select the same store with the same settings.
// An empty backend equals "memory"; the redis section is ignored for memory.
func Equal(a, b deployment.Counters) bool {
	if backend(a) != backend(b) {
		return false
	}
	if backend(a) == Memory {
		return true
	}
	x, y := a.Redis, b.Redis
	// reflect, not a field list, so a field added to deployment.Redis later is
	// compared too. nil and empty addrs mean the same.
	if len(x.Addrs) == 0 && len(y.Addrs) == 0 {
		x.Addrs, y.Addrs = nil, nil
	}
	return reflect.DeepEqual(x, y)
}

func backend(c deployment.Counters) string {
	if c.Backend == "" {
		return Memory
	}
	return c.Backend
}

// Describe is the store c selects, as log attributes without credentials:
// the backend and, for redis, the address(es) (a URL without its user
// information), cluster mode, key prefix, failure mode and lease mode.
func Describe(c deployment.Counters) []any {
	if backend(c) == Memory {
		return []any{"backend", Memory, "scope", "this process only"}
	}
	r := c.Redis
	addr := strings.Join(r.Addrs, ",")
	if r.URL != "" {
		if u, err := url.Parse(r.URL); err == nil {
			u.User = nil
			addr = u.String()
		} else {
			addr = "(unparseable url)"
		}
	}
	return []any{"backend", Redis, "addr", addr, "cluster", r.Cluster || len(r.Addrs) > 1,
		"key_prefix", r.KeyPrefix, "failure_mode", r.FailureMode, "leases", leaseMode(r.Leases)}
}

func leaseMode(l deployment.Leases) string {
	if l.Mode == "" {
		return deployment.DefaultLeaseMode
	}
	return l.Mode
}

// redisOptions maps the deployment's counters.redis section to the Redis
// store's Options; New adds the services (Logger, Metrics, Now).
func redisOptions(c deployment.Redis) redisstore.Options {
	return redisstore.Options{
		URL:          c.URL,
		Addrs:        c.Addrs,
		Cluster:      c.Cluster,
		Username:     c.Username,
		Password:     c.Password,
		TLS:          c.TLS,
		KeyPrefix:    c.KeyPrefix,
		FailureMode:  c.FailureMode,
		DialTimeout:  time.Duration(c.DialTimeout),
		ReadTimeout:  time.Duration(c.ReadTimeout),
		WriteTimeout: time.Duration(c.WriteTimeout),
		PoolSize:     c.PoolSize,
		Leases: redisstore.LeaseOptions{
			Enabled: c.Leases.Mode != LeasesOff,
			TTL:     time.Duration(c.Leases.TTL),
			Exclude: leaseExclusions(c.Leases.Exclude),
		},
	}
}

// LeasesOff is the counters.redis.leases.mode that turns leases off ("auto",
// the default, turns them on for the counters they can help).
const LeasesOff = "off"

// leaseExclusions is the redisstore.LeaseOptions.Exclude of the
// deployment's exclusions (nil when there are none): a group (see
// counter.Group) is excluded when its route and policy match one of them,
// an empty field matching any.
func leaseExclusions(ex []deployment.LeaseExclusion) func(group string) bool {
	if len(ex) == 0 {
		return nil
	}
	return func(group string) bool {
		route, _, policy, ok := counter.SplitGroup(group)
		if !ok {
			return false
		}
		for _, e := range ex {
			if (e.Route == "" || e.Route == route) && (e.Policy == "" || e.Policy == policy) {
				return true
			}
		}
		return false
	}
}
