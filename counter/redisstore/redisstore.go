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
// itself, so service resumes without a restart. See errors.go.
package redisstore

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"sluice/counter"
	"sluice/counter/memory"
)

// Ticket origins (counter.Ticket.Origin).
const (
	// OriginRedis: the charges landed in Redis (the zero value).
	OriginRedis uint8 = 0
	// OriginLocal: Redis was unavailable and the fallback store took them.
	OriginLocal uint8 = 1
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

// maxDebits bounds the debits of one call (a luaBatch header holds the count
// in 16 bits).
const maxDebits = 1<<16 - 1

// probeInterval is how long calls skip Redis after it failed; then one call
// tries it again. It bounds both the calls that wait on a dead server and
// the delay before recovery is noticed.
const probeInterval = 250 * time.Millisecond

// logEvery rate-limits the outage and recovery logs.
const logEvery = 10 * time.Second

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
	// Now is the clock of the local fallback store only (default time.Now);
	// Redis counters use redis TIME.
	Now func() time.Time
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

	// clockSpec, when set (tests only), overrides the scripts' clock: see
	// now_us in scripts.go.
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
	return s, nil
}

func newClient(o *Options) (redis.UniversalClient, bool, error) {
	dial := orDefault(o.DialTimeout, DefaultDialTimeout)
	read := orDefault(o.ReadTimeout, DefaultReadTimeout)
	write := orDefault(o.WriteTimeout, DefaultWriteTimeout)
	if o.URL != "" && len(o.Addrs) > 0 {
		return nil, false, errors.New("redisstore: set url or addrs, not both")
	}
	if o.URL == "" && len(o.Addrs) == 0 {
		return nil, false, errors.New("redisstore: url or addrs required")
	}
	var tlsConf *tls.Config
	if o.TLS {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	// No command retries: a script that timed out may have run, and running
	// it again would charge twice. One dial attempt per call: the pool's own
	// probe redials in the background once a server is down.
	maint := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if o.Cluster || len(o.Addrs) > 1 {
		var co *redis.ClusterOptions
		if o.URL != "" {
			var err error
			if co, err = redis.ParseClusterURL(o.URL); err != nil {
				return nil, false, fmt.Errorf("redisstore: url: %w", err)
			}
		} else {
			co = &redis.ClusterOptions{Addrs: o.Addrs}
		}
		if o.Username != "" {
			co.Username = o.Username
		}
		if o.Password != "" {
			co.Password = o.Password
		}
		if tlsConf != nil && co.TLSConfig == nil {
			co.TLSConfig = tlsConf
		}
		co.DialTimeout, co.ReadTimeout, co.WriteTimeout = dial, read, write
		co.PoolTimeout = dial + read
		co.MaxRetries = -1
		co.DialerRetries = 1
		co.ContextTimeoutEnabled = true
		co.DisableIdentity = true
		co.Protocol = 2
		co.MaintNotificationsConfig = maint
		if o.PoolSize > 0 {
			co.PoolSize = o.PoolSize
		}
		co.MinIdleConns = min(o.MaxInFlight, poolSizeOr(co.PoolSize))
		return redis.NewClusterClient(co), true, nil
	}
	var ro *redis.Options
	if o.URL != "" {
		var err error
		if ro, err = redis.ParseURL(o.URL); err != nil {
			return nil, false, fmt.Errorf("redisstore: url: %w", err)
		}
	} else {
		ro = &redis.Options{Addr: o.Addrs[0]}
	}
	if o.Username != "" {
		ro.Username = o.Username
	}
	if o.Password != "" {
		ro.Password = o.Password
	}
	if tlsConf != nil && ro.TLSConfig == nil {
		if host, _, err := net.SplitHostPort(ro.Addr); err == nil {
			tlsConf.ServerName = host
		}
		ro.TLSConfig = tlsConf
	}
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = dial, read, write
	ro.PoolTimeout = dial + read
	ro.MaxRetries = -1
	ro.DialerRetries = 1
	ro.ContextTimeoutEnabled = true
	ro.DisableIdentity = true
	ro.Protocol = 2
	ro.MaintNotificationsConfig = maint
	if o.PoolSize > 0 {
		ro.PoolSize = o.PoolSize
	}
	ro.MinIdleConns = min(o.MaxInFlight, poolSizeOr(ro.PoolSize))
	return redis.NewClient(ro), false, nil
}

// poolSizeOr is a configured pool size, or go-redis's default (10 per CPU)
// when unset.
func poolSizeOr(n int) int {
	if n > 0 {
		return n
	}
	return 10 * runtime.GOMAXPROCS(0)
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Reserve implements counter.Store.
func (s *Store) Reserve(ctx context.Context, debits []counter.Debit, res *counter.Result) error {
	return s.evaluate(ctx, opReserve, debits, res)
}

// Peek implements counter.Store.
func (s *Store) Peek(ctx context.Context, debits []counter.Debit, res *counter.Result) error {
	return s.evaluate(ctx, opPeek, debits, res)
}

func (s *Store) evaluate(ctx context.Context, op string, debits []counter.Debit, res *counter.Result) error {
	res.Reset(len(debits))
	if len(debits) == 0 {
		res.Allowed = true
		return nil
	}
	for i := range debits {
		if err := counter.ValidateDebit(&debits[i]); err != nil {
			return fmt.Errorf("redisstore: %w", err)
		}
	}
	sc := getCall()
	defer putCall(sc)
	kind := kindReserve
	if op == opPeek {
		kind = kindPeek
	}
	err := s.prepare(sc, kind, debits, nil, nil)
	if err != nil {
		return err
	}
	if s.skipping() {
		return s.fallback(ctx, op, debits, res, nil)
	}
	start := time.Now()
	s.co.do(ctx, sc)
	err = sc.err
	s.m.observe(op, start)
	if err == nil {
		if reply, ok := sc.reply.(string); !ok || !fillResult(res, reply) {
			err = fmt.Errorf("%w %T for %d debits", errMalformedReply, sc.reply, len(debits))
		}
	}
	if err != nil {
		return s.failed(ctx, op, err, func() error { return s.fallback(ctx, op, debits, res, err) })
	}
	s.up()
	res.Ticket.Origin = OriginRedis
	return nil
}

// fillResult copies a reserve/peek reply (see luaBatch: 4 + 3n little-endian
// doubles, all integers) into res, sized for its n debits; false when the
// reply has another length.
func fillResult(res *counter.Result, reply string) bool {
	n := len(res.Remaining)
	if len(reply) != 8*(4+3*n) {
		return false
	}
	v := func(i int) int64 {
		b := reply[8*i : 8*i+8]
		u := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		return int64(math.Float64frombits(u))
	}
	res.Allowed = v(0) == 1
	res.Denied = int(v(1))
	res.RetryAfter = counter.FromMicros(v(2))
	res.Never = v(3) == 1
	for i := range n {
		o := 4 + 3*i
		res.Remaining[i] = v(o)
		res.ResetAfter[i] = counter.FromMicros(v(o + 1))
		res.Ticket.Window[i] = v(o + 2)
	}
	return true
}

// Adjust implements counter.Store. A ticket from the fallback store settles
// there; a Redis ticket whose settlement cannot reach Redis is dropped and
// counted (its keys expire by their TTL).
func (s *Store) Adjust(ctx context.Context, debits []counter.Debit, t *counter.Ticket, deltas []int64) error {
	if t == nil || len(deltas) != len(debits) || len(t.Window) != len(debits) {
		return fmt.Errorf("redisstore: Adjust with %d debits, %d deltas and a ticket of %d windows", len(debits), len(deltas), ticketLen(t))
	}
	for i := range debits {
		if err := debits[i].Limit.Validate(); err != nil {
			return fmt.Errorf("redisstore: key %q: %w", debits[i].Key, err)
		}
	}
	if t.Origin == OriginLocal {
		if err := s.local.Adjust(ctx, debits, t, deltas); err != nil {
			return err
		}
		s.journalLocal(debits, t.Window, func(i int) int64 { return deltas[i] })
		return nil
	}
	if allZero(deltas) {
		return nil
	}
	sc := getCall()
	err := s.prepare(sc, kindAdjust, debits, t.Window, deltas)
	if err != nil {
		putCall(sc)
		return err
	}
	if s.skipping() {
		putCall(sc)
		s.m.dropped.Inc()
		return s.dropErr(nil)
	}
	sc.start = time.Now()
	// In failure mode open a settlement returns nil whether it lands or is
	// dropped, so when it would queue anyway the caller need not wait for
	// it (see Background settlement in docs/redis.md). Mode closed waits,
	// to return ErrUnavailable.
	if !s.closed && s.co.post(sc, s.settledFn) {
		return nil
	}
	s.co.do(ctx, sc)
	err = s.settle(ctx, sc)
	putCall(sc)
	return err
}

// settle reads the outcome of an Adjust's round trip.
func (s *Store) settle(ctx context.Context, sc *scriptCall) error {
	err := sc.err
	s.m.observe(opAdjust, sc.start)
	if err != nil {
		return s.failed(ctx, opAdjust, err, func() error {
			s.m.dropped.Inc()
			return s.dropErr(err)
		})
	}
	s.up()
	return nil
}

// settled completes a background Adjust (see coalescer.post), which only
// mode open sends: every Redis error is logged and counted by failed and
// returns nil, so what is logged here is any other error.
func (s *Store) settled(sc *scriptCall) {
	if err := s.settle(context.Background(), sc); err != nil {
		s.log.Error("redisstore: settlement failed", "err", err)
	}
	putCall(sc)
}

// dropErr is what a dropped settlement returns: nothing in failure mode open
// (the failure is logged and counted), ErrUnavailable in mode closed.
func (s *Store) dropErr(cause error) error {
	if !s.closed {
		return nil
	}
	return unavailable(cause)
}

// Close implements counter.Store: it copies the local fallback's charges
// still journaled to Redis if Redis is up (see copyBack; within
// copyTimeout), waits for the settlements still being sent in the
// background (each bounded by the command timeouts), then closes the Redis
// client and stops the fallback store's sweeper. Calls must not be made
// during or after Close.
func (s *Store) Close() error {
	s.finalCopy()
	s.co.close()
	_ = s.local.Close()
	return s.client.Close()
}

// prepare fills sc for one operation of luaBatch: kind is kindReserve,
// kindPeek, kindAdjust or kindCharge (windows and deltas are only read by
// the latter two), made the group variant when the debits share a
// counter.Debit.Group.
func (s *Store) prepare(sc *scriptCall, kind byte, debits []counter.Debit, windows, deltas []int64) error {
	group, err := s.keys(sc, debits)
	if err != nil {
		return err
	}
	if group {
		switch kind {
		case kindReserve:
			kind = kindGroupReserve
		case kindPeek:
			kind = kindGroupPeek
		case kindAdjust:
			kind = kindGroupAdjust
		case kindCharge:
			kind = kindGroupCharge
		}
	}
	if kind == kindAdjust || kind == kindGroupAdjust || kind == kindCharge || kind == kindGroupCharge {
		sc.num = packAdjust(sc.num[:0], kind, debits, windows, deltas)
	} else {
		sc.num = packReserve(sc.num[:0], kind, debits, s.prefix)
	}
	sc.clock = s.clock()
	return nil
}

// keys fills sc.keys with the call's prefixed keys: the group's when the
// debits share a counter.Debit.Group (group is then true), else each debit's.
// On Redis Cluster all keys of one call must hash to one slot (callers
// share a {scope} hash tag), the per-key layout's keys of a group's
// counters too (a group's first reservation reads them); a call that
// breaks this is a wiring bug and fails loudly rather than with CROSSSLOT
// at random.
func (s *Store) keys(sc *scriptCall, debits []counter.Debit) (group bool, err error) {
	if len(debits) > maxDebits {
		return false, fmt.Errorf("redisstore: %d debits in one call, at most %d", len(debits), maxDebits)
	}
	g := debits[0].Group
	for i := range debits {
		if debits[i].Group != g {
			return false, fmt.Errorf("redisstore: debits %q and %q of one call are in different groups (%q, %q)", debits[0].Key, debits[i].Key, g, debits[i].Group)
		}
		if g != "" && len(s.prefix)+len(debits[i].Key) > maxKeyLen {
			return false, fmt.Errorf("redisstore: key %q longer than %d bytes", debits[i].Key, maxKeyLen)
		}
	}
	sc.slot = 0
	keys := sc.keyBuf[:0]
	if g != "" {
		keys = append(keys, s.prefix+g)
	} else {
		for i := range debits {
			keys = append(keys, s.prefix+debits[i].Key)
		}
	}
	sc.keyBuf, sc.keys = keys, keys
	if s.cluster {
		slot := Slot(keys[0])
		for i := range debits {
			if k := debits[i].Key; slotOf(s.prefix, k) != slot {
				s.log.Error("redisstore: keys of one call span cluster slots; share a {hash tag}", "first", keys[0], "other", s.prefix+k)
				return false, fmt.Errorf("redisstore: keys %q and %q hash to different cluster slots: give them one {hash tag}", keys[0], s.prefix+k)
			}
		}
		sc.slot = slot
	}
	return g != "", nil
}

// maxKeyLen bounds a grouped counter's key, which its reservation carries
// with a 16-bit length.
const maxKeyLen = 1<<16 - 1

// packReserve appends one reserve or peek operation of luaBatch: its
// header, then per debit the little-endian doubles alg, max, period_us,
// amount. Doubles are what the script computes with (Lua numbers); integers
// up to 2^53 are exact, and larger ones round as Lua's tonumber would round
// their decimal text. Over a group (kind kindGroupReserve or kindGroupPeek)
// each debit adds the counter's id (counterID) and its prefixed key in the
// per-key layout (16-bit length, bytes).
func packReserve(b []byte, kind byte, debits []counter.Debit, prefix string) []byte {
	b, h := appendHeader(b, kind, len(debits))
	group := kind == kindGroupReserve || kind == kindGroupPeek
	for i := range debits {
		d := &debits[i]
		b = appendLimit(b, d)
		b = appendF64(b, float64(d.Amount))
		if group {
			b = appendF64(b, counterID(d.Key))
			b = binary.LittleEndian.AppendUint16(b, uint16(len(prefix)+len(d.Key)))
			b = append(append(b, prefix...), d.Key...)
		}
	}
	return endOp(b, h)
}

// packAdjust appends one adjust operation of luaBatch: its header, then per
// debit alg, max, period_us, window_s, delta, as in packReserve; over a
// group (kind kindGroupAdjust or kindGroupCharge) the counter's id too. A
// charge (kindCharge, kindGroupCharge) is packed as an adjust.
func packAdjust(b []byte, kind byte, debits []counter.Debit, windows, deltas []int64) []byte {
	b, h := appendHeader(b, kind, len(debits))
	for i := range debits {
		b = appendLimit(b, &debits[i])
		b = appendF64(b, float64(windows[i]))
		b = appendF64(b, float64(deltas[i]))
		if kind == kindGroupAdjust || kind == kindGroupCharge {
			b = appendF64(b, counterID(debits[i].Key))
		}
	}
	return endOp(b, h)
}

// counterID identifies a counter within its group value: the low 52 bits
// of the FNV-1a 64 hash of its key, so that it is an exact Lua number. Two
// counters of one group (a handful of keys) share an id with a
// probability of about 2^-52 per pair.
func counterID(key string) float64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return float64(h & (1<<52 - 1))
}

func appendLimit(b []byte, d *counter.Debit) []byte {
	b = appendF64(b, float64(d.Limit.Algorithm))
	b = appendF64(b, float64(d.Limit.Max))
	return appendF64(b, float64(counter.Micros(d.Limit.Period)))
}

// appendHeader appends an operation header of luaBatch, struct '<BHI4':
// kind, number of debits, and the size of the payload that follows, which
// endOp fills in (h is where the header starts).
func appendHeader(b []byte, kind byte, n int) (_ []byte, h int) {
	h = len(b)
	b = binary.LittleEndian.AppendUint16(append(b, kind), uint16(n))
	return binary.LittleEndian.AppendUint32(b, 0), h
}

// endOp completes the header at h with the size of the payload after it.
func endOp(b []byte, h int) []byte {
	binary.LittleEndian.PutUint32(b[h+3:], uint32(len(b)-h-7))
	return b
}

func appendF64(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

func (s *Store) clock() string {
	if s.clockSpec != nil {
		return s.clockSpec()
	}
	return ""
}

// fallback serves an evaluation while Redis is unavailable: from the local
// store in failure mode open (res.Local set), ErrUnavailable in mode closed.
func (s *Store) fallback(ctx context.Context, op string, debits []counter.Debit, res *counter.Result, cause error) error {
	if s.closed {
		return unavailable(cause)
	}
	s.m.local.WithLabelValues(op).Inc()
	var err error
	if op == opPeek {
		err = s.local.Peek(ctx, debits, res)
	} else {
		err = s.local.Reserve(ctx, debits, res)
		if err == nil && res.Allowed {
			s.journalLocal(debits, res.Ticket.Window, func(i int) int64 { return debits[i].Amount })
		}
	}
	res.Ticket.Origin = OriginLocal
	res.Local = true
	return err
}

// skipping reports whether calls should skip Redis because it failed less
// than probeInterval ago.
func (s *Store) skipping() bool {
	until := s.skipUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

// up records a successful round trip, and starts copying the local
// fallback's charges to Redis if there are any. The recovery is logged at
// most once per logEvery: under an error that only some operations meet
// (OOM and READONLY refuse writes, not reads) the store goes back and forth.
func (s *Store) up() {
	if s.skipUntil.Load() != 0 {
		s.skipUntil.Store(0)
		s.m.fallback.Set(0)
		if s.upLog.allow(logEvery) {
			s.log.Info("redisstore: redis answering again", "suppressed", s.upLog.suppressed.Swap(0))
		}
	}
	s.startCopyBack()
}

func allZero(ds []int64) bool {
	for _, d := range ds {
		if d != 0 {
			return false
		}
	}
	return true
}

func ticketLen(t *counter.Ticket) int {
	if t == nil {
		return -1
	}
	return len(t.Window)
}
