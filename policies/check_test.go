package policies

import "testing"

func TestParamPathNumericMapKey(t *testing.T) {
	// A numeric mapping key inside params is a key, not a list index.
	params := map[string]any{
		"perApp": map[string]any{"123": []any{"x"}},
		"list":   []any{map[string]any{"x": 1}},
	}
	if got := paramPath("p", params, []string{"perApp", "123"}); got != "p.perApp.123" {
		t.Errorf("got %s", got)
	}
	if got := paramPath("p", params, []string{"list", "0", "x"}); got != "p.list[0].x" {
		t.Errorf("got %s", got)
	}
}
