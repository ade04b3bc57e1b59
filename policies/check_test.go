package policies

import (
	"strings"
	"testing"

	"sluice/deployment"
)

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

// TestCheckAdmission: the check reports problems of the fair-admission
// fields at their field, as the gateway's Apply would.
func TestCheckAdmission(t *testing.T) {
	d := &deployment.Deployment{APIVersion: deployment.APIVersion,
		Providers:    []deployment.Provider{{Name: "p", Type: "openai", URL: "http://127.0.0.1:9", Capacity: &deployment.Capacity{}}},
		Applications: []deployment.Application{{ID: "a", Admission: &deployment.ApplicationAdmission{Class: "gold"}}}}
	err := Check(d, NewRegistry())
	for _, want := range []string{"providers[0].capacity: give maxConcurrent", `applications[0].admission.class: class "gold" is not configured`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check = %v; want %q", err, want)
		}
	}
}
