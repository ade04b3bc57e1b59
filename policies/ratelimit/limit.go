package ratelimit

import (
	"fmt"
	"strconv"
	"time"

	"sluice/counter"
	"sluice/policies"
)

// Limit is one configured limit of an engine: a meter, its capacity and
// algorithm, and optionally the model rule it belongs to. It is not a
// counter: under each scope it is kept by one counter of the store.
type Limit struct {
	Meter    int
	Capacity counter.Limit
	// Rule is the model rule's match ("gpt-4*"), "" for the policy's own limits.
	Rule string
}

// Algorithm names accepted by the limit policies' `algorithm` param.
const (
	AlgTokenBucket = "token-bucket"
	AlgFixedWindow = "fixed-window"
	AlgCalendar    = "calendar"
)

// MonthPeriod is the duration that the calendar algorithm reads as "one UTC
// calendar month" (720h, written "30d" or "720h").
const MonthPeriod = 30 * 24 * time.Hour

// LimitFor maps a configured (algorithm, duration, max) to a store limit.
//
//   - "" (the default): token bucket for durations under 1 day, a fixed window
//     aligned to the Unix epoch (hence to 00:00 UTC for whole days) otherwise.
//   - token-bucket: refills continuously at max per duration.
//   - fixed-window: windows of the duration aligned to the Unix epoch;
//     whole weeks start on Monday 00:00 UTC.
//   - calendar: 720h ("30d") is the UTC calendar month; any other duration is
//     a fixed window as above ("1d" is the UTC day, "7d" the UTC ISO week).
func LimitFor(alg string, d time.Duration, max int64) (counter.Limit, error) {
	switch alg {
	case "":
		if d < 24*time.Hour {
			alg = AlgTokenBucket
		} else {
			alg = AlgFixedWindow
		}
	case AlgTokenBucket, AlgFixedWindow, AlgCalendar:
	default:
		return counter.Limit{}, fmt.Errorf("unknown algorithm %q (want %s, %s or %s)", alg, AlgTokenBucket, AlgFixedWindow, AlgCalendar)
	}
	l := counter.Limit{Max: max, Period: d}
	switch alg {
	case AlgTokenBucket:
		l.Algorithm = counter.TokenBucket
	case AlgFixedWindow:
		l.Algorithm = counter.FixedWindow
	case AlgCalendar:
		l.Algorithm = counter.FixedWindow
		if d == MonthPeriod {
			l.Algorithm = counter.CalendarMonth
		}
	}
	if l.Algorithm == counter.FixedWindow && (d < time.Second || d%time.Second != 0) {
		return counter.Limit{}, fmt.Errorf("duration %v: a window must be a whole number of seconds", d)
	}
	if err := l.Validate(); err != nil {
		return counter.Limit{}, err
	}
	return l, nil
}

// IsBudget reports whether a counter is a budget rather than a rate: it counts
// money, or it is a window (fixed or calendar) of one day or longer. Denials
// by a budget carry code budget_exceeded, others rate_limit_exceeded.
func IsBudget(u policies.Unit, l counter.Limit) bool {
	if u == policies.UnitUSDMicros || l.Algorithm == counter.CalendarMonth {
		return true
	}
	return l.Algorithm == counter.FixedWindow && l.Period >= 24*time.Hour
}

// PeriodLabel is the period part of a counter key. It names the algorithm as
// well as the period, because the stored state of a bucket and of a window
// differ: "bucket-1m", "window-1h", "window-1d", "month".
func PeriodLabel(l counter.Limit) string {
	switch l.Algorithm {
	case counter.CalendarMonth:
		return "month"
	case counter.FixedWindow:
		return "window-" + compactDuration(l.Period)
	}
	return "bucket-" + compactDuration(l.Period)
}

// compactDuration writes d in the largest unit that divides it: 1d, 2h, 90m, 15s,
// else Go's syntax.
func compactDuration(d time.Duration) string {
	units := []struct {
		d time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}}
	for _, u := range units {
		if d >= u.d && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.s
		}
	}
	return d.String()
}

// HumanPeriod describes a limit's period for messages: "per 1m", "per UTC month".
func HumanPeriod(l counter.Limit) string {
	if l.Algorithm == counter.CalendarMonth {
		return "per UTC calendar month"
	}
	return "per " + compactDuration(l.Period)
}
