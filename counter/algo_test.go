package counter

import (
	"errors"
	"testing"
	"time"
)

func utc(y int, m time.Month, d, h, min, s int) time.Time {
	return time.Date(y, m, d, h, min, s, 0, time.UTC)
}

func TestWindowStart(t *testing.T) {
	tests := []struct {
		name       string
		alg        Algorithm
		period     time.Duration
		now        time.Time
		start, end time.Time
	}{
		{"minute", FixedWindow, time.Minute, utc(2025, 3, 14, 12, 30, 30).Add(500 * time.Millisecond), utc(2025, 3, 14, 12, 30, 0), utc(2025, 3, 14, 12, 31, 0)},
		{"minute at start", FixedWindow, time.Minute, utc(2025, 3, 14, 12, 31, 0), utc(2025, 3, 14, 12, 31, 0), utc(2025, 3, 14, 12, 32, 0)},
		{"minute 1µs before end", FixedWindow, time.Minute, utc(2025, 3, 14, 12, 31, 0).Add(-time.Microsecond), utc(2025, 3, 14, 12, 30, 0), utc(2025, 3, 14, 12, 31, 0)},
		{"day is UTC midnight", FixedWindow, 24 * time.Hour, utc(2025, 3, 14, 23, 59, 59), utc(2025, 3, 14, 0, 0, 0), utc(2025, 3, 15, 0, 0, 0)},
		{"7s epoch aligned", FixedWindow, 7 * time.Second, time.Unix(100, 0), time.Unix(98, 0), time.Unix(105, 0)},
		// 2025-03-14 is a Friday; its ISO week runs from Monday 10 to Monday 17.
		{"week is the UTC ISO week", FixedWindow, 7 * 24 * time.Hour, utc(2025, 3, 14, 12, 0, 0), utc(2025, 3, 10, 0, 0, 0), utc(2025, 3, 17, 0, 0, 0)},
		{"week starts Monday 00:00", FixedWindow, 7 * 24 * time.Hour, utc(2025, 3, 17, 0, 0, 0), utc(2025, 3, 17, 0, 0, 0), utc(2025, 3, 24, 0, 0, 0)},
		{"week ends Sunday 23:59:59", FixedWindow, 7 * 24 * time.Hour, utc(2025, 3, 16, 23, 59, 59), utc(2025, 3, 10, 0, 0, 0), utc(2025, 3, 17, 0, 0, 0)},
		{"two weeks start on a Monday", FixedWindow, 14 * 24 * time.Hour, utc(2025, 3, 14, 12, 0, 0), utc(2025, 3, 3, 0, 0, 0), utc(2025, 3, 17, 0, 0, 0)},
		{"week before the first Monday", FixedWindow, 7 * 24 * time.Hour, time.Unix(0, 0), utc(1969, 12, 29, 0, 0, 0), utc(1970, 1, 5, 0, 0, 0)},
		{"month mid", CalendarMonth, 0, utc(2025, 3, 14, 12, 0, 0), utc(2025, 3, 1, 0, 0, 0), utc(2025, 4, 1, 0, 0, 0)},
		{"Jan 31 last second", CalendarMonth, 0, utc(2025, 1, 31, 23, 59, 59), utc(2025, 1, 1, 0, 0, 0), utc(2025, 2, 1, 0, 0, 0)},
		{"Feb 1", CalendarMonth, 0, utc(2025, 2, 1, 0, 0, 0), utc(2025, 2, 1, 0, 0, 0), utc(2025, 3, 1, 0, 0, 0)},
		{"leap Feb", CalendarMonth, 0, utc(2024, 2, 29, 12, 0, 0), utc(2024, 2, 1, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0)},
		{"Dec to Jan", CalendarMonth, 0, utc(2024, 12, 31, 23, 0, 0), utc(2024, 12, 1, 0, 0, 0), utc(2025, 1, 1, 0, 0, 0)},
		{"month ignores local zone", CalendarMonth, 0, time.Date(2025, 3, 1, 0, 30, 0, 0, time.FixedZone("CET", 3600)), utc(2025, 2, 1, 0, 0, 0), utc(2025, 3, 1, 0, 0, 0)},
		{"bucket has none", TokenBucket, time.Minute, utc(2025, 3, 14, 12, 0, 0), time.Time{}, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, e := WindowStart(tt.alg, tt.period, tt.now)
			if !s.Equal(tt.start) || !e.Equal(tt.end) {
				t.Errorf("WindowStart = %v..%v, want %v..%v", s, e, tt.start, tt.end)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		l  Limit
		ok bool
	}{
		{Limit{TokenBucket, 10, time.Minute}, true},
		{Limit{TokenBucket, 10, time.Microsecond}, true},
		{Limit{TokenBucket, 10, 0}, false},
		{Limit{TokenBucket, 0, time.Minute}, false},
		{Limit{TokenBucket, -1, time.Minute}, false},
		{Limit{FixedWindow, 10, time.Second}, true},
		{Limit{FixedWindow, 10, 1500 * time.Millisecond}, false},
		{Limit{FixedWindow, 10, 0}, false},
		{Limit{CalendarMonth, 10, 0}, true},
		{Limit{0, 10, time.Minute}, false},
		{Limit{9, 10, time.Minute}, false},
	}
	for _, tt := range tests {
		err := tt.l.Validate()
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidLimit)) {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tt.l, err, tt.ok)
		}
	}
	if err := ValidateDebit(&Debit{Key: "k", Limit: Limit{FixedWindow, 1, time.Second}, Amount: -1}); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("negative amount: %v", err)
	}
}

