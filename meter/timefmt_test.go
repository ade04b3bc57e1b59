package meter

import (
	"testing"
	"time"
)

func TestAppendRFC3339Fixed(t *testing.T) {
	east := time.FixedZone("east", 5*3600+45*60)
	west := time.FixedZone("west", -(3*3600 + 30*60))
	odd := time.FixedZone("odd", -(59*60 + 59)) // seconds are not written
	for _, tm := range []time.Time{
		time.Date(2026, 12, 2, 1, 2, 3, 4005006, time.UTC),
		time.Date(2026, 1, 9, 23, 59, 59, 999999999, time.UTC),
		time.Date(1999, 12, 31, 0, 0, 0, 0, east),
		time.Date(2000, 2, 29, 12, 30, 0, 1000, west),
		time.Date(2026, 6, 1, 0, 0, 0, 123456789, odd),
		time.Date(7, 3, 4, 5, 6, 7, 8, time.UTC),
		time.Date(12345, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		for _, digits := range []int{1, 3, 6, 9} {
			want := tm.Format("2006-01-02T15:04:05." + "000000000"[:digits] + "Z07:00")
			if got := string(appendRFC3339Fixed([]byte("x"), tm, digits)); got != "x"+want {
				t.Errorf("%v with %d digits: %q, want %q", tm, digits, got, "x"+want)
			}
		}
	}
}
