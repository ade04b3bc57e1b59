// Package usagetest makes usage records for the platform's usage tests and
// benchmarks.
package usagetest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"sluice/meter"
	"sluice/meter/metertest"
)

// Record returns metertest's settled record with the given id, time and
// gateway.
func Record(id string, ts time.Time, gw string) meter.Record {
	r := *metertest.Record(id)
	r.Time, r.GatewayID = ts, gw
	return r
}

// Shape is the population Random draws from.
type Shape struct {
	// Applications, each with KeysPerApp keys.
	Applications, KeysPerApp int
	// Providers (each its own route), each with ModelsPerProvider models.
	Providers, ModelsPerProvider int
}

// Small is a small deployment: every dimension has a few values.
func Small() Shape { return Shape{Applications: 4, KeysPerApp: 2, Providers: 2, ModelsPerProvider: 3} }

// Random returns n records of gateway gw with ids prefix-0, prefix-1, ...,
// dated uniformly in [from, from+span), with dimensions drawn from shape and
// an outcome mix of mostly settled requests with some denials, upstream
// errors, abandoned and closed streams.
func Random(rng *rand.Rand, shape Shape, n int, prefix, gw string, from time.Time, span time.Duration) []meter.Record {
	out := make([]meter.Record, n)
	for i := range out {
		app := rng.IntN(shape.Applications)
		prov := rng.IntN(shape.Providers)
		model := fmt.Sprintf("model-%d-%d", prov, rng.IntN(shape.ModelsPerProvider))
		r := meter.Record{
			ID:             fmt.Sprintf("%s-%d", prefix, i),
			Time:           from.Add(time.Duration(rng.Int64N(int64(span))) / time.Microsecond * time.Microsecond),
			GatewayID:      gw,
			Route:          fmt.Sprintf("provider-%d", prov),
			Provider:       fmt.Sprintf("provider-%d", prov),
			Application:    fmt.Sprintf("app-%d", app),
			KeyID:          fmt.Sprintf("key-%d-%d", app, rng.IntN(shape.KeysPerApp)),
			RequestedModel: model,
			LatencyMicros:  rng.Int64N(5_000_000) + 1,
		}
		switch p := rng.IntN(100); {
		case p < 85:
			r.Resolution, r.Status, r.UsageSource = meter.Settled, 200, meter.UsageProvider
		case p < 90:
			r.Resolution, r.Status, r.DeniedBy, r.ErrorCode = meter.Denied, 429, "token-based-ratelimit", "rate_limit_exceeded"
		case p < 94:
			r.Resolution, r.Status, r.ErrorCode, r.Attempts = meter.UpstreamError, 502, "upstream_error", 2
		case p < 97:
			r.Resolution, r.Status, r.UsageSource = meter.Abandoned, 0, meter.UsageCounted
		default:
			r.Resolution, r.Status, r.UsageSource = meter.Closed, 200, meter.UsageCounted
		}
		if r.UsageSource != meter.UsageNone {
			r.ServedModel = model + "-2026"
			r.PromptTokens = rng.Int64N(4000) + 1
			r.CachedTokens = rng.Int64N(r.PromptTokens + 1)
			r.CompletionTokens = rng.Int64N(1000)
			r.ReasoningTokens = rng.Int64N(r.CompletionTokens + 1)
			r.CostMicroUSD = r.PromptTokens*2 + r.CompletionTokens*8
			r.PriceVersion = "2026-11-30"
			r.Attempts = 1
			r.TTFTMicros = rng.Int64N(r.LatencyMicros) + 1
		}
		out[i] = r
	}
	return out
}

// Batch encodes recs as a batch for POST /api/v1/gateway/usage: one
// record per line.
func Batch(recs []meter.Record) []byte {
	var b []byte
	for i := range recs {
		b = recs[i].AppendJSON(b)
		b = append(b, '\n')
	}
	return b
}