func TestBucketArithmetic(t *testing.T) {
	l := Limit{TokenBucket, 10, 10 * time.Second} // 1 unit per 1e6 µs
	const t0 = int64(1_000_000_000)
	tests := []struct {
		name       string
		st         State
		now        int64
		consumed   float64
		stamp      int64
		amount     int64
		affords    bool
		retry      time.Duration
		never      bool
		remaining  int64
		resetAfter time.Duration
		expires    int64
	}{
		{"absent is full", Absent(l, t0), t0, 0, t0, 10, true, 0, false, 10, 0, t0},
		{"empty refills 2.5", State{10, t0, 0}, t0 + 2_500_000, 7.5, t0 + 2_500_000, 3, false, 500 * time.Millisecond, false, 2, 7500 * time.Millisecond, t0 + 10_000_000},
		{"refill stops at full", State{1, t0, 0}, t0 + 5_000_000, 0, t0 + 5_000_000, 1, true, 0, false, 10, 0, t0 + 5_000_000},
		{"debt", State{14, t0, 0}, t0, 14, t0, 1, false, 5 * time.Second, false, -4, 14 * time.Second, t0 + 14_000_000},
		{"debt floor", State{14.5, t0, 0}, t0, 14.5, t0, 0, false, 4500 * time.Millisecond, false, -5, 14500 * time.Millisecond, t0 + 14_500_000},
		{"never", State{0, t0, 0}, t0, 0, t0, 11, false, 0, true, 10, 0, t0},
		{"clock backwards keeps stamp", State{7, t0, 0}, t0 - 5_000_000, 7, t0, 3, true, 0, false, 3, 7 * time.Second, t0 + 7_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.st.Advance(l, tt.now)
			if st.Consumed != tt.consumed || st.Stamp != tt.stamp {
				t.Fatalf("Advance = %+v, want consumed %v stamp %d", st, tt.consumed, tt.stamp)
			}
			if got := st.Affords(l, tt.amount); got != tt.affords {
				t.Errorf("Affords(%d) = %v", tt.amount, got)
			}
			if !tt.affords {
				r, n := st.Denial(l, tt.amount, tt.now)
				if r != tt.retry || n != tt.never {
					t.Errorf("Denial = %v,%v want %v,%v", r, n, tt.retry, tt.never)
				}
			}
			if got := st.Remaining(l); got != tt.remaining {
				t.Errorf("Remaining = %d, want %d", got, tt.remaining)
			}
			if got := st.ResetAfter(l, tt.now); got != tt.resetAfter {
				t.Errorf("ResetAfter = %v, want %v", got, tt.resetAfter)
			}
			if got := st.ExpiresAt(l); got != tt.expires {
				t.Errorf("ExpiresAt = %d, want %d", got, tt.expires)
			}
			if got := st.IsAbsent(l); got != (tt.consumed == 0) {
				t.Errorf("IsAbsent = %v", got)
			}
		})
	}
}

// A bucket's stored state is the amount consumed, so the same state read
// under another Max keeps its usage: raising the capacity adds room (a
// bucket in debt is no longer blocked), lowering it leaves what was not
// consumed, and the refill runs at the new Max per period.
func TestBucketCapacityChange(t *testing.T) {
	const t0 = int64(1_000_000_000)
	hour := time.Hour
	tests := []struct {
		name      string
		st        State
		from, to  int64 // Max the state was written with, Max it is read with
		elapsed   time.Duration
		remaining int64
		affords   int64 // the largest amount the advanced state affords (< 0: none)
		reset     time.Duration
	}{
		{"raise out of debt", State{3105, t0, 0}, 3000, 10000, 0, 6895, 6895, 3105 * hour / 10000},
		{"lower with nothing consumed", State{0, t0, 0}, 2000, 500, 0, 500, 500, 0},
		{"lower keeps usage", State{400, t0, 0}, 2000, 500, 0, 100, 100, 400 * hour / 500},
		{"lower into debt", State{1900, t0, 0}, 2000, 500, 0, -1400, -1, 1900 * hour / 500},
		{"refill at the new rate", State{400, t0, 0}, 2000, 500, 12 * time.Minute, 200, 200, 300 * hour / 500},
		{"drained under the new rate", State{400, t0, 0}, 2000, 500, 48 * time.Minute, 500, 500, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Limit{TokenBucket, tt.to, hour}
			now := t0 + Micros(tt.elapsed)
			st := tt.st.Advance(l, now)
			if got := st.Remaining(l); got != tt.remaining {
				t.Errorf("Remaining = %d, want %d", got, tt.remaining)
			}
			if got := st.ResetAfter(l, now); got != tt.reset {
				t.Errorf("ResetAfter = %v, want %v", got, tt.reset)
			}
			if tt.affords >= 0 && (!st.Affords(l, tt.affords) || st.Affords(l, tt.affords+1)) {
				t.Errorf("Affords: want %d and not %d", tt.affords, tt.affords+1)
			}
			if tt.affords < 0 && st.Affords(l, 0) {
				t.Errorf("a bucket in debt affords 0")
			}
		})
	}
}

