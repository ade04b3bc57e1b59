// Package meter defines the usage record: the one auditable line the gateway
// writes for every request that reached a route, on every path (settled,
// closed, abandoned, released, denied, auth failure, upstream error), and its
// stable JSON encoding.
//
// A record holds identifiers, token counts, cost, outcome and timings. It never
// holds prompt or completion text, headers or API keys: there is no field that
// could carry them (a test checks the encoding's field set against
// docs/meter.md).
//
// The package is a leaf: it imports only the standard library. The sinks that
// store records are in meter/spool (the gateway's on-disk spool, shipped to
// the platform) and meter/jsonl (a JSON lines file).
package meter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Version is the meter schema version, written in every record as "v".
//
// Compatibility rule: every change of the encoding bumps Version. Fields are
// only ever added; a field is never renamed, re-typed or given another unit or
// meaning under the same name (such a change is a new field). So a reader of
// version N decodes every record of version 1..N, and refuses a record of a
// version above N (ErrNewerVersion) rather than guess: a platform older than
// its gateways rejects their batches, and the gateways keep them spooled until
// the platform is upgraded.
const Version = 1

// Record is the usage record of one request. The zero value of every field
// except ID, Time and Resolution means "none" (no application, no tokens, no
// upstream attempt, ...).
//
// Units: tokens are counts; CostMicroUSD is an integer number of millionths of
// a US dollar; LatencyMicros and TTFTMicros are integer microseconds.
type Record struct {
	// ID is the request id (the X-Request-Id the client got); the platform
	// deduplicates records by it.
	ID string `json:"id"`
	// Time is when the gateway received the request (encoded in UTC, to the
	// microsecond).
	Time time.Time `json:"ts"`
	// GatewayID names the gateway that served the request.
	GatewayID string `json:"gateway_id,omitempty"`
	// Route is the route's name.
	Route string `json:"route,omitempty"`
	// Provider is the route's provider name.
	Provider string `json:"provider,omitempty"`
	// Application is the application id the API key belongs to (empty when
	// the request was not authenticated).
	Application string `json:"application,omitempty"`
	// KeyID identifies the API key (the platform's key id); never the key
	// itself.
	KeyID string `json:"key_id,omitempty"`
	// RequestedModel is the model the client asked for.
	RequestedModel string `json:"requested_model,omitempty"`
	// ServedModel is the model the provider reported serving (empty when no
	// response reported one).
	ServedModel string `json:"served_model,omitempty"`

	// PromptTokens counts every input token, cached and cache-write ones
	// included.
	PromptTokens int64 `json:"prompt_tokens,omitempty"`
	// CachedTokens is the part of PromptTokens read from the provider's
	// prompt cache.
	CachedTokens int64 `json:"cached_tokens,omitempty"`
	// CacheWriteTokens is the part of PromptTokens written to the provider's
	// prompt cache (Anthropic's cache_creation_input_tokens).
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	// CompletionTokens counts every output token, reasoning ones included.
	CompletionTokens int64 `json:"completion_tokens,omitempty"`
	// ReasoningTokens is the part of CompletionTokens the provider reported
	// as reasoning.
	ReasoningTokens int64 `json:"reasoning_tokens,omitempty"`
	// UsageSource says where the token counts come from.
	UsageSource UsageSource `json:"usage_source,omitempty"`

	// CostMicroUSD is the price of the tokens above, in micro-USD, from the
	// price table PriceVersion names.
	CostMicroUSD int64 `json:"cost_micro_usd,omitempty"`
	// PriceVersion identifies the price table the cost was computed with;
	// empty when the request was not priced (no usage, model not in the
	// table).
	PriceVersion string `json:"price_version,omitempty"`

	// Resolution is how the request ended.
	Resolution Resolution `json:"resolution"`
	// DeniedBy is the policy that rejected the request (Resolution Denied or
	// AuthFailed), as in the X-Sluice-Policy header.
	DeniedBy string `json:"denied_by,omitempty"`
	// ErrorCode is the gateway error code the client got (the
	// X-Sluice-Error-Code header: rate_limit_exceeded, invalid_api_key,
	// upstream_timeout, ...), empty on success.
	ErrorCode string `json:"error_code,omitempty"`
	// Status is the HTTP status the client got; 0 when none was sent (the
	// client went away first).
	Status int `json:"status"`
	// LatencyMicros is the time from receiving the request to its end (the
	// last byte forwarded, or the error sent).
	LatencyMicros int64 `json:"latency_us,omitempty"`
	// TTFTMicros is the time from receiving the request to the first byte of
	// the response body forwarded to the client (for a stream, its first
	// event); 0 when nothing was forwarded.
	TTFTMicros int64 `json:"ttft_us,omitempty"`
	// Attempts counts the upstream attempts (retries and failover included);
	// 0 when nothing went upstream.
	Attempts int `json:"attempts,omitempty"`
}

