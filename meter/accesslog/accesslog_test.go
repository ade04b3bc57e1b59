package accesslog

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"sluice/meter"
)

// slogLine is the line log/slog's handler (text or JSON, at info) writes for
// rec with the access log's fields, the reference the Writer must match.
func slogLine(t *testing.T, json bool, rec *meter.Record, at time.Time) string {
	t.Helper()
	var attrs []slog.Attr
	str := func(k, v string) {
		if v != "" {
			attrs = append(attrs, slog.String(k, v))
		}
	}
	num := func(k string, v int64) {
		if v != 0 {
			attrs = append(attrs, slog.Int64(k, v))
		}
	}
	str("id", rec.ID)
	str("client_request_id", rec.ClientRequestID)
	str("gateway_id", rec.GatewayID)
	str("route", rec.Route)
	str("provider", rec.Provider)
	str("application", rec.Application)
	str("key_id", rec.KeyID)
	str("requested_model", rec.RequestedModel)
	str("served_model", rec.ServedModel)
	num("prompt_tokens", rec.PromptTokens)
	num("cached_tokens", rec.CachedTokens)
	num("cache_write_tokens", rec.CacheWriteTokens)
	num("completion_tokens", rec.CompletionTokens)
	num("reasoning_tokens", rec.ReasoningTokens)
	if rec.UsageSource != meter.UsageNone {
		str("usage_source", rec.UsageSource.String())
	}
	num("cost_micro_usd", rec.CostMicroUSD)
	str("price_version", rec.PriceVersion)
	str("resolution", rec.Resolution.String())
	str("denied_by", rec.DeniedBy)
	str("error_code", rec.ErrorCode)
	attrs = append(attrs, slog.Int("status", rec.Status))
	num("latency_us", rec.LatencyMicros)
	num("ttft_us", rec.TTFTMicros)
	num("attempts", int64(rec.Attempts))

	var buf bytes.Buffer
	var h slog.Handler = slog.NewTextHandler(&buf, nil)
	if json {
		h = slog.NewJSONHandler(&buf, nil)
	}
	r := slog.NewRecord(at, slog.LevelInfo, "access", 0)
	r.AddAttrs(attrs...)
	if err := h.Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestWriterMatchesSlog(t *testing.T) {
	full := meter.Record{
		ID: "r1", ClientRequestID: "client-1", GatewayID: "gw-1", Route: "team-a", Provider: "openai",
		Application: "app-1", KeyID: "key-1", RequestedModel: "gpt-4o", ServedModel: "gpt-4o-2024-08-06",
		PromptTokens: 120, CachedTokens: 20, CacheWriteTokens: 10, CompletionTokens: 30, ReasoningTokens: 5,
		UsageSource: meter.UsageProvider, CostMicroUSD: 1234, PriceVersion: "2026-11-01",
		Resolution: meter.Settled, Status: 200, LatencyMicros: 21000, TTFTMicros: 900, Attempts: 2,
	}
	tricky := func(s string) meter.Record {
		return meter.Record{ID: "r2", ClientRequestID: s, Route: s, RequestedModel: s, DeniedBy: "p",
			Resolution: meter.Denied, Status: 429, ErrorCode: "rate_limit_exceeded", LatencyMicros: 3}
	}
	for _, c := range []struct {
		name string
		rec  meter.Record
	}{
		{"every field", full},
		{"empty fields left out", meter.Record{ID: "r3", Resolution: meter.Abandoned}},
		{"negative numbers", meter.Record{ID: "r4", Resolution: meter.Closed, Status: -1, PromptTokens: -5}},
		{"unset usage source and resolution", meter.Record{ID: "r5", CostMicroUSD: 7}},
		{"space", tricky("a b")},
		{"quotes", tricky(`say "hi"`)},
		{"equals", tricky("k=v")},
		{"backslash", tricky(`a\b`)},
		{"unicode", tricky("modèle-日本語")},
		{"unicode space", tricky("a\u00a0b")},
		{"non-printing rune", tricky("a\u200bb")},
		{"line separators", tricky("a\u2028b\u2029c")},
		{"invalid UTF-8", tricky("a\xffb\xc0")},
		{"replacement character", tricky("a\ufffdb")},
		{"control characters", tricky("a\n\r\t\b\f\x00\x1f\x7fb")},
		{"html", tricky("<a href='x'>&amp;</a>")},
		{"json-looking", tricky(`{"id":"x"}`)},
	} {
		for _, format := range []string{"text", "json"} {
			t.Run(c.name+"/"+format, func(t *testing.T) {
				at := time.Date(2026, 12, 1, 19, 4, 5, 123456789, time.FixedZone("", 3600))
				var buf bytes.Buffer
				w, err := New(&buf, format, slog.LevelInfo, func() time.Time { return at })
				if err != nil {
					t.Fatal(err)
				}
				w.Log(&c.rec)
				if want := slogLine(t, format == "json", &c.rec, at); buf.String() != want {
					t.Errorf("line\n got %s\nwant %s", buf.String(), want)
				}
			})
		}
	}
}

func TestAccessLogFollowsLevel(t *testing.T) {
	rec := &meter.Record{ID: "r1", Route: "team-a", Status: 200, PromptTokens: 5, Resolution: meter.Settled}
	for _, c := range []struct {
		level slog.Level
		want  bool
	}{{slog.LevelDebug, true}, {slog.LevelInfo, true}, {slog.LevelWarn, false}, {slog.LevelError, false}} {
		var buf bytes.Buffer
		w, err := New(&buf, "text", c.level, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.Log(rec)
		got := strings.Contains(buf.String(), "msg=access") && strings.Contains(buf.String(), "id=r1")
		if got != c.want || w.Enabled() != c.want {
			t.Errorf("level %v: access line written %v (Enabled %v), want %v (%q)", c.level, got, w.Enabled(), c.want, buf.String())
		}
	}
}

func TestNewRefusesUnknownFormat(t *testing.T) {
	for _, f := range []string{"", "logfmt", "jsonl"} {
		if _, err := New(io.Discard, f, slog.LevelInfo, nil); err == nil || !strings.Contains(err.Error(), "--log-format") {
			t.Errorf("format %q: error %v, want one naming --log-format", f, err)
		}
	}
	for _, f := range []string{"text", "JSON", "Text"} {
		if _, err := New(io.Discard, f, slog.LevelInfo, nil); err != nil {
			t.Errorf("format %q: %v", f, err)
		}
	}
}

func TestLogAllocatesNothing(t *testing.T) {
	rec := &meter.Record{ID: "r1", Route: "team a", RequestedModel: "gpt-4o", Status: 200, PromptTokens: 5,
		Resolution: meter.Settled, LatencyMicros: 12}
	for _, format := range []string{"text", "json"} {
		w, err := New(io.Discard, format, slog.LevelInfo, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.Log(rec) // the pool's first buffer
		if n := testing.AllocsPerRun(100, func() { w.Log(rec) }); n != 0 {
			t.Errorf("%s: %v allocations per line, want 0", format, n)
		}
	}
}

func BenchmarkLog(b *testing.B) {
	rec := &meter.Record{
		ID: "01JE4Q2V3XK9M7N8P0R5S6T7U8", GatewayID: "gw-1", Route: "team-a", Provider: "openai",
		Application: "app-1", KeyID: "key-1", RequestedModel: "gpt-4o", ServedModel: "gpt-4o-2024-08-06",
		PromptTokens: 120, CompletionTokens: 30, UsageSource: meter.UsageProvider, CostMicroUSD: 1234,
		PriceVersion: "2026-11-01", Resolution: meter.Settled, Status: 200, LatencyMicros: 21000, TTFTMicros: 900, Attempts: 1,
	}
	for _, format := range []string{"text", "json"} {
		b.Run(format, func(b *testing.B) {
			w, err := New(io.Discard, format, slog.LevelInfo, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				w.Log(rec)
			}
		})
	}
}

func TestLogConcurrentLinesStayWhole(t *testing.T) {
	var buf bytes.Buffer // not safe for concurrent use: the Writer serializes
	w, err := New(&buf, "text", slog.LevelInfo, nil)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, lines = 4, 200
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			rec := &meter.Record{ID: strings.Repeat(string(rune('a'+g)), 40), Resolution: meter.Settled, Status: 200}
			for range lines {
				w.Log(rec)
			}
		}()
	}
	for range goroutines {
		<-done
	}
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(got) != goroutines*lines {
		t.Fatalf("%d lines, want %d", len(got), goroutines*lines)
	}
	for _, l := range got {
		if !strings.Contains(l, " level=INFO msg=access id=") || !strings.HasSuffix(l, " resolution=settled status=200") {
			t.Fatalf("line not whole: %q", l)
		}
	}
}