func TestBucketAdjust(t *testing.T) {
	tests := []struct {
		consumed float64
		delta    int64
		want     float64
	}{
		{5, 3, 8},
		{5, 10, 15},
		{5, -3, 2},
		{5, -30, 0},
		{15, -3, 12},
		{0, 0, 0},
	}
	for _, tt := range tests {
		if got := (State{Consumed: tt.consumed}).AdjustBucket(tt.delta).Consumed; got != tt.want {
			t.Errorf("AdjustBucket(%v, %d) = %v, want %v", tt.consumed, tt.delta, got, tt.want)
		}
	}
}

func TestWindowArithmetic(t *testing.T) {
	l := Limit{FixedWindow, 10, time.Minute}
	now := utc(2025, 3, 14, 12, 30, 15).UnixMicro()
	ws := utc(2025, 3, 14, 12, 30, 0).Unix()

	if got := Absent(l, now); got != (State{Stamp: ws}) {
		t.Fatalf("Absent = %+v", got)
	}
	stale := State{Stamp: ws - 60, Used: 9}
	if got := stale.Advance(l, now); got != (State{Stamp: ws}) {
		t.Errorf("stale Advance = %+v, want empty current window", got)
	}
	cur := State{Stamp: ws, Used: 7}
	if got := cur.Advance(l, now); got != cur {
		t.Errorf("current Advance = %+v", got)
	}
	if !cur.Affords(l, 3) || cur.Affords(l, 4) {
		t.Errorf("Affords boundary wrong at used 7 of 10")
	}
	if r, n := cur.Denial(l, 4, now); r != 45*time.Second || n {
		t.Errorf("Denial = %v,%v", r, n)
	}
	if r, n := cur.Denial(l, 11, now); r != 0 || !n {
		t.Errorf("Denial(11) = %v,%v want never", r, n)
	}
	if cur.Remaining(l) != 3 || cur.ResetAfter(l, now) != 45*time.Second {
		t.Errorf("Remaining/ResetAfter = %d/%v", cur.Remaining(l), cur.ResetAfter(l, now))
	}
	if got := cur.ExpiresAt(l); got != (ws+60)*1_000_000 {
		t.Errorf("ExpiresAt = %d", got)
	}
	if cur.IsAbsent(l) || (State{Stamp: ws}).IsAbsent(l) {
		t.Errorf("a window state is never absent before its end")
	}
	for _, tt := range []struct {
		window, delta, want int64
		applied             bool
	}{
		{ws, 5, 12, true},
		{ws, -3, 4, true},
		{ws, -30, 0, true},
		{ws - 60, 5, 7, false},
	} {
		got, ok := cur.AdjustWindow(tt.window, tt.delta)
		if got.Used != tt.want || ok != tt.applied {
			t.Errorf("AdjustWindow(%d, %d) = %d,%v want %d,%v", tt.window, tt.delta, got.Used, ok, tt.want, tt.applied)
		}
	}
	m := Limit{CalendarMonth, 10, 0}
	feb := State{Stamp: utc(2025, 2, 1, 0, 0, 0).Unix()}
	if got := feb.ExpiresAt(m); got != utc(2025, 3, 1, 0, 0, 0).UnixMicro() {
		t.Errorf("month ExpiresAt = %v", time.UnixMicro(got).UTC())
	}
}

func TestSplitGroup(t *testing.T) {
	for _, c := range []struct {
		group, route, scope, policy string
		ok                          bool
	}{
		{Group("openai", "token-based-ratelimit"), "openai", "openai", "token-based-ratelimit", true},
		{Group("openai:app-1", "llm-cost-based-ratelimit"), "openai", "openai:app-1", "llm-cost-based-ratelimit", true},
		{Group("openai/chat/completions:app-1", "p"), "openai", "openai/chat/completions:app-1", "p", true},
		{"{openai}:", "", "", "", false},
		{"openai:p", "", "", "", false},
		{"{}:p", "", "", "", false},
		{"", "", "", "", false},
	} {
		route, scope, policy, ok := SplitGroup(c.group)
		if route != c.route || scope != c.scope || policy != c.policy || ok != c.ok {
			t.Errorf("SplitGroup(%q) = %q, %q, %q, %v; want %q, %q, %q, %v", c.group, route, scope, policy, ok, c.route, c.scope, c.policy, c.ok)
		}
	}
}
