package counterconfig

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// RedisClientLogger adapts go-redis's internal logging (one line per failed
// dial, which during an outage means one per request) to slog, at most one
// line per interval; the rest are counted and reported with the next line.
// Install it once per process with redis.SetLogger: go-redis keeps its logger
// in a package variable, so the command, not the store, owns that choice.
type RedisClientLogger struct {
	Logger   *slog.Logger
	Interval time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Printf implements go-redis's internal.Logging.
func (l *RedisClientLogger) Printf(ctx context.Context, format string, v ...any) {
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.Interval {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	l.Logger.Warn("redis client", "msg", fmt.Sprintf(format, v...), "suppressed", suppressed)
}
