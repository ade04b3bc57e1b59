package gateway

import (
	"context"
	"sync"
	"sync/atomic"
)

// lifetime is a snapshot's reference count: one reference is the gateway's
// while the snapshot is current, one is taken by each request that runs on
// it (acquire) for as long as any phase of the request may run. When the
// count drops to zero (the snapshot was replaced by Apply, or retired by
// Shutdown, and its last request ended) the policy instances of its chains
// are closed (policies.Closer), exactly once: a snapshot at zero is never
// taken again.
type lifetime struct {
	refs atomic.Int64
	// closed is closed once the instances have been closed.
	closed chan struct{}
}

// tryRef takes a reference unless the count already reached zero.
func (l *lifetime) tryRef() bool {
	for {
		n := l.refs.Load()
		if n <= 0 {
			return false
		}
		if l.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// openSnapshots are the snapshots whose instances are not closed yet: the
// current one and replaced ones whose requests have not all ended.
type openSnapshots struct {
	mu  sync.Mutex
	set map[*snapshot]struct{}
}

// adopt starts s's life with the gateway's reference, before s is stored.
func (g *Gateway) adopt(s *snapshot) {
	s.life.closed = make(chan struct{})
	s.life.refs.Store(1)
	g.open.mu.Lock()
	if g.open.set == nil {
		g.open.set = make(map[*snapshot]struct{})
	}
	g.open.set[s] = struct{}{}
	g.open.mu.Unlock()
}

// acquire returns the current snapshot with a reference taken for a request,
// or nil when there is none (no configuration loaded yet, or the gateway
// shut down). The request releases it once it is over, final phase included.
func (g *Gateway) acquire() *snapshot {
	for {
		s := g.snap.Load()
		if s == nil || s.life.tryRef() {
			return s
		}
		// Apply stores the new snapshot before it drops the old one: a
		// snapshot at zero that is still current was retired by Shutdown.
		if g.snap.Load() == s {
			return nil
		}
	}
}

// release drops a reference to s. The last one closes s's instances: on a
// goroutine of its own when a request drops it (async), so that the close
// does not hold back the end of that request's response.
func (g *Gateway) release(s *snapshot, async bool) {
	if s.life.refs.Add(-1) != 0 {
		return
	}
	if async {
		go g.closeInstances(s)
		return
	}
	g.closeInstances(s)
}

// closeInstances closes the policy instances of s's chains.
func (g *Gateway) closeInstances(s *snapshot) {
	for _, rt := range s.routes {
		if err := rt.chain.Close(); err != nil {
			g.log.Warn("closing policy instances failed", "route", rt.name, "error", err)
		}
	}
	g.open.mu.Lock()
	delete(g.open.set, s)
	g.open.mu.Unlock()
	close(s.life.closed)
}

// waitClosed waits until the instances of every snapshot are closed, or ctx
// is done.
func (g *Gateway) waitClosed(ctx context.Context) error {
	g.open.mu.Lock()
	pending := make([]*snapshot, 0, len(g.open.set))
	for s := range g.open.set {
		pending = append(pending, s)
	}
	g.open.mu.Unlock()
	for _, s := range pending {
		select {
		case <-s.life.closed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
