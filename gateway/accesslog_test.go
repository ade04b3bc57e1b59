package gateway

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"sluice/meter"
)

func TestAccessLogFollowsLevel(t *testing.T) {
	rec := &meter.Record{ID: "r1", Route: "team-a", Status: 200, PromptTokens: 5}
	for _, c := range []struct {
		level slog.Level
		want  bool
	}{{slog.LevelInfo, true}, {slog.LevelWarn, false}} {
		var buf bytes.Buffer
		accessLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level})), rec)
		got := strings.Contains(buf.String(), "msg=access") && strings.Contains(buf.String(), "id=r1")
		if got != c.want {
			t.Errorf("level %v: access line written %v, want %v (%q)", c.level, got, c.want, buf.String())
		}
	}
}