// ErrNewerVersion is returned by Decode for a record written by a newer meter
// version than this binary's.
var ErrNewerVersion = errors.New("meter: record of a newer meter version")

// timeLayout is RFC 3339 in UTC with a fixed six-digit fraction, so every
// record's timestamp has the same width and sorts as text.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// AppendJSON appends the record's JSON encoding to dst and returns the
// extended buffer. It allocates nothing beyond growing dst.
//
// The encoding is one object, fields in the order of the Record struct,
// without spaces; "v", "id", "ts", "resolution" and "status" are always
// present, every other field is omitted when empty or zero. Strings are
// escaped as encoding/json does, except that <, > and & are not HTML-escaped.
func (r *Record) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"v":`...)
	dst = appendInt(dst, Version)
	dst = append(dst, `,"id":`...)
	dst = appendString(dst, r.ID)
	dst = append(dst, `,"ts":"`...)
	dst = r.Time.UTC().AppendFormat(dst, timeLayout)
	dst = append(dst, '"')
	dst = appendStringField(dst, `,"gateway_id":`, r.GatewayID)
	dst = appendStringField(dst, `,"route":`, r.Route)
	dst = appendStringField(dst, `,"provider":`, r.Provider)
	dst = appendStringField(dst, `,"application":`, r.Application)
	dst = appendStringField(dst, `,"key_id":`, r.KeyID)
	dst = appendStringField(dst, `,"requested_model":`, r.RequestedModel)
	dst = appendStringField(dst, `,"served_model":`, r.ServedModel)
	dst = appendIntField(dst, `,"prompt_tokens":`, r.PromptTokens)
	dst = appendIntField(dst, `,"cached_tokens":`, r.CachedTokens)
	dst = appendIntField(dst, `,"cache_write_tokens":`, r.CacheWriteTokens)
	dst = appendIntField(dst, `,"completion_tokens":`, r.CompletionTokens)
	dst = appendIntField(dst, `,"reasoning_tokens":`, r.ReasoningTokens)
	if r.UsageSource != UsageNone {
		dst = append(dst, `,"usage_source":"`...)
		dst = append(dst, r.UsageSource.String()...)
		dst = append(dst, '"')
	}
	dst = appendIntField(dst, `,"cost_micro_usd":`, r.CostMicroUSD)
	dst = appendStringField(dst, `,"price_version":`, r.PriceVersion)
	dst = append(dst, `,"resolution":"`...)
	dst = append(dst, r.Resolution.String()...)
	dst = append(dst, '"')
	dst = appendStringField(dst, `,"denied_by":`, r.DeniedBy)
	dst = appendStringField(dst, `,"error_code":`, r.ErrorCode)
	dst = append(dst, `,"status":`...)
	dst = appendInt(dst, int64(r.Status))
	dst = appendIntField(dst, `,"latency_us":`, r.LatencyMicros)
	dst = appendIntField(dst, `,"ttft_us":`, r.TTFTMicros)
	dst = appendIntField(dst, `,"attempts":`, int64(r.Attempts))
	return append(dst, '}')
}

// MarshalJSON returns AppendJSON's encoding.
func (r *Record) MarshalJSON() ([]byte, error) {
	return r.AppendJSON(make([]byte, 0, 512)), nil
}

// wireRecord is Record with the version field, for decoding. Its fields
// reuse Record's tags, so there is one list of names.
type wireRecord struct {
	V int `json:"v"`
	plainRecord
}

// plainRecord is Record without its methods: decoding into it uses the
// struct tags.
type plainRecord Record

// Decode parses one record's JSON encoding. It accepts records of meter
// versions 1..Version (ErrNewerVersion above), refuses unknown fields and
// unknown resolution or usage source values, and requires id, ts and
// resolution.
func Decode(data []byte) (Record, error) {
	var w wireRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Record{}, fmt.Errorf("meter: decoding record: %w", err)
	}
	if dec.More() {
		return Record{}, errors.New("meter: decoding record: data after the object")
	}
	switch {
	case w.V > Version:
		return Record{}, fmt.Errorf("%w: v %d, this binary reads up to %d", ErrNewerVersion, w.V, Version)
	case w.V < 1:
		return Record{}, fmt.Errorf("meter: decoding record: v %d, want 1..%d", w.V, Version)
	case w.ID == "":
		return Record{}, errors.New("meter: decoding record: id is empty")
	case w.Time.IsZero():
		return Record{}, fmt.Errorf("meter: decoding record %q: ts is missing", w.ID)
	case w.Resolution == ResolutionUnset:
		return Record{}, fmt.Errorf("meter: decoding record %q: resolution is missing", w.ID)
	}
	return Record(w.plainRecord), nil
}

func appendStringField(dst []byte, name, s string) []byte {
	if s == "" {
		return dst
	}
	return appendString(append(dst, name...), s)
}

func appendIntField(dst []byte, name string, n int64) []byte {
	if n == 0 {
		return dst
	}
	return appendInt(append(dst, name...), n)
}
