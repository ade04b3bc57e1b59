package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
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
