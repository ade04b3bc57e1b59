package meter

import "fmt"

// Resolution is how a request ended, from the record's point of view: one
// value per request, whatever the limit policies did with their reservations.
// Its text form is the record's "resolution" field.
type Resolution uint8

const (
	// ResolutionUnset is the zero value; a record must not be written with
	// it (Decode refuses it).
	ResolutionUnset Resolution = iota
	// Settled: the response was delivered in full (2xx) with the provider's
	// complete usage; the tokens and cost are exact and every reservation was
	// settled with them.
	Settled
	// Closed: the response was delivered (2xx) without complete usage (a
	// stream that ended without its usage report, fewer finished choices than
	// n): the tokens are the partial report or the gateway's count
	// (UsageSource), a lower bound, and the limits kept their estimates.
	Closed
	// Abandoned: the client went away (or the gateway shut down) after the
	// request went upstream; the provider may bill what it generated, the
	// tokens are what the gateway saw, the limits kept their estimates.
	Abandoned
	// Released: the request ended before anything went upstream without a
	// policy denying it (the client went away while the request waited for
	// fair admission); nothing was billed and every reservation was refunded.
	Released
	// Denied: a policy rejected the request (a rate or budget limit, a model
	// or application not allowed); DeniedBy names it, ErrorCode says why.
	// Nothing went upstream.
	Denied
	// AuthFailed: the authentication policy rejected the request (missing or
	// unknown API key, 401); DeniedBy names it. Application and KeyID are
	// empty. Nothing went upstream.
	AuthFailed
	// InvalidRequest: the gateway refused the request before its policies
	// ran (malformed or duplicated-key JSON, body too large, no model).
	InvalidRequest
	// UpstreamError: the provider answered an error (non-2xx after retries),
	// or could not be reached, timed out, or cut the stream.
	UpstreamError
	// InternalError: a gateway failure (a recovered panic) ended the request.
	InternalError
	numResolutions
)

var resolutionNames = [numResolutions]string{
	ResolutionUnset: "unset",
	Settled:         "settled",
	Closed:          "closed",
	Abandoned:       "abandoned",
	Released:        "released",
	Denied:          "denied",
	AuthFailed:      "auth_failed",
	InvalidRequest:  "invalid_request",
	UpstreamError:   "upstream_error",
	InternalError:   "internal_error",
}

// Resolutions lists every valid resolution (ResolutionUnset excluded), in
// declaration order.
func Resolutions() []Resolution {
	out := make([]Resolution, 0, numResolutions-1)
	for r := Settled; r < numResolutions; r++ {
		out = append(out, r)
	}
	return out
}

func (r Resolution) String() string { return name(resolutionNames[:], r) }

// MarshalText returns the resolution's name.
func (r Resolution) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText accepts the name of a valid resolution.
func (r *Resolution) UnmarshalText(b []byte) error {
	return parseName(resolutionNames[:], Settled, b, r, "resolution")
}

// UsageSource says where a record's token counts come from. Its text form is
// the record's "usage_source" field, omitted for UsageNone.
type UsageSource uint8

const (
	// UsageNone: no usage (nothing went upstream, or the provider answered an
	// error without any); the token fields are zero.
	UsageNone UsageSource = iota
	// UsageProvider: the provider's complete report; exact.
	UsageProvider
	// UsagePartial: the provider's report, but fewer choices finished than
	// the request asked for (n>1 streams cut short); a lower bound.
	UsagePartial
	// UsageCounted: the provider reported none (a stream cancelled or cut);
	// the gateway tokenized the output it forwarded, and took the prompt from
	// the provider's partial report or its own estimate; a lower bound of
	// what the provider bills.
	UsageCounted
	numUsageSources
)

var usageSourceNames = [numUsageSources]string{
	UsageNone:     "none",
	UsageProvider: "provider",
	UsagePartial:  "partial",
	UsageCounted:  "counted",
}

func (s UsageSource) String() string { return name(usageSourceNames[:], s) }

// MarshalText returns the source's name.
func (s UsageSource) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText accepts the name of a usage source ("none" included).
func (s *UsageSource) UnmarshalText(b []byte) error {
	return parseName(usageSourceNames[:], UsageNone, b, s, "usage source")
}

// name is v's name in names; a value out of range has the zero value's name.
func name[T ~uint8](names []string, v T) string {
	if int(v) < len(names) {
		return names[v]
	}
	return names[0]
}

// parseName sets *dst to the value named b, among those from first on.
func parseName[T ~uint8](names []string, first T, b []byte, dst *T, kind string) error {
	for v := first; int(v) < len(names); v++ {
		if string(b) == names[v] {
			*dst = v
			return nil
		}
	}
	return fmt.Errorf("unknown %s %q", kind, b)
}
