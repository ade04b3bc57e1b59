package yamlfile

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sluice/deployment"
)

// Strings a YAML writer or the loader's ${VAR} expansion could mangle.
var tricky = []string{
	"${HOME}", "$${HOME}", "$$", "$", "${", "}", "a ${B} c", `quote " and ' and \`, "line\nbreak",
	"*alias", "&anchor", "- item", "yes", "no", "null", "~", "1e3", "0x1F", "#comment", "key: value",
	"<<", "\u0001 \t control", "</script>&", ".inf", "-.Inf", ".NaN", "1e3", "0o17", "1_000", "   padded   ", "", "ünïcødé ✓", "{flow}", "[list]", "!tag", "%directive", "@at", "`tick`",
}

func doc() *deployment.Deployment {
	exp := time.Date(2031, 2, 3, 4, 5, 6, 7000, time.UTC)
	retries := 0
	return &deployment.Deployment{
		APIVersion: deployment.APIVersion,
		Providers: []deployment.Provider{{Name: "openai", Type: "openai", URL: "http://127.0.0.1:9000",
			Auth: &deployment.Auth{Header: "Authorization", Value: "Bearer sk-${NOT_A_VAR}$$"}, Retries: &retries,
			ForwardHeaders: []string{"x-mock-*", "X-Trace"}, ApplicationHeader: "X-Mock-Tenant",
			Capacity: &deployment.Capacity{MaxConcurrent: 8, MaxTokensInFlight: 1 << 40}}},
		Applications: []deployment.Application{{ID: "app-1", Name: strings.Join(tricky, "|"),
			Keys:      []deployment.APIKey{{ID: "k1", Hash: deployment.HashKey("x"), ExpiresAt: &exp}},
			Admission: &deployment.ApplicationAdmission{Class: "priority", Weight: 2.5}}},
		Admission: &deployment.Admission{InputWeight: 1, OutputWeight: 3, Classes: map[string]deployment.AdmissionClass{
			"priority": {ReservedShare: 0.25, MaxShare: 0.5, DefaultDeadline: deployment.Duration(2 * time.Second),
				MaxDeadline: deployment.Duration(90 * time.Millisecond * 100), MaxQueuedWork: 5e4},
			"standard": {MaxQueuedWork: 1e6, BurstHeadroom: 0.05}}},
		Routes: []deployment.Route{{Name: "openai", Context: "/openai", Provider: "openai", Policies: []deployment.PolicyEntry{
			{Name: "api-key-auth", Version: "v1", Params: map[string]any{"applications": []any{"app-1"}}},
			{Name: "x", Version: "v1", Resources: &deployment.Resources{Exclude: []string{"/embeddings"}},
				Params: map[string]any{"list": stringsAny(tricky), "n": int64(3), "f": 0.25, "b": true, "nested": map[string]any{"k": "${X}"}}},
		}}},
	}
}

func stringsAny(xs []string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func canon(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// What YAML writes, ParseRendered reads back exactly, whatever the strings hold,
// and no ${...} is looked up in any environment.
func TestYAMLRoundTrip(t *testing.T) {
	t.Setenv("HOME", "/should/not/appear")
	t.Setenv("NOT_A_VAR", "leaked")
	for name, render := range map[string]func(*deployment.Deployment) ([]byte, error){"YAML": YAML, "Loadable": Loadable} {
		t.Run(name, func(t *testing.T) { roundTrip(t, render) })
	}
}

func roundTrip(t *testing.T, render func(*deployment.Deployment) ([]byte, error)) {
	in := doc()
	in.Counters.Redis.CapacityLeases = deployment.CapacityLeases{TTL: deployment.Duration(4 * time.Second),
		Renew: deployment.Duration(time.Second), QueuedRenew: deployment.Duration(50 * time.Millisecond)}
	y, err := render(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseRendered(y, "rendered.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if got, want := out.Applications[0].Name, in.Applications[0].Name; got != want {
		t.Errorf("application name\n got %q\nwant %q", got, want)
	}
	if got := out.Providers[0].Auth.Value; got != "Bearer sk-${NOT_A_VAR}$$" {
		t.Errorf("auth value %q", got)
	}
	if got, want := canon(t, out.Routes[0].Policies), canon(t, in.Routes[0].Policies); got != want {
		t.Errorf("policies\n got %s\nwant %s", got, want)
	}
	if got := out.Applications[0].Keys[0].ExpiresAt; got == nil || !got.Equal(*in.Applications[0].Keys[0].ExpiresAt) {
		t.Errorf("expiresAt %v", got)
	}
	if *out.Providers[0].Retries != 0 {
		t.Errorf("retries: 0 must be kept, got %d", *out.Providers[0].Retries)
	}
	for what, pair := range map[string][2]any{
		"capacity":              {out.Providers[0].Capacity, in.Providers[0].Capacity},
		"application admission": {out.Applications[0].Admission, in.Applications[0].Admission},
		"admission":             {out.Admission, in.Admission},
		"capacity leases":       {out.Counters.Redis.CapacityLeases, in.Counters.Redis.CapacityLeases},
	} {
		if got, want := canon(t, pair[0]), canon(t, pair[1]); got != want {
			t.Errorf("%s\n got %s\nwant %s", what, got, want)
		}
	}
}

func TestJSONIsOrderedAndUnescaped(t *testing.T) {
	j, err := JSON(doc())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		t.Fatalf("%v\n%s", err, j)
	}
	if !strings.HasPrefix(string(j), `{"apiVersion":"sluice/v1","providers":`) {
		t.Fatalf("order: %.80s", j)
	}
	if !strings.Contains(string(j), `"k":"${X}"`) {
		t.Fatalf("JSON must carry the text as is: %s", j)
	}
}
