package counterconfig

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRedisClientLoggerRateLimits(t *testing.T) {
	var buf bytes.Buffer
	l := &RedisClientLogger{Logger: slog.New(slog.NewTextHandler(&buf, nil)), Interval: time.Hour}
	for i := 0; i < 50; i++ {
		l.Printf(context.Background(), "failed to dial %d", i)
	}
	if n := strings.Count(buf.String(), "redis client"); n != 1 {
		t.Fatalf("got %d lines within one interval, want 1:\n%s", n, buf.String())
	}
	l.mu.Lock()
	l.last = time.Now().Add(-2 * time.Hour)
	l.mu.Unlock()
	l.Printf(context.Background(), "again")
	if !strings.Contains(buf.String(), "suppressed=49") {
		t.Fatalf("second line should report 49 suppressed lines:\n%s", buf.String())
	}
}
