package budgets

import (
	"testing"
	"time"

	"sluice/platform/generate"
)

func TestWindowEnd(t *testing.T) {
	at := time.Date(2026, 12, 2, 15, 42, 7, 0, time.UTC) // a Wednesday
	for _, tc := range []struct {
		name string
		l    Line
		want time.Time
	}{
		{"hour bucket: the clock hour", Line{Reset: generate.Reset{Duration: 1, Unit: generate.Hour}}, time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)},
		{"15-minute bucket", Line{Reset: generate.Reset{Duration: 15, Unit: generate.Minute}}, time.Date(2026, 12, 2, 15, 45, 0, 0, time.UTC)},
		{"UTC day", Line{Reset: generate.Reset{Duration: 1, Unit: generate.Day}}, time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)},
		{"ISO week", Line{Reset: generate.Reset{Duration: 1, Unit: generate.Week}}, time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)},
		{"month", Line{Reset: generate.Reset{Duration: 1, Unit: generate.Month}}, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"no row, window label: the counter's reset, to the minute", Line{Label: "window-1d", ResetAfter: 8*time.Hour + 17*time.Minute + 53*time.Second + 40*time.Millisecond},
			time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)},
		{"no row, bucket label", Line{Label: "bucket-30m"}, time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.l.At = at
			if got := tc.l.WindowEnd(); !got.Equal(tc.want) {
				t.Fatalf("WindowEnd %v, want %v", got, tc.want)
			}
			// Later in the same window: the same end.
			tc.l.At = at.Add(time.Minute)
			if tc.l.ResetAfter > 0 {
				tc.l.ResetAfter -= time.Minute
			}
			if got := tc.l.WindowEnd(); !got.Equal(tc.want) {
				t.Fatalf("a minute later: %v, want %v", got, tc.want)
			}
		})
	}
}

func TestUsedPercentAndAmount(t *testing.T) {
	l := Line{Limit: 1000, Remaining: -8}
	if l.Used() != 1008 || l.UsedPercent() != 100.8 {
		t.Fatalf("used %d (%v %%)", l.Used(), l.UsedPercent())
	}
	if got := Amount("usd", 2_499_994); got != "2.499994" {
		t.Fatalf("usd amount %q", got)
	}
	if got := Amount("tokens", -8); got != "-8" {
		t.Fatalf("tokens amount %q", got)
	}
}
