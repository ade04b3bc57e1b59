package meter

import "time"

// fieldFormat encodes one field of a record, key and value, after the
// fields before it (it writes its own separator).
type fieldFormat interface {
	appendString(dst []byte, key, s string) []byte
	appendInt(dst []byte, key string, n int64) []byte
}

// appendFields appends the record's fields in the order of the Record
// struct, each under its JSON name; "id", "resolution" and "status" always,
// every other field only when not empty or zero. ts includes the "ts" field
// (f must then be a JSON format); the access line has the log's own time
// instead. This is the one list of the record's encoded fields.
func appendFields[F fieldFormat](dst []byte, r *Record, f F, ts bool) []byte {
	dst = f.appendString(dst, "id", r.ID)
	dst = optString(dst, f, "client_request_id", r.ClientRequestID)
	if ts {
		dst = append(dst, `,"ts":"`...)
		// RFC 3339 in UTC with a fixed six-digit fraction, so every
		// record's timestamp has the same width and sorts as text.
		dst = appendRFC3339Fixed(dst, r.Time.UTC(), 6)
		dst = append(dst, '"')
	}
	dst = optString(dst, f, "gateway_id", r.GatewayID)
	dst = optString(dst, f, "route", r.Route)
	dst = optString(dst, f, "provider", r.Provider)
	dst = optString(dst, f, "application", r.Application)
	dst = optString(dst, f, "key_id", r.KeyID)
	dst = optString(dst, f, "requested_model", r.RequestedModel)
	dst = optString(dst, f, "served_model", r.ServedModel)
	dst = optInt(dst, f, "prompt_tokens", r.PromptTokens)
	dst = optInt(dst, f, "cached_tokens", r.CachedTokens)
	dst = optInt(dst, f, "cache_write_tokens", r.CacheWriteTokens)
	dst = optInt(dst, f, "completion_tokens", r.CompletionTokens)
	dst = optInt(dst, f, "reasoning_tokens", r.ReasoningTokens)
	if r.UsageSource != UsageNone {
		dst = f.appendString(dst, "usage_source", r.UsageSource.String())
	}
	dst = optInt(dst, f, "cost_micro_usd", r.CostMicroUSD)
	dst = optString(dst, f, "price_version", r.PriceVersion)
	dst = f.appendString(dst, "resolution", r.Resolution.String())
	dst = optString(dst, f, "denied_by", r.DeniedBy)
	dst = optString(dst, f, "error_code", r.ErrorCode)
	dst = f.appendInt(dst, "status", int64(r.Status))
	dst = optInt(dst, f, "latency_us", r.LatencyMicros)
	dst = optInt(dst, f, "ttft_us", r.TTFTMicros)
	return optInt(dst, f, "attempts", int64(r.Attempts))
}

func optString[F fieldFormat](dst []byte, f F, key, s string) []byte {
	if s == "" {
		return dst
	}
	return f.appendString(dst, key, s)
}

func optInt[F fieldFormat](dst []byte, f F, key string, n int64) []byte {
	if n == 0 {
		return dst
	}
	return f.appendInt(dst, key, n)
}

// jsonFields encodes fields as `,"key":value`. slog selects log/slog's
// JSONHandler string escaping (\b and \f as \u0008 and \u000c) instead of
// encoding/json's.
type jsonFields struct{ slog bool }

func (j jsonFields) appendString(dst []byte, key, s string) []byte {
	dst = append(append(append(dst, ',', '"'), key...), '"', ':')
	return appendJSONString(dst, s, j.slog)
}

func (jsonFields) appendInt(dst []byte, key string, n int64) []byte {
	dst = append(append(append(dst, ',', '"'), key...), '"', ':')
	return appendInt(dst, n)
}

// textFields encodes fields as ` key=value`, as log/slog's TextHandler does:
// a string quoted (strconv.Quote) when it is empty or holds a space, '=',
// '"', a control character, invalid UTF-8 or a non-printing rune.
type textFields struct{}

func (textFields) appendString(dst []byte, key, s string) []byte {
	dst = append(append(append(dst, ' '), key...), '=')
	if needsQuoting(s) {
		return appendQuote(dst, s)
	}
	return append(dst, s...)
}

func (textFields) appendInt(dst []byte, key string, n int64) []byte {
	dst = append(append(append(dst, ' '), key...), '=')
	return appendInt(dst, n)
}

// AppendAccessText appends the record's access log line as log/slog's
// TextHandler writes it at info with the message "access" (time to the
// millisecond in t's location), newline included: the record's fields
// (appendFields) without "ts". It allocates nothing beyond growing dst.
func (r *Record) AppendAccessText(dst []byte, t time.Time) []byte {
	dst = append(dst, "time="...)
	dst = appendRFC3339Millis(dst, t)
	dst = append(dst, " level=INFO msg=access"...)
	dst = appendFields(dst, r, textFields{}, false)
	return append(dst, '\n')
}

// AppendAccessJSON appends the record's access log line as log/slog's
// JSONHandler writes it at info with the message "access" (time RFC 3339
// to the nanosecond in t's location), newline included: the record's
// fields (appendFields) without "ts". It allocates nothing beyond growing
// dst.
func (r *Record) AppendAccessJSON(dst []byte, t time.Time) []byte {
	dst = append(dst, `{"time":"`...)
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","level":"INFO","msg":"access"`...)
	dst = appendFields(dst, r, jsonFields{slog: true}, false)
	return append(dst, '}', '\n')
}

// appendRFC3339Millis is log/slog's text time: RFC 3339 with exactly three
// fractional digits, truncated.
func appendRFC3339Millis(b []byte, t time.Time) []byte { return appendRFC3339Fixed(b, t, 3) }
