package dialect_test

import (
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"sluice/dialect"
)

var at = time.Date(2030, time.June, 15, 12, 20, 0, 0, time.UTC)

func TestOfferKeepsTightest(t *testing.T) {
	var l dialect.Limits
	l.Offer(dialect.Tokens, dialect.Counter{Limit: 100, Remaining: 50})
	l.Offer(dialect.Tokens, dialect.Counter{Limit: 200, Remaining: 80})
	l.Offer(dialect.Tokens, dialect.Counter{Limit: 300, Remaining: 50}) // a tie keeps the first
	if c, _ := l.Get(dialect.Tokens); c.Limit != 100 {
		t.Fatalf("kept %+v, want the first of the tightest", c)
	}
	l.Offer(dialect.Tokens, dialect.Counter{Limit: 10, Remaining: -5})
	l.Offer(dialect.Tokens, dialect.Counter{Limit: 20, Remaining: -9}) // both count as 0 left
	if c, _ := l.Get(dialect.Tokens); c.Limit != 10 {
		t.Fatalf("kept %+v, want the first counter in debt", c)
	}
	l.Clear(dialect.Tokens)
	if !l.Empty() {
		t.Fatal("cleared limits are not empty")
	}
}

func TestWriteHeader(t *testing.T) {
	var l dialect.Limits
	l.Set(dialect.Requests, dialect.Counter{Limit: 60, Remaining: 59, Reset: time.Second, At: at})
	l.Set(dialect.Tokens, dialect.Counter{Limit: 10000, Remaining: 9000, Reset: 6 * time.Minute, At: at})
	l.Set(dialect.InputTokens, dialect.Counter{Limit: 5000, Remaining: 4000, Reset: 1500 * time.Millisecond, At: at})
	l.Set(dialect.OutputTokens, dialect.Counter{Limit: 2000, Remaining: -20, Reset: 250 * time.Millisecond, At: at})
	l.Set(dialect.Cost, dialect.Counter{Limit: 500000, Remaining: 499970, Reset: 11*time.Hour + 40*time.Minute, At: at})
	cases := []struct {
		d    dialect.Dialect
		want map[string]string
	}{
		{dialect.OpenAI, map[string]string{
			"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s",
			// the tightest token counter: output, in debt, reported as 0 left
			"x-ratelimit-limit-tokens": "2000", "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "250ms",
			"x-ratelimit-cost-limit-dollars": "0.5", "x-ratelimit-cost-remaining-dollars": "0.49997",
			"anthropic-ratelimit-tokens-limit": "",
		}},
		{dialect.Anthropic, map[string]string{
			"anthropic-ratelimit-requests-limit": "60", "anthropic-ratelimit-requests-remaining": "59",
			"anthropic-ratelimit-requests-reset":      "2030-06-15T12:20:01Z",
			"anthropic-ratelimit-tokens-limit":        "10000",
			"anthropic-ratelimit-tokens-remaining":    "9000",
			"anthropic-ratelimit-tokens-reset":        "2030-06-15T12:26:00Z",
			"anthropic-ratelimit-input-tokens-limit":  "5000",
			"anthropic-ratelimit-input-tokens-reset":  "2030-06-15T12:20:02Z", // 1.5s rounded up
			"anthropic-ratelimit-output-tokens-limit": "2000", "anthropic-ratelimit-output-tokens-remaining": "0",
			"anthropic-ratelimit-output-tokens-reset": "2030-06-15T12:20:01Z",
			"x-ratelimit-cost-limit-dollars":          "0.5", "x-ratelimit-cost-remaining-dollars": "0.49997",
			"x-ratelimit-limit-tokens": "",
		}},
	}
	for _, tc := range cases {
		h := http.Header{}
		l.WriteHeader(h, tc.d)
		for k, v := range tc.want {
			if got := h.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", tc.d, k, got, v)
			}
		}
	}
}

func TestResetString(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", -time.Second: "0s", time.Microsecond: "1ms",
		250 * time.Millisecond: "250ms", 1001 * time.Millisecond: "2s", 6 * time.Minute: "6m0s"} {
		if got := dialect.ResetString(d); got != want {
			t.Errorf("ResetString(%v) = %q, want %q", d, got, want)
		}
	}
}

// ResetString is what time.Duration.String writes for the delay rounded up
// (milliseconds below a second, seconds above), across every range.
func TestResetStringMatchesDurationString(t *testing.T) {
	ref := func(d time.Duration) string {
		if d <= 0 {
			return "0s"
		}
		if d < time.Second {
			return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
		}
		return ((d + time.Second - 1) / time.Second * time.Second).String()
	}
	ds := []time.Duration{1, 999 * time.Microsecond, time.Millisecond, 999*time.Millisecond + 1, time.Second - 1,
		time.Second, time.Second + 1, 59 * time.Second, time.Minute, time.Hour - 1, time.Hour, 25*time.Hour + 7,
		1<<62 + 3, math.MaxInt64, math.MaxInt64 - time.Second, math.MaxInt64 - time.Second + 1, math.MaxInt64 - time.Second + 2}
	for d := time.Duration(1); d < 1<<62; d = d*3 + 7 {
		ds = append(ds, d, d+time.Millisecond/2, d*time.Second/7)
	}
	for _, d := range ds {
		if got, want := dialect.ResetString(d), ref(d); got != want {
			t.Errorf("ResetString(%d) = %q, want %q", d, got, want)
		}
	}
}

// The headers WriteHeader sets have one value each that later edits of one
// header never change in another.
func TestWriteHeaderValuesIndependent(t *testing.T) {
	var l dialect.Limits
	l.Set(dialect.Tokens, dialect.Counter{Limit: 10000, Remaining: 9000, Reset: 6 * time.Minute, At: at})
	l.Set(dialect.Cost, dialect.Counter{Limit: 500000, Remaining: 499970, At: at})
	h := http.Header{}
	l.WriteHeader(h, dialect.OpenAI)
	h.Add("X-Ratelimit-Limit-Tokens", "extra")
	want := map[string][]string{
		"X-Ratelimit-Cost-Limit-Dollars":     {"0.5"},
		"X-Ratelimit-Cost-Remaining-Dollars": {"0.49997"},
		"X-Ratelimit-Limit-Tokens":           {"10000", "extra"},
		"X-Ratelimit-Remaining-Tokens":       {"9000"},
		"X-Ratelimit-Reset-Tokens":           {"6m0s"},
	}
	if len(h) != len(want) {
		t.Fatalf("headers %v, want %v", h, want)
	}
	for k, vs := range want {
		if got := h.Values(k); !slices.Equal(got, vs) {
			t.Errorf("%s = %q, want %q", k, got, vs)
		}
	}
}
