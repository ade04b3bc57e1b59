package api_test

import (
	"strings"
	"testing"

	"sluice/platform/api"
)

func TestAlertWebhookSecretWriteOnlyAndAudited(t *testing.T) {
	c := newPlatform(t)
	var w api.AlertWebhook
	c.must(200, "GET", "/alerts/webhook", nil, &w)
	if w.Url != "" || w.SecretSet {
		t.Fatalf("no webhook: %+v", w)
	}
	for _, tc := range []struct {
		body any
		path string
	}{
		{map[string]any{"url": "ftp://hooks.example.com/x"}, "$.url"},
		{map[string]any{"url": "/relative"}, "$.url"},
		{map[string]any{"url": "https://user:pw@hooks.example.com/x"}, "$.url"},
		{map[string]any{"url": "https://hooks.example.com/x", "secret": ""}, "$.secret"},
	} {
		e := c.fail(422, "PUT", "/alerts/webhook", tc.body)
		if strings.Join(paths(e), " ") != tc.path {
			t.Errorf("%v: paths %v, want %s", tc.body, paths(e), tc.path)
		}
	}
	const secret = "whsec-never-shown-4242"
	c.must(200, "PUT", "/alerts/webhook", map[string]any{"url": "https://hooks.example.com/a", "secret": secret}, &w)
	if w.Url != "https://hooks.example.com/a" || !w.SecretSet {
		t.Fatalf("set: %+v", w)
	}
	// Without secret, the secret is kept.
	c.must(200, "PUT", "/alerts/webhook", map[string]any{"url": "https://hooks.example.com/b"}, &w)
	c.must(200, "GET", "/alerts/webhook", nil, &w)
	if w.Url != "https://hooks.example.com/b" || !w.SecretSet {
		t.Fatalf("kept secret: %+v", w)
	}
	c.must(204, "DELETE", "/alerts/webhook", nil, nil)
	c.must(204, "DELETE", "/alerts/webhook", nil, nil)
	c.must(200, "GET", "/alerts/webhook", nil, &w)
	if w.Url != "" || w.SecretSet {
		t.Fatalf("after delete: %+v", w)
	}
	var page api.AuditPage
	c.must(200, "GET", "/audit?limit=500", nil, &page)
	actions := map[string]int{}
	for _, e := range page.Entries {
		actions[e.Action]++
	}
	if actions["alerts-webhook.update"] != 2 || actions["alerts-webhook.delete"] != 1 {
		t.Fatalf("audit actions %v", actions)
	}
	_, _, b := c.do("GET", "/audit?limit=500", nil)
	if strings.Contains(string(b), secret) {
		t.Fatal("the audit log shows the secret")
	}
	grepDataDir(t, c.dir, secret)

	var alerts api.AlertPage
	c.must(200, "GET", "/alerts", nil, &alerts)
	if len(alerts.Alerts) != 0 || alerts.NextCursor != "" {
		t.Fatalf("alerts: %+v", alerts)
	}
	c.fail(422, "GET", "/alerts?cursor=nope", nil)
}
