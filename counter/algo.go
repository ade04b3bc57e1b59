package counter

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// This file is the counter arithmetic of the three algorithms, on plain
// values. The memory store calls it; redisstore's Lua scripts mirror it operation for
// operation (all levels are float64, as Lua numbers are doubles, so that both
// round identically). Times are Unix microseconds unless a name says otherwise;
// window starts are Unix seconds.

// ErrInvalidLimit is wrapped by errors about malformed debits (a wiring bug,
// not a store failure: it is never ErrUnavailable).
var ErrInvalidLimit = errors.New("invalid counter limit")

// Validate reports whether l can be evaluated: Max > 0; a bucket's Period is
// at least 1µs; a fixed window's Period is a whole number of seconds >= 1s.
func (l Limit) Validate() error {
	if l.Max <= 0 {
		return fmt.Errorf("%w: max %d must be > 0", ErrInvalidLimit, l.Max)
	}
	switch l.Algorithm {
	case TokenBucket:
		if l.Period < time.Microsecond {
			return fmt.Errorf("%w: token bucket period %v must be >= 1µs", ErrInvalidLimit, l.Period)
		}
	case FixedWindow:
		if l.Period < time.Second || l.Period%time.Second != 0 {
			return fmt.Errorf("%w: fixed window period %v must be whole seconds >= 1s", ErrInvalidLimit, l.Period)
		}
	case CalendarMonth:
	default:
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidLimit, l.Algorithm)
	}
	return nil
}

// ValidateDebit checks d's limit and that its Amount is not negative.
func ValidateDebit(d *Debit) error {
	if d.Amount < 0 {
		return fmt.Errorf("%w: key %q: negative amount %d", ErrInvalidLimit, d.Key, d.Amount)
	}
	if err := d.Limit.Validate(); err != nil {
		return fmt.Errorf("key %q: %w", d.Key, err)
	}
	return nil
}

// Micros converts a Duration to whole microseconds (truncating).
func Micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// FromMicros converts microseconds to a Duration.
func FromMicros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// WindowStart returns the window containing now for a windowed algorithm:
// FixedWindow windows of length period aligned to the Unix epoch (so whole
// days start at 00:00 UTC), except that whole weeks start on Monday 00:00
// UTC (a 7-day window is the UTC ISO week); CalendarMonth from 00:00 UTC on the 1st to the
// 1st of the next month. Both are in UTC. TokenBucket has no window: zero
// times. Start is truncated to whole seconds, as in Ticket.Window.
func WindowStart(alg Algorithm, period time.Duration, now time.Time) (start, end time.Time) {
	switch alg {
	case FixedWindow, CalendarMonth:
		s, e := WindowBounds(alg, period, now.UnixMicro())
		return time.Unix(s, 0).UTC(), time.UnixMicro(e).UTC()
	}
	return time.Time{}, time.Time{}
}

// WindowBounds returns the start (Unix seconds) and end (Unix µs) of the
// window containing nowUS. period must satisfy Limit.Validate.
func WindowBounds(alg Algorithm, period time.Duration, nowUS int64) (startS, endUS int64) {
	nowS := floorDiv(nowUS, 1_000_000)
	if alg == CalendarMonth {
		t := time.Unix(nowS, 0).UTC()
		first := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		next := first.AddDate(0, 1, 0)
		return first.Unix(), next.Unix() * 1_000_000
	}
	periodS := int64(period / time.Second)
	off := windowOffset(periodS)
	startS = floorDiv(nowS-off, periodS)*periodS + off
	return startS, (startS + periodS) * 1_000_000
}

// weekS is one week in seconds; mondayS is 1970-01-05T00:00:00Z, the first
// Monday after the epoch (a Thursday).
const (
	weekS   = 7 * 24 * 3600
	mondayS = 4 * 24 * 3600
)

