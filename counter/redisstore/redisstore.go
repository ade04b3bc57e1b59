// Package redisstore is the cluster-wide counter store: counter.Store on Redis
// (standalone or Cluster) through go-redis v9, so that several gateway
// replicas enforce one limit.
//
// Every call is one operation of one Lua script (luaBatch): a Reserve or
// Peek over all of the call's keys (all or nothing, atomically), or an
// Adjust. Calls made while the store's round trips are busy are merged into
// one script invocation (see coalescer). The script takes the time from
// redis TIME, so all replicas share one clock. It is sent with EVALSHA and
// falls back to EVAL on NOSCRIPT (after a restart or SCRIPT FLUSH), which
// loads it again.
//
// When a call to Redis fails, whatever the error (unreachable, timeout, a
// server that refuses the call: OOM, NOAUTH, READONLY, LOADING..., or a bug
// such as a script error; only the caller's own context being done is
// returned as is), the store follows its failure mode: "open" serves the
// call from an in-process fallback store and marks the ticket so that its
// settlement goes there too, and copies those charges to Redis once it
// answers again (copyBack); "closed" returns an error wrapping
// counter.ErrUnavailable. After a failure, calls skip Redis for a short
// back-off (probeInterval) and then try it again; go-redis redials by
// itself, so service resumes without a restart. See failure.go.
package redisstore

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"sluice/counter"
	"sluice/counter/memory"
)

// Ticket origins (counter.Ticket.Origin).
const (
	// OriginRedis: the charges landed in Redis (the zero value).
	OriginRedis uint8 = 0
	// OriginLocal: Redis was unavailable and the fallback store took them.
	OriginLocal uint8 = 1
	// OriginLease: a lease this store holds served them (their units were
	// charged in Redis with the lease); a settlement goes to the lease while
	// it is valid, else to Redis.
	OriginLease uint8 = 2
)

// Failure modes.
const (
	FailOpen   = "open"
	FailClosed = "closed"
)

// Defaults, short enough that a dead Redis never stalls a request for long.
const (
	DefaultKeyPrefix    = "sluice:"
	DefaultDialTimeout  = 200 * time.Millisecond
	DefaultReadTimeout  = 100 * time.Millisecond
	DefaultWriteTimeout = 100 * time.Millisecond
	DefaultMaxInFlight  = 2
)

// maxBatch bounds the store calls sent in one round trip (and so merged
// into one script invocation).
const maxBatch = 128

// Options configures New. Zero values take the defaults.
type Options struct {
	// URL is a redis:// or rediss:// URL (with Cluster: a cluster URL with
	// addr= parameters for further seeds). Exclusive with Addrs.
	URL string
	// Addrs are host:port seeds. More than one selects Redis Cluster.
	Addrs []string
	// Cluster forces Redis Cluster with a single seed (or URL).
	Cluster bool
	// Username and Password override the URL's.
	Username string
	Password string
	// TLS enables TLS (rediss:// URLs enable it too).
	TLS bool
	// KeyPrefix is prepended to every counter key (default "sluice:").
	KeyPrefix string
	// FailureMode is "open" (default) or "closed".
	FailureMode string
	// Timeouts per dial and per command (defaults 200 ms, 100 ms, 100 ms).
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// PoolSize is the connection pool size per node (default: go-redis's, 10
	// per CPU).
	PoolSize int
	// MaxInFlight bounds the script round trips in flight per store (default
	// DefaultMaxInFlight). Calls made while all are busy wait and then go
	// out together, merged into one script invocation (one per hash slot on
	// Cluster), each with its own reply: concurrent requests share the
	// socket work and Redis's per-script costs instead of paying for them
	// each. It is also the number of connections dialed at start
	// (MinIdleConns), so the first requests do not all dial at once.
	MaxInFlight int
	// Logger receives rate-limited failure reports (default slog.Default()).
	Logger *slog.Logger
	// Metrics registers the store's collectors (nil: none).
	Metrics prometheus.Registerer
	// Now is the clock of the local fallback store and of leases (their
	// expiry as this store sees it; default time.Now); Redis counters use
	// redis TIME.
	Now func() time.Time
	// Leases configures budget leases (off when not Enabled); see
	// LeaseOptions and docs/redis.md.
	Leases LeaseOptions
	// Hooks are added to the go-redis client (tracing, command counting).
	Hooks []redis.Hook
}

// Store is counter.Store on Redis. Safe for concurrent use.
type Store struct {
	client  redis.UniversalClient
	cluster bool
	prefix  string
	closed  bool // failure mode closed
	local   *memory.Store
	log     *slog.Logger
	m       *metrics

	co        *coalescer
	settledFn func(*scriptCall) // s.settled, bound once

	// journal holds the local fallback's charges until copyBack copies them
	// to Redis; copying is set while a copy runs, copies counts them.
	journal journal
	copying atomic.Bool
	copies  sync.WaitGroup

	// skipUntil is the wall-clock UnixNano until which calls skip Redis after
	// a failure (0: Redis is believed up).
	skipUntil atomic.Int64
	// The failure logs (see logFailure) and the recovery log, each rate
	// limited.
	outageLog, bugLog, upLog logLimiter

	// leases are this store's budget leases (nil: off).
	leases *leaseTable

	// clockSpec, when set (tests only), overrides the scripts' clock: see
	// now_us in lua/common.lua.
	clockSpec func() string
}

var _ counter.Store = (*Store)(nil)

// New connects lazily (go-redis dials on first use), so it succeeds while
// Redis is down; the failure mode then applies per call.
func New(opts Options) (*Store, error) {
	switch opts.FailureMode {
	case "", FailOpen, FailClosed:
	default:
		return nil, fmt.Errorf("redisstore: failureMode %q: want %q or %q", opts.FailureMode, FailOpen, FailClosed)
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	client, cluster, err := newClient(&opts)
	if err != nil {
		return nil, err
	}
	for _, h := range opts.Hooks {
		client.AddHook(h)
	}
	s := &Store{
		client:  client,
		cluster: cluster,
		prefix:  opts.KeyPrefix,
		closed:  opts.FailureMode == FailClosed,
		local:   memory.New(memory.Options{Now: opts.Now}),
		log:     opts.Logger,
		m:       newMetrics(opts.Metrics),
		co:      newCoalescer(client, redis.NewScript(luaBatch), opts.MaxInFlight, maxBatch),
	}
	s.settledFn = s.settled
	if s.prefix == "" {
		s.prefix = DefaultKeyPrefix
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if opts.Leases.Enabled {
		s.leases = newLeaseTable(opts.Leases, opts.Now)
		go s.reap()
	}
	return s, nil
}

// Close implements counter.Store: it releases the leases it holds and the
// releases still to retry, and copies the local fallback's charges still
// journaled, to Redis if Redis is up (see copyBack; within copyTimeout
// each), waits for the settlements still being sent in the
// background (each bounded by the command timeouts), then closes the Redis
// client and stops the fallback store's sweeper. Calls must not be made
// during or after Close.
func (s *Store) Close() error {
	if s.leases != nil {
		s.closeLeases()
	}
	s.finalCopy()
	s.co.close()
	_ = s.local.Close()
	return s.client.Close()
}
