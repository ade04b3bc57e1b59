package ratelimit_test

import (
	"testing"

	"sluice/policies/ratelimit"
)

func TestModelMatcher(t *testing.T) {
	m, err := ratelimit.NewModelMatcher([]string{"gpt-4*", "gpt-4o", "gpt-4o*", "*"})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]int{"gpt-4o": 1, "gpt-4o-mini": 2, "gpt-4.1": 0, "claude": 3}
	for model, want := range cases {
		if got := m.Match(model); got != want {
			t.Errorf("Match(%q) = %d, want %d", model, got, want)
		}
	}
	for _, bad := range [][]string{{""}, {"a", "a"}, {"a*b"}} {
		if _, err := ratelimit.NewModelMatcher(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