// windowOffset aligns fixed windows of whole weeks to Monday 00:00 UTC, so
// that a 7-day window is the UTC ISO week; other windows are aligned to the
// epoch (whole days to 00:00 UTC).
func windowOffset(periodS int64) int64 {
	if periodS%weekS == 0 {
		return mondayS
	}
	return 0
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// State is one counter's stored state. For TokenBucket, Consumed is the
// units taken from the bucket and not yet refilled (0 is full; above Max is
// debt) and Stamp the µs of its last update: what is stored does not depend
// on Max, so a limit edited between two operations applies to the usage
// already counted (remaining = Max - consumed under the current Max). For
// windows, Stamp is the window start (Unix seconds) and Used the units
// charged in it.
type State struct {
	Consumed float64
	Stamp    int64
	Used     int64
}

// Absent is the state equivalent to no stored state at nowUS: a full bucket
// (nothing consumed), or an empty current window.
func Absent(l Limit, nowUS int64) State {
	if l.Algorithm == TokenBucket {
		return State{Stamp: nowUS}
	}
	ws, _ := WindowBounds(l.Algorithm, l.Period, nowUS)
	return State{Stamp: ws}
}

// Advance brings a stored state to nowUS. A bucket drains what was consumed
// at Max per period: consumed = max(0, consumed - (now - ts) * Max /
// period_us), ts = now. A clock that went backwards drains nothing and keeps
// the later ts (with a monotonic clock this is exactly the formula above). A
// window whose start is not the current window's counts as an empty current
// window.
func (s State) Advance(l Limit, nowUS int64) State {
	if l.Algorithm == TokenBucket {
		if nowUS <= s.Stamp {
			return State{Consumed: s.Consumed, Stamp: s.Stamp}
		}
		c := s.Consumed - float64(nowUS-s.Stamp)*float64(l.Max)/float64(Micros(l.Period))
		return State{Consumed: math.Max(0, c), Stamp: nowUS}
	}
	ws, _ := WindowBounds(l.Algorithm, l.Period, nowUS)
	if s.Stamp != ws {
		return State{Stamp: ws}
	}
	return s
}

// Affords reports whether an advanced state can be charged amount:
// Max - consumed >= amount (bucket), used + amount <= Max (window).
func (s State) Affords(l Limit, amount int64) bool {
	if l.Algorithm == TokenBucket {
		return float64(l.Max)-s.Consumed >= float64(amount)
	}
	return s.Used+amount <= l.Max
}

// Charge returns the advanced state s charged amount (unconditionally).
func (s State) Charge(l Limit, amount int64) State {
	if l.Algorithm == TokenBucket {
		s.Consumed += float64(amount)
	} else {
		s.Used += amount
	}
	return s
}

// Denial returns, for an advanced state that cannot afford amount, how long
// until it could (bucket: ceil((consumed + amount - Max) * period_us / Max)
// µs; window: until the window ends), or never when amount > Max (retry 0).
func (s State) Denial(l Limit, amount, nowUS int64) (retry time.Duration, never bool) {
	if amount > l.Max {
		return 0, true
	}
	if l.Algorithm == TokenBucket {
		us := math.Ceil((s.Consumed + float64(amount) - float64(l.Max)) * float64(Micros(l.Period)) / float64(l.Max))
		return FromMicros(int64(us)), false
	}
	_, end := WindowBounds(l.Algorithm, l.Period, nowUS)
	return FromMicros(end - nowUS), false
}

// Remaining is floor(Max - consumed) for a bucket, Max - used for a window;
// negative in debt.
func (s State) Remaining(l Limit) int64 {
	if l.Algorithm == TokenBucket {
		return int64(math.Floor(float64(l.Max) - s.Consumed))
	}
	return l.Max - s.Used
}

// ResetAfter is, for an advanced state, the time until a bucket is full:
// consumed * period_us / Max, rounded up to whole µs (0 when full); or until
// the window ends.
func (s State) ResetAfter(l Limit, nowUS int64) time.Duration {
	if l.Algorithm == TokenBucket {
		return FromMicros(s.fullInUS(l))
	}
	_, end := WindowBounds(l.Algorithm, l.Period, nowUS)
	return FromMicros(end - nowUS)
}

func (s State) fullInUS(l Limit) int64 {
	if s.Consumed <= 0 {
		return 0
	}
	return int64(math.Ceil(s.Consumed * float64(Micros(l.Period)) / float64(l.Max)))
}

// AdjustBucket applies a settlement delta to an advanced bucket state:
// consumed = max(0, consumed + delta). Refunds never go past full; debt
// (consumed above Max) is allowed.
func (s State) AdjustBucket(delta int64) State {
	s.Consumed = math.Max(0, s.Consumed+float64(delta))
	return s
}

// AdjustWindow applies a settlement delta to a stored (not advanced) window
// state if it is the window the reservation charged: used = max(0, used +
// delta). applied is false (s unchanged) when stored start != window.
func (s State) AdjustWindow(window, delta int64) (_ State, applied bool) {
	if s.Stamp != window {
		return s, false
	}
	s.Used = max(0, s.Used+delta)
	return s, true
}

// ExpiresAt is the µs from which a stored state is equivalent to absent
// under l: when a bucket has drained under l's Max (Stamp + ceil time to
// full), or when the window ends. Stores may drop the state from then on
// (redisstore adds a 1 s margin to its TTLs). A bucket's drain time depends
// on Max: after a limit is lowered, a state not written since is still
// dropped when it would have drained under the Max it was written with.
func (s State) ExpiresAt(l Limit) int64 {
	if l.Algorithm == TokenBucket {
		return s.Stamp + s.fullInUS(l)
	}
	if l.Algorithm == CalendarMonth {
		_, end := WindowBounds(l.Algorithm, l.Period, s.Stamp*1_000_000)
		return end
	}
	return (s.Stamp + int64(l.Period/time.Second)) * 1_000_000
}

// IsAbsent reports whether an advanced state is equivalent to no state: a
// full bucket, under any Max (a window's state is equivalent to absent only
// once it ends).
func (s State) IsAbsent(l Limit) bool {
	return l.Algorithm == TokenBucket && s.Consumed <= 0
}
