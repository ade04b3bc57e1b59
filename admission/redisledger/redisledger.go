// Package redisledger is admission.CapacityLedger on Redis: the replicas of
// one deployment share each provider's capacity through one hash per target
// (hash-tagged, so Redis Cluster keeps it in one slot), which one Lua script
// (capacity.lua) renews and releases leases in atomically. The script keeps
// the sum of the live leases within the capacity, drops expired leases, and
// divides the capacity fairly (water-filling over the replicas' demands);
// it takes the time from redis TIME, so every replica uses the same clock.
// Scripts go out as EVALSHA and fall back to EVAL on NOSCRIPT (loaded once
// per server). docs/fairness.md has the design and its bounds.
package redisledger

import (
	"context"
	"crypto/rand"
	_ "embed" // the Lua script
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/admission"
)

//go:embed capacity.lua
var capacityLua string

// script is capacity.lua; redis.Script is immutable and safe to share.
var script = redis.NewScript(capacityLua)

// DefaultKeyPrefix is the counter store's default, so that one keyPrefix
// separates deployments sharing a Redis for both.
const DefaultKeyPrefix = "sluice:"

// Options configure New.
type Options struct {
	// Client is the Redis client (standalone or Cluster); the caller owns it.
	Client redis.UniversalClient
	// KeyPrefix is prepended to every key (default "sluice:").
	KeyPrefix string
	// Replica names this process's leases (default: host, pid and a random
	// suffix; it must differ between replicas).
	Replica string
}

// Ledger is the Redis capacity ledger. Safe for concurrent use.
type Ledger struct {
	client  redis.UniversalClient
	prefix  string
	replica string
	// now, when set (tests only), pins the script's clock (Unix ms).
	now func() int64
}

var _ admission.CapacityLedger = (*Ledger)(nil)

// New returns a ledger on o.Client. It does not contact Redis.
func New(o Options) *Ledger {
	l := &Ledger{client: o.Client, prefix: o.KeyPrefix, replica: o.Replica}
	if l.prefix == "" {
		l.prefix = DefaultKeyPrefix
	}
	if l.replica == "" {
		l.replica = ReplicaID()
	}
	return l
}

// ReplicaID is a name for this process: host, pid and 6 random bytes.
func ReplicaID() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Replica is the name this ledger's leases are recorded under.
func (l *Ledger) Replica() string { return l.replica }

// Key is the hash of target's leases.
func (l *Ledger) Key(target string) string { return l.prefix + "capacity:{" + target + "}" }

// Renew implements admission.CapacityLedger: one script call.
func (l *Ledger) Renew(ctx context.Context, r admission.LeaseRequest) (admission.Lease, error) {
	clock := ""
	if l.now != nil {
		clock = strconv.FormatInt(l.now(), 10)
	}
	ttl := max(r.TTL.Milliseconds(), 1)
	res, err := script.Run(ctx, l.client, []string{l.Key(r.Target)}, l.replica, "renew",
		r.Capacity.MaxConcurrent, r.Capacity.MaxTokensInFlight,
		r.Held.Requests, r.Held.Tokens, r.Demand.Requests, r.Demand.Tokens, ttl, clock).Int64Slice()
	if err != nil {
		return admission.Lease{}, fmt.Errorf("redisledger: renew %s: %w", r.Target, err)
	}
	if len(res) != 5 {
		return admission.Lease{}, fmt.Errorf("redisledger: renew %s: reply of %d values, want 5", r.Target, len(res))
	}
	return admission.Lease{
		Granted:     admission.Amount{Requests: res[0], Tokens: res[1]},
		Entitlement: admission.Amount{Requests: res[2], Tokens: res[3]},
		Replicas:    int(res[4]),
	}, nil
}

// Release implements admission.CapacityLedger: one script call.
func (l *Ledger) Release(ctx context.Context, target string) error {
	if err := script.Run(ctx, l.client, []string{l.Key(target)}, l.replica, "release").Err(); err != nil {
		return fmt.Errorf("redisledger: release %s: %w", target, err)
	}
	return nil
}

// Leases reads target's hash: every replica's recorded lease and expiry
// (for tests and diagnostics; expired leases included until a renewal drops
// them).
func (l *Ledger) Leases(ctx context.Context, target string) (map[string]Recorded, error) {
	m, err := l.client.HGetAll(ctx, l.Key(target)).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Recorded, len(m))
	for id, v := range m {
		var rec Recorded
		var exp int64
		if _, err := fmt.Sscanf(v, "%d|%d|%d|%d|%d", &rec.Held.Requests, &rec.Held.Tokens,
			&rec.Demand.Requests, &rec.Demand.Tokens, &exp); err != nil {
			return nil, fmt.Errorf("redisledger: %s field %s: %q: %w", l.Key(target), id, v, err)
		}
		rec.Expires = time.UnixMilli(exp)
		out[id] = rec
	}
	return out, nil
}

// Recorded is one replica's entry in a target's hash.
type Recorded struct {
	Held, Demand admission.Amount
	Expires      time.Time
}
