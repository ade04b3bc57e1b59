package ratelimit_test

import (
	"testing"
	"time"

	"sluice/policies/ratelimit"
)

// route is the route of the tests' chains and engines.
const route = "r"

func TestResetString(t *testing.T) {
	cases := map[time.Duration]string{
		0:                       "0s",
		17 * time.Millisecond:   "17ms",
		1500 * time.Microsecond: "2ms",
		time.Second:             "1s",
		1001 * time.Millisecond: "2s",
		6 * time.Minute:         "6m0s",
		time.Hour + time.Second: "1h0m1s",
	}
	for d, want := range cases {
		if got := ratelimit.ResetString(d); got != want {
			t.Errorf("ResetString(%v) = %q, want %q", d, got, want)
		}
	}
}
