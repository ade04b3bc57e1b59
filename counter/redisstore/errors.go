package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/counter"
)

// Every error of a call to Redis follows the failure mode, whatever its
// kind: users are served (open) or told the store is unavailable (closed),
// never answered 500. The kinds only decide how the error is counted and
// logged, and whether copyBack keeps a charge that failed to copy.

// Error kinds, the `kind` label of sluice_redis_store_errors_total.
const (
	// Redis cannot be reached, or refuses service until an operator or the
	// server itself acts: outages, logged at warn level.
	kindConnection = "connection" // refused, reset, EOF: down or restarting
	kindTimeout    = "timeout"    // no answer within the command timeout
	kindPool       = "pool"       // every pooled connection busy for the pool timeout
	kindServer     = "server"     // LOADING, READONLY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, BUSY, MISCONF, max clients...
	kindAuth       = "auth"       // NOAUTH, WRONGPASS, NOPERM: credentials or ACL changed
	kindOOM        = "oom"        // OOM: maxmemory reached with a noeviction policy
	kindClosed     = "closed"     // the client was closed (a call after Close)
	// Bugs of this store (the same call fails again), logged at error
	// level.
	kindScript    = "script"    // a Lua runtime error, or a command the script sent with bad arguments
	kindCrossSlot = "crossslot" // CROSSSLOT: keys of one script in several cluster slots
	kindReply     = "reply"     // a reply the store cannot read
	// Anything else, logged at error level.
	kindOther = "other"
	// The caller's context ended: returned as is, not a store failure.
	kindCanceled = "canceled"
)

// errMalformedReply is wrapped by the errors about script replies the store
// cannot read.
var errMalformedReply = errors.New("malformed script reply")

// classify names the kind of an error of a call to Redis. A script error
// (scriptError) carries the message of the command that failed inside the
// script, so an OOM or READONLY met by the script's SET is classified as
// that, not as a script bug.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, errMalformedReply):
		return kindReply
	case errors.Is(err, redis.ErrClosed):
		return kindClosed
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return kindPool
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return kindTimeout
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return kindConnection
	}
	msg := err.Error()
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "MISCONF", "NOREPLICAS", "MOVED", "ASK":
		return kindServer
	case "NOAUTH", "WRONGPASS", "NOPERM":
		return kindAuth
	case "OOM":
		return kindOOM
	case "CROSSSLOT":
		return kindCrossSlot
	case "NOSCRIPT":
		return kindScript
	}
	if strings.HasPrefix(msg, "ERR max number of clients reached") {
		return kindServer
	}
	var se scriptError
	if errors.As(err, &se) || strings.Contains(msg, "user_script") || strings.Contains(msg, "Error running script") ||
		strings.Contains(msg, "Error compiling script") {
		return kindScript
	}
	return kindOther
}

// isBug reports whether errors of kind are bugs of this store: the same
// call would fail again however long one waits.
func isBug(kind string) bool {
	return kind == kindScript || kind == kindCrossSlot || kind == kindReply
}

// isOutage reports whether errors of kind mean Redis is unreachable or
// refuses service (as opposed to a bug or an unknown error).
func isOutage(kind string) bool {
	switch kind {
	case kindConnection, kindTimeout, kindPool, kindServer, kindAuth, kindOOM, kindClosed:
		return true
	}
	return false
}

// failed handles an error of a call to Redis of op. The caller's own
// context being done is returned as is (its request is gone). Any other
// error arms the back-off, is counted by kind and logged (see logFailure),
// and onFail runs: the failure mode's answer (the local fallback in mode
// open, ErrUnavailable in mode closed).
func (s *Store) failed(ctx context.Context, op string, err error, onFail func() error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		s.m.error(op, kindCanceled)
		return fmt.Errorf("redisstore: %s: %w", op, ctxErr)
	}
	kind := classify(err)
	s.m.error(op, kind)
	s.skipUntil.Store(time.Now().Add(probeInterval).UnixNano())
	s.m.fallback.Set(1)
	s.logFailure(op, kind, err)
	return onFail()
}

// logFailure logs a failed call: an outage at warn level, a bug or an
// unknown error at error level (on their own limiter, so that a bug is not
// hidden among outage reports), each at most once per logEvery. Each line
// carries the number of reports suppressed since the last one; the metric
// counts every one.
func (s *Store) logFailure(op, kind string, err error) {
	mode := "serving from the local fallback (failureMode open)"
	if s.closed {
		mode = "failing calls with ErrUnavailable (failureMode closed)"
	}
	if isOutage(kind) {
		if s.outageLog.allow(logEvery) {
			s.log.Warn("redisstore: redis unavailable; "+mode, "op", op, "kind", kind, "err", err,
				"suppressed", s.outageLog.suppressed.Swap(0))
		}
		return
	}
	if s.bugLog.allow(logEvery) {
		what := "redisstore: redis call failed with an error that is not an outage (a bug in the store: please report it); "
		if kind == kindOther {
			what = "redisstore: redis call failed with an unexpected error; "
		}
		s.log.Error(what+mode, "op", op, "kind", kind, "err", err, "suppressed", s.bugLog.suppressed.Swap(0))
	}
}

// logLimiter lets one log line through per interval and counts the others.
type logLimiter struct {
	last       atomic.Int64 // UnixNano of the last line let through
	suppressed atomic.Int64
}

// allow reports whether a line may be logged now, at most one per every.
func (l *logLimiter) allow(every time.Duration) bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if last != 0 && now-last < int64(every) || !l.last.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return false
	}
	return true
}

func unavailable(cause error) error {
	if cause == nil {
		return fmt.Errorf("redisstore: %w (redis unavailable, retrying shortly)", counter.ErrUnavailable)
	}
	return fmt.Errorf("redisstore: %w: %w", counter.ErrUnavailable, cause)
}
