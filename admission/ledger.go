package admission

import (
	"context"
	"time"
)

// CapacityLedger shares targets' capacities among the replicas (gateway
// processes) of one deployment: each replica holds a lease on each target,
// the part of the capacity it may hold in flight, and the ledger keeps the
// sum of the live leases within the target's capacity. The scheduler calls
// it from one renewal goroutine per target, never from Admit: a lease that
// changes never makes a request wait on the ledger.
//
// Implementations must be safe for concurrent use (one goroutine per target).
type CapacityLedger interface {
	// Renew records this replica's use and demand on r.Target and returns
	// its lease, valid for r.TTL from the call. The grant never puts the
	// sum of live leases over r.Capacity; a lease below r.Held is a request
	// to give the difference back as requests end.
	Renew(ctx context.Context, r LeaseRequest) (Lease, error)
	// Release gives this replica's lease on target back at once.
	Release(ctx context.Context, target string) error
}

// Amount is a quantity of capacity: requests and tokens in flight. Unlike
// Capacity, a zero field is zero, not unbounded.
type Amount struct {
	Requests int64
	Tokens   int64
}

// LeaseRequest is what a replica tells the ledger at each renewal.
type LeaseRequest struct {
	Target string
	// Capacity is the whole target's (every replica's together); a zero
	// field is a dimension without bound, which is not leased.
	Capacity Capacity
	// Held is what this replica's admitted requests hold now.
	Held Amount
	// Demand is what this replica would hold if it started everything it
	// has waiting: Held plus the queued requests and their tokens.
	Demand Amount
	// TTL is how long the lease lives without a renewal.
	TTL time.Duration
}

// Lease is the ledger's answer to a renewal.
type Lease struct {
	// Granted is what this replica may hold in flight until the lease
	// expires: at most its Entitlement, and what the other replicas' leases
	// leave free of the capacity.
	Granted Amount
	// Entitlement is this replica's fair share: the capacity water-filled
	// over the live replicas' demands (a replica wanting less than an equal
	// share gets its demand, the rest is divided among the others), and what
	// nobody demands divided equally among all.
	Entitlement Amount
	// Replicas is the number of live replicas holding a lease on the
	// target, this one included.
	Replicas int
}

// Lease timing defaults (LeaseOptions).
const (
	DefaultLeaseTTL         = 3 * time.Second
	DefaultLeaseRenew       = time.Second
	DefaultLeaseQueuedRenew = 100 * time.Millisecond
)

// LeaseOptions configure the scheduler's capacity leases. Zero values take
// the defaults.
type LeaseOptions struct {
	// TTL is the life of a lease without renewal (default 3 s): the
	// capacity of a replica that died comes back to the others within it.
	TTL time.Duration
	// Renew is the renewal period (default 1 s).
	Renew time.Duration
	// QueuedRenew is the renewal period while this replica has requests
	// queued and is granted less than its entitlement, or holds more than
	// its entitlement (default 100 ms): capacity changes hands this fast.
	QueuedRenew time.Duration
	// FailClosed selects what a replica admits once its lease expired
	// without a renewal (the ledger unreachable): false (failure mode
	// open) admits up to the capacity over the number of replicas last
	// seen live; true (closed) admits nothing new.
	FailClosed bool
}

func (o LeaseOptions) withDefaults() LeaseOptions {
	if o.TTL <= 0 {
		o.TTL = DefaultLeaseTTL
	}
	if o.Renew <= 0 {
		o.Renew = DefaultLeaseRenew
	}
	if o.QueuedRenew <= 0 {
		o.QueuedRenew = DefaultLeaseQueuedRenew
	}
	o.Renew = min(o.Renew, o.TTL/2)
	o.QueuedRenew = min(o.QueuedRenew, o.Renew)
	return o
}

// LeaseStats is a leased target's lease, as Snapshot reports it.
type LeaseStats struct {
	// Limit is what the replica admits up to now: the granted lease, or,
	// once it expired without renewal, the failure mode's fallback.
	Limit       Amount
	Granted     Amount
	Entitlement Amount
	Replicas    int
	// Valid is false before the first grant and once the lease expired.
	Valid bool
	// Renewals and RenewErrors count the ledger calls and their failures.
	Renewals, RenewErrors uint64
}
