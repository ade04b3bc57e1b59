package usage_test

import (
	"reflect"
	"testing"

	"sluice/platform/store"
	"sluice/platform/usage"
)

func TestDecodeReport(t *testing.T) {
	cases := []struct {
		name, body string
		ok         bool
	}{
		{"the mock's format, extra fields ignored", `{"tenants":{"app-a":{"requests":1,"completed":1,"models":{"gpt-4o":{"requests":1,"completed":1,"prompt_tokens":9,"completion_tokens":5}}}},"total":{"requests":1}}`, true},
		{"no tenants yet", `{"tenants":{}}`, true},
		{"not JSON", `<html>`, false},
		{"no tenants object", `{"total":{}}`, false},
		{"tenants not an object", `{"tenants":[]}`, false},
		{"a negative count", `{"tenants":{"a":{"models":{"m":{"requests":-1}}}}}`, false},
		{"a fractional count", `{"tenants":{"a":{"models":{"m":{"requests":1.5}}}}}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := usage.DecodeReport([]byte(tc.body))
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestReconcile(t *testing.T) {
	metered := []store.MeteredUsage{
		{Application: "app-a", Model: "gpt-4o", Requests: 3, PromptTokens: 30, CompletionTokens: 12},
		{Application: "app-a", Model: "gpt-4o-mini", Requests: 1, PromptTokens: 10, CompletionTokens: 4},
		{Application: "app-b", Model: "gpt-4o", Requests: 2, PromptTokens: 20, CompletionTokens: 8},
	}
	report := usage.Report{Tenants: map[string]usage.ReportTenant{
		"app-a": {Models: map[string]usage.Reported{
			"gpt-4o":      {Requests: 3, PromptTokens: 30, CompletionTokens: 12},
			"gpt-4o-mini": {Requests: 1, PromptTokens: 10, CompletionTokens: 6}, // the provider counts 2 more
			"gpt-5":       {},                                                   // nothing: no row
		}},
		// app-b missing from the report; a tenant the meter never saw.
		"key:0123456789ab": {Models: map[string]usage.Reported{"gpt-4o": {Requests: 1, PromptTokens: 5, CompletionTokens: 1}}},
	}}
	got := usage.Reconcile(metered, report)
	c := func(r, p, o int64) usage.Counts {
		return usage.Counts{Requests: r, PromptTokens: p, CompletionTokens: o}
	}
	rows := []usage.ReconciliationRow{
		{Application: "app-a", Model: "gpt-4o", Metered: c(3, 30, 12), Reported: c(3, 30, 12), Delta: c(0, 0, 0)},
		{Application: "app-a", Model: "gpt-4o-mini", Metered: c(1, 10, 4), Reported: c(1, 10, 6), Delta: c(0, 0, 2)},
		{Application: "app-b", Model: "gpt-4o", Metered: c(2, 20, 8), Delta: c(-2, -20, -8)},
		{Application: "key:0123456789ab", Model: "gpt-4o", Reported: c(1, 5, 1), Delta: c(1, 5, 1)},
	}
	want := usage.Reconciliation{Rows: rows, Mismatches: rows[1:],
		Metered: c(6, 60, 24), Reported: c(5, 45, 19), Delta: c(-1, -15, -5)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if r := usage.Reconcile(metered[:1], usage.Report{Tenants: map[string]usage.ReportTenant{"app-a": report.Tenants["app-a"]}}); len(r.Mismatches) != 1 || r.Mismatches[0].Model != "gpt-4o-mini" {
		t.Fatalf("%+v", r)
	}
	if r := usage.Reconcile(nil, usage.Report{}); r.Rows != nil || r.Mismatches != nil || r.Delta != (usage.Counts{}) {
		t.Fatalf("empty: %+v", r)
	}
}
